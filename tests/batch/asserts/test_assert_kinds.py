"""The assert kinds table is the one source: every kind round-trips through both written forms, and a kind added
to the table alone is parsed, checked, labelled, read from promptfoo and listed in the help."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from tests.conftest import ROOT
from webui.batch.asserts.assertion import Assert, assert_label, parse_assert
from webui.batch.asserts.errors import BatchInputError
from webui.batch.asserts.kinds import ASSERT_KINDS, AssertKind, kinds_help
from webui.batch.promptfoo.dialect import DIALECT
from webui.batch.promptfoo.kinds import PROMPTFOO_KINDS, PromptfooKind
from webui.batch.asserts.values import NONE, NUMBER, TEXT
from webui.batch.asserts.types import Observed, Outcome
from webui.batch.run.cli import build_parser
from webui.batch.run.prompts import load_prompts_text
from webui.batch.promptfoo.reader import read_config, supported


@pytest.fixture
def checks_file(tmp_path, monkeypatch):
    """python's example value (checks.py:get_assert) names a file in the working folder."""
    (tmp_path / "checks.py").write_text("def get_assert(output, context):\n    return 'Paris' in output\n")
    monkeypatch.chdir(tmp_path)


def written_forms() -> list[str]:
    """Each kind with its example value, and not- before each kind that is not itself a negation."""
    kinds = {name: kind for name, kind in ASSERT_KINDS.items() if not kind.refused}
    plain = [f"{name}:{kind.example}" if kind.example else name for name, kind in kinds.items()]
    return plain + [f"not-{spec}" for spec, kind in zip(plain, kinds.values()) if not kind.negation_of]


@pytest.mark.parametrize("spec", written_forms())
def test_every_kind_round_trips_through_the_compact_and_the_dict_form(spec, checks_file):
    item = parse_assert(spec)
    assert assert_label(item) == item.label == spec
    assert parse_assert(item.label) == item
    again = parse_assert(item.to_dict())
    assert again == item
    assert json.dumps(again.to_dict()) == json.dumps(item.to_dict())
    assert item.to_dict()["type"] == spec.partition(":")[0]


def test_every_kind_has_an_example_and_a_check_and_scored_kinds_a_threshold():
    for name, kind in ASSERT_KINDS.items():
        valueless = kind.value is NONE or name in ("context-faithfulness", "context-relevance",
                                                   "answer-relevance", "max-score")
        assert kind.name == name and (kind.example or valueless) and callable(kind.check), name
        assert kind.threshold_unit or 0 <= kind.threshold <= 1, name
    assert {name for name, kind in ASSERT_KINDS.items() if kind.scored} == {
        "similar", "python", "javascript", "llm-rubric", "rouge-n", "bleu", "gleu", "meteor", "perplexity-score",
        "model-graded-closedqa", "factuality", "g-eval", "context-recall", "context-relevance", "context-faithfulness",
        "select-best", "max-score", "answer-relevance", "classifier", "tool-call-f1"}


def test_not_contains_is_contains_negated_whichever_way_it_is_written():
    for written in ("not-contains:London", {"type": "not-contains", "value": "London"}):
        item = parse_assert(written)
        assert (item.kind, item.negate, item.label) == ("contains", True, "not-contains:London")
        assert item.check("Paris, then London").detail == "output contains 'London' (at character 12)"
    with pytest.raises(BatchInputError, match="unknown assert 'not-not-contains:x'"):
        parse_assert("not-not-contains:x")


