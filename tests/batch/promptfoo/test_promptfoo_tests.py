"""promptfoo suites as promptfoo users write them (#32): tests from CSV/JSONL/YAML files and globs, promptfoo's
CSV assert shorthands, vars from files, list vars expanded, scenarios, defaultTest and thresholds, and every
problem of a suite reported at once with where it is."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest

from tests.conftest import ROOT
from webui.batch.asserts.errors import BatchInputError
from webui.batch.promptfoo.reader import load_config, read_config
from webui.batch.promptfoo.tests import assertion_from_string
from webui.batch.run.prompts import PromptRow

FILES = ROOT / "tests" / "data" / "promptfoo" / "files" / "promptfooconfig.yaml"


def _rows() -> dict[str, object]:
    _, rows, _ = load_config(FILES)
    return {r.id: r for r in rows}


def test_csv_tests_in_promptfoos_form():
    rows = _rows()
    france = rows["france"]
    assert france.text == "Answer briefly.Q: Capital of France?"  # __prefix before the prompt, as promptfoo adds it
    assert [a.label for a in france.asserts] == ["contains:Paris", "icontains-any:paris,lutetia"]
    assert france.threshold == 0.5 and france.origin["metadata"] == {"topic": "geo"}
    assert [a.label for a in rows["sum"].asserts] == ["equals:4", "not-contains:five"]  # plain text: equals
    assert [a.label for a in rows["hi"].asserts] == ["llm-rubric:is friendly", "regex:^h"]  # grade: is a rubric
    (similar,) = rows["test 4"].asserts
    assert similar.kind == "similar" and similar.threshold == 0.9 and rows["test 4"].origin["description"] is None


def test_jsonl_and_globbed_yaml_test_files():
    rows = _rows()
    assert [a.label for a in rows["test 5"].asserts] == ["contains:Tokyo"] and rows["spain"].asserts == []
    assert rows["test 7"].text == "Q: Capital of Italy?" and rows["test 8"].text == "Q: Capital of Peru?"
    assert [r.origin["testIdx"] for r in _rows().values()][:9] == list(range(9))


def test_vars_from_a_file_fill_the_prompt_and_the_asserts():
    chile = _rows()["test 9"]
    assert chile.text == "Q: Capital of Chile?" and [a.label for a in chile.asserts] == ["icontains:Santiago"]


def test_a_var_glob_gives_a_test_per_file_and_lists_their_product():
    rows = _rows()
    assert [rows[f"docs #{n}"].text for n in (1, 2)] == ["Q: Summarise: first doc", "Q: Summarise: second doc"]
    grid = [r for r in rows.values() if r.id.startswith("grid")]
    assert [r.text for r in grid] == ["Q: x 1", "Q: x 2", "Q: x 3", "Q: y 1", "Q: y 2", "Q: y 3"]  # first var slowest
    assert grid[0].variables["extra"] == '{"k": "v"}'  # a mapping stays one value (its JSON)


@pytest.mark.parametrize("text, expected", [
    ("contains: Paris", {"type": "contains", "value": "Paris"}),
    ("not-icontains:x", {"type": "not-icontains", "value": "x"}),
    ("contains-all: a, b", {"type": "contains-all", "value": ["a", "b"]}),
    ("similar: close", {"type": "similar", "value": "close", "threshold": 0.8}),
    ("similar(0.6):close", {"type": "similar", "value": "close", "threshold": 0.6}),
    ("llm-rubric: polite", {"type": "llm-rubric", "value": "polite"}),
    ("python: output == 'x'", {"type": "python", "value": "output == 'x'"}),
    ("file://check.py:f", {"type": "python", "value": "file://check.py:f"}),
    ("fn: output.length < 5", {"type": "javascript", "value": "output.length < 5"}),
    ("is-json", {"type": "is-json"}),
    ("levenshtein(2): x", {"type": "levenshtein", "value": "x", "threshold": 2.0}),
    ("Paris: the capital", {"type": "equals", "value": "Paris: the capital"}),
])
def test_promptfoos_csv_shorthands(text, expected):
    assert assertion_from_string(text) == expected


def test_csv_problems_name_the_row_and_column(tmp_path):
    (tmp_path / "t.csv").write_text("q,__expected,__expected2,__threshold\n"
                                    "a,contains: x,moderation: y,\nb,webhook: output,,high\n")
    with pytest.raises(BatchInputError) as caught:
        read_config("prompts: ['{{q}}']\ntests: file://t.csv", tmp_path)
    said = str(caught.value)
    assert "3 problems" in said
    assert "t.csv row 1 column __expected2: the assert type 'moderation' is not supported here" in said
    assert "t.csv row 2 column __expected: the assert type 'webhook' is not supported here" in said
    assert "t.csv row 2 column __threshold: 'high' is not a number" in said


@pytest.mark.parametrize("files, config, said", [
    ({}, "tests: file://none/*.csv", "tests: no file matches none/*.csv"),
    ({"t.txt": "x"}, "tests: [file://t.txt]", "tests[0]: t.txt: test files are read as .csv, .yaml"),
    ({"t.jsonl": '{"vars": {"q": 1}}\n[1]\n'}, "tests: file://t.jsonl", "t.jsonl line 2: must be a test"),
    ({"t.yaml": "- vars: {q: a}\n  asert: []\n"}, "tests: file://t.yaml",
     "t.yaml[0]: unknown or unsupported key(s) asert"),
    ({}, "tests:\n  - vars: {q: file://missing.txt}", "tests[0].vars.q: no file matches missing.txt"),
    ({"v.py": "x = 1"}, "tests:\n  - vars: {q: file://v.py}", "tests[0].vars.q: v.py is a script"),
    ({"v.txt": "q: 1"}, "tests:\n  - vars: file://v.txt", "tests[0].vars: v.txt: a vars file is read as YAML"),
    ({}, "tests:\n  - vars: {q: []}", "tests[0].vars.q: is an empty list"),
    ({}, "tests:\n  - vars: {q: a}\n    options: {provider: x}", "tests[0].options.provider: not supported here"),
    ({}, "tests:\n  - vars: {q: a}\n    threshold: 2", "tests[0].threshold: must be a score between 0 and 1"),
    ({"t.csv": "q,__expected\na,b,c\n"}, "tests: file://t.csv", "t.csv row 1: has 3 cells but the header has 2"),
    ({"t.csv": "q,__expected\na\n"}, "tests: file://t.csv", "t.csv row 1: has 1 cells but the header has 2"),
    ({}, "tests:\n  - vars: {q: a}\n    assert:\n      - type: icontains\n        value: '{{nope}}'",
     "tests[0].assert[0].value: the template uses {{nope}}"),
])
def test_what_is_wrong_in_tests_and_vars_is_named_with_its_place(files, config, said, tmp_path):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    with pytest.raises(BatchInputError, match=re.escape(said)):
        read_config("prompts: ['{{q}}']\n" + config, tmp_path)


def test_a_var_file_is_read_as_text_a_json_file_too_and_yaml_as_its_compact_json(tmp_path):
    """promptfoo 0.115's renderPrompt (dist/src/evaluatorHelpers.js) loads a ``file://`` var: .yaml/.yml as
    ``JSON.stringify(js_yaml.load(text))``, any other file (.json included: not parsed) as
    ``fs.readFileSync(filePath, 'utf8').trim()``; then it drops one trailing newline from every var."""
    (tmp_path / "a.md").write_text("\n# Title\n\n")
    (tmp_path / "b.json").write_text('{\n  "k": [1, 2.0],\n  "s": "é"\n}\n')
    (tmp_path / "d.yaml").write_text("k: [1, 2.0]\ns: é\nday: 2024-01-02\n")
    (tmp_path / "e.yml").write_text("just text\n")
    _, rows, _ = read_config("prompts: ['{{a}}|{{b}}|{{c}}|{{d}}|{{e}}.']\ntests:\n  - vars: {a: file://a.md, "
                             "b: file://b.json, c: \"x\\n\\n\", d: file://d.yaml, e: file://e.yml}", tmp_path)
    assert rows[0].text == ('# Title|{\n  "k": [1, 2.0],\n  "s": "é"\n}|x\n|'
                            '{"k":[1,2],"s":"é","day":"2024-01-02T00:00:00.000Z"}|"just text".')
    assert rows[0].variables["b"] == '{\n  "k": [1, 2.0],\n  "s": "é"\n}'  # what asserts see as context.vars
    assert rows[0].variables["c"] == "x\n"  # one newline off for the asserts too: promptfoo takes it off test.vars


def test_every_problem_of_a_suite_at_once_capped(tmp_path):
    tests = "".join(f"  - vars: {{q: a}}\n    assert: [{{type: moderation, value: x{i}}}]\n" for i in range(25))
    with pytest.raises(BatchInputError) as caught:
        read_config(f"promts: x\nprompts: ['{{{{q}}}}']\nproviders: [{{id: a, config: {{mystery: 1}}}}]\n"
                    f"tests:\n{tests}", tmp_path)
    said = str(caught.value)
    assert said.startswith("promptfoo config: 27 problems:\n- unknown key(s) promts\n")
    assert "providers[0] (a).config: unknown setting(s) mystery" in said
    assert "tests[17].assert[0]: the assert type 'moderation'" in said and "tests[18]" not in said
    assert said.endswith("- and 7 more")


SCENARIOS = ROOT / "tests" / "data" / "promptfoo" / "scenarios" / "promptfooconfig.yaml"


def _result(row: object, output: str) -> object:
    from webui.batch.run.grid import Cell, Setting
    from webui.batch.run.results import Generated, result_for
    from webui.engine.params import SamplingParams

    cell = Cell(row, Setting("greedy", SamplingParams()), 0, 0)  # type: ignore[arg-type]
    return result_for(cell, Generated(output, "stop", 3, 2))


def test_scenarios_cross_each_config_with_each_test_after_the_tests():
    _, rows, _ = load_config(SCENARIOS)
    assert [r.text for r in rows] == [f"Hello, translate '{t}' to {lang}. Be brief." for t, lang in (
        ("cat", "German"), ("red", "French"), ("blue", "French"), ("red", "Spanish"), ("blue", "Spanish"))]
    assert [r.origin["testIdx"] for r in rows] == [0, 1, 2, 3, 4]
    assert [a.label for a in rows[3].asserts] == ["not-icontains:sorry", "icontains:red", "contains:r"]  # config's
    assert rows[1].origin["metadata"] == {"suite": "translations", "lang": "fr"}  # defaultTest's and config's
    assert rows[3].origin["metadata"] == {"suite": "translations"}
    assert [r.threshold for r in rows] == [0.75, 0.5, 0.5, 0.5, 0.5]  # the test's, else defaultTest's
    stored = PromptRow.from_dict(json.loads(json.dumps(rows[0].to_dict())))  # a stored run keeps them
    assert stored.threshold == 0.75 and [a.metric for a in stored.asserts] == ["polite", None, "style", "style"]


def test_an_assert_set_shares_its_weight_and_a_threshold_passes_on_the_weighted_score():
    _, rows, _ = load_config(SCENARIOS)
    plain = rows[0]
    assert [(a.label, a.weight, a.metric) for a in plain.asserts] == [
        ("not-icontains:sorry", 1, "polite"), ("contains:Katze", 3, None), ("not-contains:!", 0.5, "style"),
        ("regex:^[A-Z]", 1.5, "style")]
    good, loud, wrong = (_result(plain, out) for out in ("Katze", "Katze!", "Cat"))
    assert good.passed and good.score == 1.0
    # promptfoo: (1 + 3 + 2 * (0 + 3) / 4) / 6 = 0.9167 >= 0.75 passes though one assert failed
    assert loud.passed and loud.score == pytest.approx(5.5 / 6) and not all(a.passed for a in loud.asserts)
    assert not wrong.passed and wrong.score == pytest.approx(3 / 6)  # 0.5 < 0.75
    without = _result(dataclasses.replace(plain, threshold=None), "Katze!")
    assert not without.passed  # no threshold: every assert must pass


def test_metrics_are_the_exports_named_scores():
    from webui.batch.promptfoo.export import to_promptfoo

    _, rows, _ = load_config(SCENARIOS)
    data = json.loads(to_promptfoo([_result(rows[0], "Katze!")], "Scenarios", rows))
    (result,) = data["results"]["results"]
    # promptfoo 0.115 sums each metric's scores, unweighted: style is 0 (not-contains:!) + 1 (regex)
    assert result["namedScores"] == {"polite": 1.0, "style": 1.0}
    assert result["gradingResult"]["namedScores"] == result["namedScores"]
    assert result["testCase"]["assert"][2]["metric"] == "style"
    assert result["testCase"]["metadata"] == {"suite": "translations"}


def test_a_scenario_without_tests_is_its_config_entries(tmp_path):
    _, rows, _ = read_config("prompts: ['{{q}}']\nscenarios:\n  - config: [{vars: {q: a}}, {vars: {q: b}}]",
                             tmp_path)
    assert [r.text for r in rows] == ["a", "b"]


@pytest.mark.parametrize("config, said", [
    ("scenarios: {x: 1}", "scenarios: must be a list"),
    ("scenarios:\n  - config: [{vars: {q: a}}]\n    test: []", "scenarios[0]: unknown key(s) test"),
    ("scenarios:\n  - config: [[1]]\n    tests: [{vars: {q: b}}]", "scenarios[0].config[0]: must be a mapping"),
    ("tests:\n  - vars: {q: a}\n    assert:\n      - type: assert-set\n        threshold: 1.5\n        assert: []",
     "tests[0].assert[0].threshold: must be a score between 0 and 1, got 1.5"),
    ("tests:\n  - vars: {q: a}\n    assert:\n      - type: assert-set\n        assert: [{type: assert-set}]",
     "tests[0].assert[0].assert: an assert-set inside an assert-set is not read here"),
    ("tests:\n  - vars: {q: a}\n    assert:\n      - type: assert-set\n        assert:\n          - type: moderation",
     "tests[0].assert[0].assert[0]: the assert type 'moderation' is not supported here"),
    ("tests:\n  - vars: {q: a}\n    assert:\n      - type: equals\n        value: a\n        metric: 3",
     "tests[0].assert[0]: assert {"),
    ("defaultTest: [1]", "defaultTest: must be a mapping"),
    ("defaultTest: {options: {transformVars: x}}", "defaultTest.options.transformVars: not supported here"),
])
def test_what_is_wrong_in_scenarios_and_asserts_is_named(config, said, tmp_path):
    with pytest.raises(BatchInputError, match=re.escape(said)):
        read_config("prompts: ['{{q}}']\n" + config, tmp_path)


PER_PROMPT = """
prompts:
  - {raw: 'Short: {{q}}', label: short, config: {max_tokens: 5, temperature: 0.2, stop: ['END']}}
  - {raw: 'Long: {{q}}', label: long}
  - {raw: 'Other: {{q}}', label: 'group:one'}
