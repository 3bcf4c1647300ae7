"""promptfoo configs read into a batch (prompts x tests, asserts, providers as settings), and results written
in promptfoo's output shape."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.conftest import ROOT
from webui.batch.asserts.errors import BatchInputError
from webui.batch.promptfoo.reader import load_config, read_config
from webui.batch.promptfoo.export import to_promptfoo
from webui.batch.run.results import ResultRow

SUITE = ROOT / "tests" / "data" / "promptfoo" / "promptfooconfig.yaml"


def test_the_suite_becomes_prompts_times_tests_and_providers_become_settings():
    description, rows, settings = load_config(SUITE)
    assert description == "Capitals" and len(rows) == 4  # 2 tests x 2 prompts
    assert rows[0].text == "What is the capital of France? Answer with the city only."
    assert rows[1].text == "Name the capital city of France." and rows[1].id == "France · prompt.txt"
    assert [a.label for a in rows[0].asserts] == ["not-is-json", "latency:600000", "icontains:paris",
                                                  "similar:Paris"]
    assert rows[0].asserts[2].weight == 2 and rows[0].asserts[3].threshold == 0.1
    japan = rows[2].asserts
    assert japan[2].label == "contains-any:Tokyo,tokyo,TOKYO" and japan[3].kind == "python"
    assert Path(str(japan[3].value)).is_file()
    assert [s.label for s in settings] == ["greedy", "warm"]
    assert settings[0].params.greedy and settings[0].params.max_new_tokens == 8
    assert settings[1].params.temperature == 0.7 and settings[1].params.seed == 3


@pytest.mark.parametrize("config, said", [
    ("prompts: ['{{q}}']\ntests:\n  - vars: {q: hi}\n    assert:\n      - type: moderation\n        value: hi",
     "the assert type 'moderation' is not supported here"),
    ("prompts: ['{{q}}']\ntests:\n  - vars: {q: hi}\n    assert:\n      - type: moderation",
     "'moderation' is not supported"),
    ("prompts: ['{{q}}']\ntests:\n  - vars: {other: hi}", "the template uses {{q}}, but the row has no 'q'"),
    ("tests: []", "prompts is missing"),
    ("prompts: ['x']\nproviders:\n  - id: a\n    config: {temperature: 9}", "temperature must be in"),
    ("prompts: ['x']\nproviders:\n  - id: a\n    config: {mystery: 1}", "unknown setting(s) mystery"),
    ("prompts: ['{{q}}']\ntests:\n  - vars: {q: hi}\n    assert:\n      - type: python\n        value: len(output",
     "python: the inline code does not compile"),
    ("prompts: [x\n", "not valid YAML"),
    ("prompts: ['x']\nproviders: ['workbench:']", "workbench: needs a model name"),
    ("promts: ['x']", "unknown key(s) promts"),
    ("prompts: ['x']\nproviders:\n  - id: a\n    transform: output", "providers[0] (a): transform not supported here"),
    ("prompts:\n  - raw: x\n    function: f", "prompts[0]: function not supported here"),
])
def test_what_cannot_run_is_named(config, said, tmp_path):
    with pytest.raises(BatchInputError, match=said.replace("(", r"\(").replace(")", r"\)")
                       .replace("{", r"\{").replace("}", r"\}").replace("[", r"\[")):
        read_config(config, tmp_path)


def test_a_workbench_provider_names_a_loaded_model_and_others_run_on_the_model_in_use(tmp_path):
    config = ("prompts: ['x']\nproviders:\n  - workbench:SmolLM2-135M-Instruct@llamacpp\n"
              "  - id: workbench:tiny\n    label: small\n    config: {temperature: 0}\n  - openai:chat:gpt-4o-mini")
    _, _, settings = read_config(config, tmp_path)
    assert [(s.label, s.model) for s in settings] == [
        ("workbench:SmolLM2-135M-Instruct@llamacpp", "SmolLM2-135M-Instruct@llamacpp"), ("small", "tiny"),
        ("openai:chat:gpt-4o-mini", None)]


def test_results_in_promptfoos_output_shape():
    row = ResultRow(0, "France", "What is the capital of France?", "greedy", {}, 0, 0, "Paris", "stop", 10, 2,
                    ttft=0.1, tokens_per_second=10.0, passed=True, score=1.0)
    data = json.loads(to_promptfoo([row], "Capitals"))
    (result,) = data["results"]["results"]
    assert result["success"] and result["response"]["output"] == "Paris" and result["provider"]["label"] == "greedy"
    assert result["latencyMs"] == 300 and result["gradingResult"]["pass"] and data["results"]["stats"] == {
        "successes": 1, "failures": 0}


def test_a_providers_seed_is_the_seed_its_rows_run_with():
    """#32: `config: {seed: 7}` was read, then every cell ran with the batch's base seed (0)."""
    from webui.batch.run.grid import plan

    _, rows, settings = load_config(SUITE)
    cells = plan(rows, settings, samples=2, base_seed=100)
    seeds = {s.label: sorted({c.seed for c in cells if c.setting is s}) for s in settings}
    assert seeds == {"greedy": [100, 101], "warm": [3, 4]}  # warm's config says seed 3; greedy names none
    assert all(c.params.seed == c.seed for c in cells)