def test_the_help_the_promptfoo_reader_and_the_errors_list_the_table():
    listed = [kind for kind in ASSERT_KINDS.values() if not kind.negation_of and not kind.refused]
    assert ("meteor:reference" in kinds_help()) == (not ASSERT_KINDS["meteor"].refused)  # listed where installed
    assert kinds_help().split(", ")[0] == "contains" and all((k.usage or k.name) in kinds_help() for k in listed)
    assert kinds_help() in " ".join(build_parser().epilog.split())
    assert set(supported()) == {"contains", "icontains", "contains-any", "contains-all", "icontains-any",
                                "icontains-all", "equals", "regex", "starts-with", "is-json", "contains-json",
                                "is-xml", "contains-xml", "word-count", "cost", "similar", "python",
                                "javascript", "latency", "llm-rubric", "levenshtein", "rouge-n", "bleu", "gleu", "meteor", "is-sql",
                                "contains-sql", "is-html", "contains-html", "is-refusal", "finish-reason",
                                "is-valid-openai-tools-call", "is-valid-openai-function-call", "tool-call-f1",
                                "called-tool", "perplexity",
                                "perplexity-score", "model-graded-closedqa", "factuality", "g-eval", "context-recall",
                                "context-relevance", "context-faithfulness", "select-best", "max-score",
                                "answer-relevance", "classifier"}  # refused ones too, so the reader names why
    with pytest.raises(BatchInputError) as info:
        parse_assert("nothing:here")
    assert ", ".join(ASSERT_KINDS) in str(info.value)


def test_the_user_guide_names_every_kind():
    guide = (ROOT / "docs" / "user-guide.md").read_text()
    batch = guide[guide.index("- **Batch**"):]
    batch = batch[:batch.index("\n- **")]
    for name, kind in ASSERT_KINDS.items():
        assert f"`{name}:" in batch or f"`{name}`" in batch, name


def _ends_with(a, seen: Observed) -> Outcome:
    return Outcome(seen.output.rstrip().endswith(a.value), f"output does not end with '{a.value}'")


def _shortness(a, seen: Observed) -> Outcome:
    words = len(seen.output.split())
    return Outcome(True, f"{words} words", min(1.0, float(a.value) / max(words, 1)), True)


def test_a_kind_added_to_the_table_alone_works_everywhere(monkeypatch, tmp_path):
    monkeypatch.setitem(ASSERT_KINDS, "ends-with", AssertKind("ends-with", TEXT, _ends_with, "Paris."))
    monkeypatch.setitem(ASSERT_KINDS, "short", AssertKind("short", NUMBER, _shortness, "5", unit="words",
                                                          scored=True, threshold=0.8))
    monkeypatch.setitem(PROMPTFOO_KINDS, "short", PromptfooKind(read=None))
    item = parse_assert("ends-with:Paris.")
    assert parse_assert(item.to_dict()) == item == parse_assert({"type": "ends-with", "value": "Paris."})
    assert item.check("It is Paris.").passed
    assert item.check("Paris. Or Lyon").detail == "output does not end with 'Paris.'"
    negated = parse_assert("not-ends-with:Paris.")
    assert negated.check("It is Paris.").detail == "the output passes ends-with:Paris."
    with pytest.raises(BatchInputError, match="ends-with needs a value, e.g. ends-with:Paris."):
        parse_assert("ends-with:")

    short = parse_assert("short:3")
    assert short.label == "short:3" and short.pass_at == 0.8
    result = short.check("one two three four five")
    assert not result.passed and result.detail == "5 words (score 0.60, needs 0.8)"
    assert parse_assert("short:5").check("one two three four five").passed
    with pytest.raises(BatchInputError, match="short needs a number of words >= 0"):
        parse_assert("short:many")

    assert "ends-with" in kinds_help() and "short" in kinds_help()
    config = "prompts: ['{{q}}']\ntests:\n  - vars: {q: hi}\n    assert:\n      - type: not-ends-with\n        value: x"
    _, rows, _ = read_config(config, tmp_path)
    assert rows[0].asserts == [as_read_from_promptfoo("not-ends-with:x")]
    with pytest.raises(BatchInputError, match="the assert type 'short' is not supported here"):
        read_config(config.replace("not-ends-with", "short"), tmp_path)
    rows = load_prompts_text("q.csv", "prompt,expected\nhi,ends-with:there\n")
    assert rows[0].asserts == [parse_assert("ends-with:there")]


