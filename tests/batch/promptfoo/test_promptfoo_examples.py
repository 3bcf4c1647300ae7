"""Real promptfoo example configs (tests/data/promptfoo/examples/, each folder's SOURCE.md names the file, the
repository and the commit) load with our reader; those that do not yet say exactly why (#32)."""

from __future__ import annotations

import re
import shutil

import pytest
import yaml

from tests.conftest import ROOT
from webui.batch.asserts.errors import BatchInputError
from webui.batch.promptfoo.reader import load_config, read_config

EXAMPLES = ROOT / "tests" / "data" / "promptfoo" / "examples"
NAMES = sorted(p.name for p in EXAMPLES.iterdir() if (p / "promptfooconfig.yaml").is_file())
NOT_YET: dict[str, str] = {}
"""Examples our reader refuses today, with the start of its message (none since providers' prompt.prefix/suffix
are applied)."""


def test_the_examples_are_real_and_named():
    assert len(NAMES) >= 12 and set(NOT_YET) <= set(NAMES)
    for name in NAMES:
        source = (EXAMPLES / name / "SOURCE.md").read_text(encoding="utf-8")
        assert "https://github.com/promptfoo/promptfoo" in source and re.search(r"commit `[0-9a-f]{40}`", source)
        providers = yaml.safe_load((EXAMPLES / name / "promptfooconfig.yaml").read_text())["providers"]
        ids = [p if isinstance(p, str) else p["id"] for p in providers]
        assert ids == ["workbench:SmolLM2-135M-Instruct"], name  # only the provider was rewritten


@pytest.mark.parametrize("name", NAMES)
def test_each_example_loads_or_says_why_not(name):
    config = EXAMPLES / name / "promptfooconfig.yaml"
    if name in NOT_YET:
        with pytest.raises(BatchInputError, match=re.escape(NOT_YET[name])):
            load_config(config)
        return
    description, rows, settings = load_config(config)  # a BatchInputError here: add the example to NOT_YET
    assert rows and [s.model for s in settings] == ["SmolLM2-135M-Instruct"]
    assert all("{{" not in row.text for row in rows)  # every var filled


def test_a_providers_prompt_prefix_and_suffix_are_its_settings():
    _, rows, (setting,) = load_config(EXAMPLES / "gemma-vs-llama" / "promptfooconfig.yaml")
    assert setting.prompt is not None and setting.prompt.text(rows[0].text) == "[INST] hello there[/INST] "
    assert len(rows) == 10 and setting.params.max_new_tokens == 1024


def test_a_prompt_of_messages_is_a_chat_with_its_files_read():
    """chat-messages-format: ``{label, messages: [{role, content: file://...}]}`` (newer than promptfoo 0.115, read
    as that example and promptfoo's prompt docs describe it): each file's text, trimmed, is a message's template."""
    _, rows, _ = load_config(EXAMPLES / "chat-messages-format" / "promptfooconfig.yaml")
    assert [r.origin["prompt"] for r in rows[:3]] == ["Basic Text Prompt", "Chat with System and User (J2 Templates)",
                                                      "Mixed File Formats"]
    assert rows[0].messages is None and rows[0].text == "Explain neural networks in simple terms."
    system, user = rows[1].messages
    assert system["role"] == "system" and system["content"].startswith("You are a helpful assistant specialized in "
                                                                       "machine learning.\n")
    assert user == {"role": "user", "content": "Explain neural networks in simple terms."}  # its newline trimmed
    mixed = rows[5].messages
    assert [m["role"] for m in mixed] == ["system", "user", "assistant", "user"]
    assert "**REST APIs**" in mixed[1]["content"] and "web development" in mixed[2]["content"]


def test_a_messages_prompt_refuses_a_prompt_function_by_name(tmp_path):
    (tmp_path / "promptfooconfig.yaml").write_text(
        "prompts:\n  - label: chat\n    messages:\n      - role: user\n        content: file://prompt.js\n"
        "providers: [workbench:m]\ntests:\n  - vars: {a: 1}\n", encoding="utf-8")
    with pytest.raises(BatchInputError, match=r"prompts\[0\]\.messages\[0\]: prompt.js is a prompt function"):
        load_config(tmp_path / "promptfooconfig.yaml")


def test_a_csv_of_prompts_gives_a_prompt_a_row_labelled_by_its_label_column():
    """csv-prompts (promptfoo 0.115 reads CSV prompt files; tests/e2e/test_promptfoo_agreement.py holds all four of
    the example's files against it): a ``prompt`` and a ``label`` column; a prompt that is a JSON chat is a chat."""
    _, rows, _ = load_config(EXAMPLES / "csv-prompts" / "promptfooconfig.yaml")
    assert len(rows) == 15 and [r.origin["prompt"] for r in rows[:5]] == ["Basic Query", "ELI5", "Academic",
                                                                          "Poetry", "Facts"]
    assert rows[0].text == "Tell me about artificial intelligence"
    assert [m["role"] for m in rows[2].messages] == ["system", "user"]
    assert rows[2].messages[1]["content"] == "Provide a detailed academic explanation of artificial intelligence."