CHAT_SUITE = ROOT / "tests" / "data" / "promptfoo" / "chat" / "promptfooconfig.yaml"


def test_chat_prompts_from_a_json_file_and_inline_json_are_chats():
    """#32: file://prompt_chat.json was refused and the same chat inline was sent as 71 tokens of literal JSON."""
    _, rows, settings = load_config(CHAT_SUITE)
    assert len(rows) == 8 and [s.label for s in settings] == ["greedy", "seeded"]
    assert rows[0].messages == ({"role": "system", "content": "You answer with one word."},
                                {"role": "user", "content": "What is the capital of France?"})
    assert rows[1].messages == ({"role": "user", "content": "Name the capital of France."},)
    assert json.loads(rows[0].text) == [dict(m) for m in rows[0].messages]  # promptfoo's raw: the chat as JSON
    assert rows[0].id == "test 1 · prompt_chat.json" and rows[7].messages[0]["content"] == "Name the capital of Spain."


@pytest.mark.parametrize("prompts, expected", [
    ("- - {role: system, content: Be brief.}\n  - {role: user, content: '{{q}}'}",  # a chat in YAML
     ({"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"})),
    ("- raw: '[{\"role\": \"developer\", \"content\": \"x\"}, {\"role\": \"user\", \"content\": \"{{q}}\"}]'\n"
     "  label: dev", ({"role": "system", "content": "x"}, {"role": "user", "content": "hi"})),
    ("- '[not json {{q}}'", None),  # text that only starts like JSON stays text
])
def test_chats_written_in_yaml_or_as_raw_json(prompts, expected):
    _, rows, _ = read_config(f"prompts:\n{prompts}\ntests:\n  - vars: {{q: hi}}\n", ROOT)
    assert rows[0].messages == expected
    if expected is None:
        assert rows[0].text == "[not json hi"


def test_prompt_files_by_glob_and_chats_a_line(tmp_path):
    (tmp_path / "a.txt").write_text("First {{q}}\n---\nSecond {{q}}")
    (tmp_path / "b.jsonl").write_text('[{"role": "user", "content": "Third {{q}}"}]\n\n'
                                      '[{"role": "user", "content": "Fourth {{q}}"}]\n')
    (tmp_path / "c.yaml").write_text("- role: user\n  content: Fifth {{q}}\n")
    _, rows, _ = read_config("prompts: ['file://*.txt', 'file://*.jsonl', 'file://c.yaml']\n"
                             "tests:\n  - vars: {q: hi}\n", tmp_path)
    assert [r.messages[0]["content"] if r.messages else r.text for r in rows] == [
        "First hi", "Second hi", "Third hi", "Fourth hi", "Fifth hi"]
    for config, said in (("prompts: ['file://*.csv']", "no file matches *.csv"),
                         ("prompts: ['file://b.jsonl', 'file://a.py']", "a.py is a Python prompt function, which"),
                         ("prompts: [[{role: robot, content: x}]]", "message 0 must be {role: system|user|assistant")):
        (tmp_path / "a.py").write_text("def f(): pass")
        with pytest.raises(BatchInputError, match=re.escape(said)):
            read_config(config, tmp_path)


def test_a_stored_chat_run_opens_in_the_form_as_chats():
    """Opening a stored promptfoo chat run fills the Batch form with a JSONL whose lines are the chats (the text
    box shows their JSON and is not what runs)."""
    from webui.batch.run.grid import GridSpec
    from webui.batch.run.prompts import parse_jsonl
    from webui.store.batch_runs import BatchRun
    from webui.controllers.batch_refill import form_values

    _, rows, _ = load_config(CHAT_SUITE)
    spec = {"rows": [r.to_dict() for r in rows], "grid": GridSpec([], {}).to_dict(), "settings": []}
    values, note = form_values(BatchRun(1, "chats", json.dumps(spec), None, "done", 16, 16, 0.0, 0.0))
    name, data = values["upload"]
    assert [r.messages for r in parse_jsonl(data.decode())] == [r.messages for r in rows]
    assert "each one's own asserts" in note