def test_contains_json_finds_an_object_inside_the_text_and_holds_it_to_the_schema():
    schema = {"type": "object", "required": ["city"]}
    item = parse_assert({"type": "contains-json", "value": schema})
    assert item.check('Here you go: {"city": "Paris"} and more').passed
    assert not item.check('Here: {"town": "Paris"}').passed
    assert parse_assert("contains-json").check('x {"a": 1} y').passed
    failed = parse_assert("contains-json").check("no json {here")
    assert not failed.passed and failed.detail == "output contains no valid JSON object"
    assert parse_assert("not-contains-json").check("plain text").passed


def test_word_count_counts_runs_of_non_space_like_promptfoo():
    assert parse_assert("word-count:3").check("  one two\nthree ").passed
    failed = parse_assert({"type": "word-count", "value": 2}).check("one two three")
    assert not failed.passed and failed.detail == "output has 3 words, expected 2"


@pytest.mark.parametrize("spec, output, passed, detail", [
    ("is-xml", "<a><b>1</b></a>", True, ""),
    ("is-xml", "<a><b>1</a>", False, "output is not well-formed XML (mismatched tag: line 1, column 9)"),
    ("is-xml", "Sure: <a/>", False, "output is not XML (it does not start with a tag)"),
    ("is-xml:a.b", "<a><b>1</b></a>", True, ""),
    ("is-xml:a.b,a.c", "<a><b>1</b></a>", False, "XML lacks the element(s) a.c"),
    ("contains-xml", "Sure: <a><b>1</b></a> done", True, ""),
    ("contains-xml:a.c", "<a><b>1</b></a>", False,
     "no XML element in the output passes: XML lacks the element(s) a.c"),
    ("contains-xml", "no markup", False, "output contains no XML"),
])
def test_xml_kinds_parse_the_output_and_look_for_the_required_elements(spec, output, passed, detail):
    result = parse_assert(spec).check(output)
    assert (result.passed, result.detail) == (passed, detail)


def test_xml_kinds_read_promptfoos_three_ways_of_naming_required_elements():
    for value in ("a.b, a.c", ["a.b", "a.c"], {"requiredElements": ["a.b", "a.c"]}):
        assert parse_assert({"type": "is-xml", "value": value}).label == "is-xml:a.b,a.c"
    assert parse_assert({"type": "contains-xml"}).to_dict() == {"type": "contains-xml"}


def test_cost_is_zero_for_a_local_model_and_reads_promptfoos_threshold(tmp_path):
    assert parse_assert("cost:0").check("anything").passed
    assert not parse_assert("not-cost:0.01").check("anything").passed
    config = "prompts: ['{{q}}']\ntests:\n  - vars: {q: hi}\n    assert:\n      - type: cost\n        threshold: 0.002"
    _, rows, _ = read_config(config, tmp_path)
    assert rows[0].asserts == [as_read_from_promptfoo("cost:0.002")]


def as_read_from_promptfoo(spec: str) -> Assert:
    """The assert ``spec`` as the promptfoo reader makes it: checked as promptfoo checks it."""
    return replace(parse_assert(spec), dialect=DIALECT)


def test_a_key_of_another_kind_is_refused_naming_the_kinds_it_belongs_to():
    with pytest.raises(BatchInputError, match="rubricPrompt applies to answer-relevance, .*llm-rubric, .*not to "
                                              "contains"):
        parse_assert({"type": "contains", "value": "x", "rubricPrompt": "Grade {{output}}"})
    with pytest.raises(BatchInputError, match="provider applies to answer-relevance, classifier, .*not to equals"):
        parse_assert({"type": "equals", "value": "x", "provider": "huggingface:text-classification:a/b"})
    with pytest.raises(BatchInputError, match="llm-rubric: an assert's own grading provider is not used here"):
        parse_assert({"type": "llm-rubric", "value": "kind", "provider": "openai:gpt-4o"})