providers:
  - {id: a, label: both, config: {max_tokens: 50, stop: ['STOP']}}
  - {id: b, label: long-only, prompts: [long, group]}
tests:
  - vars: {q: hi}
"""


def test_a_prompts_config_applies_to_its_rows_and_a_providers_prompts_filter_picks_its_prompts(tmp_path):
    from webui.batch.run.grid import plan

    _, rows, settings = read_config(PER_PROMPT, tmp_path)
    assert rows[0].params == {"max_tokens": 5, "temperature": 0.2, "stop": ["END"]} and rows[1].params is None
    assert [r.settings for r in rows] == [("both",), None, None]  # long-only runs long and the group:* prompts
    cells = plan(rows, settings, samples=1, base_seed=4)
    assert [(c.setting.label, c.row.origin["prompt"]) for c in cells] == [
        ("both", "short"), ("both", "long"), ("both", "group:one"), ("long-only", "long"), ("long-only", "group:one")]
    short = cells[0].params  # the prompt's config over the provider's; stop strings of both
    assert (short.max_new_tokens, short.temperature, short.stop, short.seed) == (5, 0.2, ("END", "STOP"), 4)
    assert cells[1].params.max_new_tokens == 50 and cells[1].params.stop == ("STOP",)
    stored = PromptRow.from_dict(json.loads(json.dumps(rows[0].to_dict())))  # a stored run re-runs the same
    assert stored.params == rows[0].params and stored.settings == ("both",)


@pytest.mark.parametrize("config, said", [
    ("prompts:\n  - {raw: x, config: {seed: 3}}", "prompts[0] (prompt 1).config: seed not supported here"),
    ("prompts:\n  - {raw: x, config: {response_format: {type: yaml}}}",
     "prompts[0] (prompt 1).config.response_format: response_format: type must be text, json_object or json_schema"),
    ("prompts:\n  - {raw: x, config: {temperature: 9}}", "prompts[0] (prompt 1).config: temperature must be in"),
    ("prompts: [x]\nproviders:\n  - {id: a, prompts: nope}", "providers[0] (a).prompts must be a list of prompt"),
    ("prompts: [x]\nproviders:\n  - {id: a, prompts: [nope]}", "providers (a).prompts: 'nope' is no prompt's label"),
])
def test_what_is_wrong_in_a_prompts_config_or_a_providers_filter_is_named(config, said, tmp_path):
    with pytest.raises(BatchInputError, match=re.escape(said)):
        read_config(config, tmp_path)


def test_csv_config_columns_metadata_lists_and_metric(tmp_path):
    (tmp_path / "t.csv").write_text('q,__expected,__expected2,__config:__expected2:threshold,'
                                    '__metadata:tags[],__metric\n'
                                    'a,contains: a,similar: a b,0.3,"x, y\\, z",acc\n')
    _, (row,), _ = read_config("prompts: ['{{q}}']\ntests: file://t.csv", tmp_path)
    assert [(a.label, a.threshold, a.metric) for a in row.asserts] == [("contains:a", None, "acc"),
                                                                       ("similar:a b", 0.3, "acc")]
    assert row.origin["metadata"] == {"tags": ["x", "y, z"]}
    for header, cell, said in (("__config:__expected:weight", "1", "write __config:__expected:threshold"),
                               ("__config:__expected:threshold", "high", "'high' is not a number"),
                               ("__config:__expected3:threshold", "0.5",
                                "sets assert 3's threshold, but this row has 1 assert(s) (its non-empty __expected "
                                "columns, in order: __expected)"),
                               ("__metadata", "x", "needs a key")):
        (tmp_path / "t.csv").write_text(f"q,__expected,{header}\na,contains: a,{cell}\n")
        with pytest.raises(BatchInputError, match=re.escape(f"t.csv row 1 column {header}")) as caught:
            read_config("prompts: ['{{q}}']\ntests: file://t.csv", tmp_path)
        assert said in str(caught.value)


def test_a_scenarios_vars_may_come_from_files(tmp_path):
    (tmp_path / "lang.yaml").write_text("lang: French\n")
    (tmp_path / "word.json").write_text('{"q": "cat"}')
    _, (row,), _ = read_config("prompts: ['{{q}} in {{lang}}']\nscenarios:\n  - config: [{vars: file://lang.yaml}]\n"
                               "    tests: [{vars: file://word.json}]", tmp_path)
    assert row.text == "cat in French"


def test_every_bad_prompt_and_provider_is_named_at_once(tmp_path):
    with pytest.raises(BatchInputError) as caught:
        read_config("prompts:\n  - {raw: x, function: f}\n  - 3\n  - ok {{q}}\nproviders:\n  - {id: a}\n"
                    "  - {id: b, transform: t}\n  - {id: c, label: a}\n  - {id: d, config: {temperature: 9}}\n"
                    "tests: [{vars: {q: 1}}]", tmp_path)
    said = str(caught.value)
    assert said.startswith("promptfoo config: 5 problems:")
    for part in ("prompts[0]: function not supported here", "prompts[1] must be a text",
                 "providers[3] (d).config: temperature must be in", "providers[1] (b): transform not supported here",
                 "two providers are labelled 'a'"):
        assert part in said, part