def test_results_carry_promptfoos_vars_labels_provider_ids_and_assertions():
    """#32: vars were {} on every row, the test's description stood in prompt.label, provider.id was the label,
    icontains-any values were flattened to one string and weight was dropped."""
    from webui.batch.run.grid import plan
    from webui.batch.run.results import Generated, result_for

    _, rows, settings = load_config(SUITE)
    cells = plan(rows, settings)
    results = [result_for(c, Generated("Tokyo", "stop", 5, 1, ttft=0.1, tokens_per_second=10.0)) for c in cells]
    data = json.loads(to_promptfoo(results, "Capitals", rows, {s.label: s.provider for s in settings}))
    out = data["results"]["results"]
    japan = next(r for r in out if r["vars"].get("country") == "Japan" and r["provider"]["label"] == "warm")
    assert japan["provider"] == {"id": "local", "label": "warm"} and japan["prompt"]["label"] in (
        "What is the capital of {{country}}? Answ", "prompt.txt")
    assert japan["testCase"]["vars"] == {"country": "Japan"} and japan["testIdx"] == 1
    kinds = {a["type"]: a for a in japan["testCase"]["assert"]}
    assert kinds["contains-any"]["value"] == ["Tokyo", "tokyo", "TOKYO"]  # a list, as promptfoo writes it
    assert kinds["latency"] == {"type": "latency", "threshold": 600000.0}
    assert kinds["python"]["value"].startswith("file://")
    france = next(r for r in out if r["vars"].get("country") == "France")
    assert france["testCase"]["description"] == "France" and {"type": "icontains", "value": "paris", "weight": 2} in \
        france["testCase"]["assert"]
    assert [c["assertion"]["type"] for c in france["gradingResult"]["componentResults"]] == [
        "not-is-json", "latency", "icontains", "similar"]


def test_a_var_that_uses_another_var_is_filled(tmp_path):
    config = "prompts: ['{{question}}']\ntests:\n  - vars: {city: Lima, question: 'Where is {{city}}?'}"
    _, (row,), _ = read_config(config, tmp_path)
    assert row.text == "Where is Lima?" and row.variables["question"] == "Where is Lima?"


def test_an_asserts_value_gets_the_tests_vars_as_promptfoo_renders_it(tmp_path):
    config = ("prompts: ['{{q}}']\ndefaultTest:\n  assert:\n    - {type: icontains, value: '{{city}}'}\n"
              "tests:\n  - vars: {q: hi, city: Paris}\n    assert:\n"
              "      - {type: contains-any, value: ['{{city}}', Lyon]}\n      - {type: contains, value: 'in {{q}}'}\n")
    _, rows, _ = read_config(config, tmp_path)
    assert [a.label for a in rows[0].asserts] == ["icontains:Paris", "contains-any:Paris,Lyon", "contains:in hi"]
    with pytest.raises(BatchInputError, match=r"tests\[0\]\.assert\[0\].*no 'nowhere' variable"):
        read_config("prompts: ['{{q}}']\ntests:\n  - vars: {q: hi}\n    assert:\n"
                    "      - {type: contains, value: '{{nowhere}}'}\n", tmp_path)


@pytest.mark.parametrize("kind, value, texts", [
    ("contains-any", "Paris, Lyon", ("Paris", "Lyon")),
    ("contains-any", '"Hello, world", Bye', ("Hello, world", "Bye")),  # promptfoo keeps a quoted item whole
    ("not-contains-all", "Paris,France", ("Paris", "France")),
    ("icontains-any", "yes , sure", ("yes", "sure")),
    ("icontains-all", '"a, b"', ('"a', 'b"')),  # only contains-any reads quotes
    ("contains-any", [15, 2.0, "x"], ("15", "2", "x")),  # numbers as JavaScript writes them
])
def test_a_list_kinds_text_value_is_split_on_commas_as_promptfoo_does(kind, value, texts, tmp_path):
    config = {"prompts": ["{{q}}"], "tests": [{"vars": {"q": "hi"}, "assert": [{"type": kind, "value": value}]}]}
    _, rows, _ = read_config(json.dumps(config), tmp_path)
    assert rows[0].asserts[0].value == texts and rows[0].asserts[0].negate == kind.startswith("not-")


def test_a_schema_written_as_text_is_read_as_yaml_as_promptfoo_reads_it(tmp_path):
    config = ("prompts: ['{{q}}']\ntests:\n  - vars: {q: hi}\n    assert:\n"
              "      - {type: is-json, value: \"type: object\\nrequired: [a]\"}\n"
              "      - {type: contains-json, value: '{\"type\": \"object\"}'}\n")
    _, rows, _ = read_config(config, tmp_path)
    assert [a.value for a in rows[0].asserts] == ['{"type":"object","required":["a"]}', '{"type":"object"}']
    assert rows[0].asserts[0].check('{"a": 1}').passed and not rows[0].asserts[0].check('{"b": 1}').passed
    with pytest.raises(BatchInputError, match="is-json: the schema is neither JSON nor YAML"):
        read_config(config.replace("type: object\\nrequired: [a]", "type: [unclosed"), tmp_path)