def test_a_prompt_that_is_json_has_its_strings_rendered_and_is_written_back_as_json(tmp_path):
    """As promptfoo 0.115's renderPrompt: a var's quotes inside a JSON prompt stay JSON; a quoted string prompt is
    written back without what follows its closing quote."""
    text = ("prompts: ['{\"q\": \"{{q}}\"}', '\"say {{q}}\"  ']\nproviders: [workbench:m]\n"
            "tests: [{vars: {q: 'a \"b\"'}}]")
    _, rows, _ = read_config(text, tmp_path)
    assert [r.text for r in rows] == ['{\n  "q": "a \\"b\\""\n}', '"say a \\"b\\""']


def test_a_tests_own_prompts_list_chooses_the_prompts_it_runs_on():
    """config-tests-per-prompt: a test's ``prompts`` (newer than promptfoo 0.115, which runs every test on every
    prompt; read as the example's README and promptfoo's docs describe it) by label or id; none: every prompt."""
    _, rows, _ = load_config(EXAMPLES / "config-tests-per-prompt" / "promptfooconfig.yaml")
    cells = [(r.origin["testIdx"], r.origin["prompt"]) for r in rows]
    assert cells == [(0, "Factual Assistant"), (1, "Factual Assistant"), (2, "Creative Writer"),
                     (3, "Creative Writer"), (4, "Technical Expert"), (5, "Factual Assistant"),
                     (5, "Technical Expert"), (6, "Factual Assistant"), (6, "Creative Writer"), (6, "Technical Expert")]
    assert rows[1].origin["promptIdx"] == 0 and rows[2].origin["promptIdx"] == 1


@pytest.mark.parametrize("chosen,expected", [(["Math:*"], ["Math:Basic", "Math:Advanced"]),
                                             (["*Advanced"], ["Math:Advanced"]), (["Math"], ["Math:Basic",
                                                                                         "Math:Advanced"]),
                                             (["w"], ["Words"])])
def test_a_tests_prompts_match_by_wildcard_group_or_id(tmp_path, chosen, expected):
    config = {"prompts": [{"label": "Math:Basic", "raw": "1+1"}, {"label": "Math:Advanced", "raw": "d/dx"},
                          {"id": "w", "label": "Words", "raw": "hi"}],
              "providers": ["workbench:m"], "tests": [{"vars": {}, "prompts": chosen}]}
    _, rows, _ = read_config(yaml.safe_dump(config), tmp_path)
    assert [r.origin["prompt"] for r in rows] == expected


def test_a_tests_prompts_naming_no_prompt_is_refused(tmp_path):
    config = {"prompts": [{"label": "A", "raw": "x"}], "providers": ["workbench:m"],
              "tests": [{"vars": {}, "prompts": ["B*"]}]}
    with pytest.raises(BatchInputError, match=r"tests\[0\]\.prompts: 'B\*' is no prompt's label or id; labels: A"):
        read_config(yaml.safe_dump(config), tmp_path)


def test_csv_config_columns_set_the_rows_asserts_in_order(tmp_path):
    """csv-metadata's tests.csv (asserts in __expected1 and __expected2) with promptfoo's __config columns added:
    ``__config:__expected:threshold`` sets the row's first assert, ``__config:__expected2:threshold`` its second
    (newer than promptfoo 0.115, which reads such columns as vars; read as promptfoo's csv.ts and its docs' CSV
    columns table say: the index among the row's asserts, a blank cell setting nothing)."""
    shutil.copytree(EXAMPLES / "csv-metadata", tmp_path / "csv-metadata")
    table = tmp_path / "csv-metadata" / "tests.csv"
    lines = table.read_text(encoding="utf-8").splitlines()
    cells = [",__config:__expected:threshold,__config:__expected2:threshold", ",1,0.25", ",,0.5", ",,"]
    table.write_text("\n".join(line + cell for line, cell in zip(lines, cells)) + "\n", encoding="utf-8")
    _, rows, _ = load_config(tmp_path / "csv-metadata" / "promptfooconfig.yaml")
    assert [[(a.kind, a.threshold) for a in r.asserts] for r in rows] == [
        [("contains", 1.0), ("llm-rubric", 0.25)], [("contains", None), ("llm-rubric", 0.5)],
        [("contains", None), ("llm-rubric", None)]]
    assert rows[1].origin["metadata"] == {"category": "science", "tags": ["physics", "advanced,theory", "quantum"]}
