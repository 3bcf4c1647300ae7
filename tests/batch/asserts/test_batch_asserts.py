"""Batch asserts: every kind passes and fails with a reason, parsing forms agree, bad specs fail eagerly."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from webui.batch.asserts.assertion import KINDS, Assert, assert_label, check_all, parse_assert, parse_asserts
from webui.batch.asserts.types import AssertResult
from webui.batch.asserts.errors import BatchInputError

SCHEMA = '{"type":"object","required":["name"],"properties":{"name":{"type":"string"}}}'


@pytest.mark.parametrize("spec, output, tokens", [
    ("contains:Paris", "The capital is Paris.", 5),
    ("icontains:PARIS", "the capital is paris", 5),
    ("not-contains:London", "Paris", 1),
    ("equals:4", " 4\n", 1),
    (r"regex:^\d+$", "1234", 1),
    ("regex:cat|dog", "a dog barks", 3),
    ("starts-with:The", "  The answer", 2),
    ("is-json", ' {"a": [1, 2]} \n', 9),
    ("is-json", "[1, 2, 3]", 7),
    (f"is-json:{SCHEMA}", '{"name": "Ada", "age": 36}', 12),
    ("max-length:5", "12345", 99),
    ("max-length:10 tokens", "x" * 500, 10),
    ("max-length:0", "", 0),
])
def test_each_kind_passes(spec, output, tokens):
    result = parse_assert(spec).check(output, tokens)
    assert result == AssertResult(True, "", assert_label(parse_assert(spec)))


@pytest.mark.parametrize("spec, output, tokens, detail", [
    ("contains:Paris", "The capital is paris.", 5, "output does not contain 'Paris'"),
    ("icontains:Paris", "Lyon", 1, "output does not contain 'Paris' (ignoring case)"),
    ("not-contains:London", "Paris, then London", 4, "output contains 'London' (at character 12)"),
    ("equals:4", "4.", 1, "output is '4.', expected '4'"),
    (r"regex:^\d+$", "12a", 1, r"output does not match the regex ^\d+$"),
    ("starts-with:The", "A cat", 2, "output starts with 'A cat', expected 'The'"),
    ("is-json", "Sure! {\"a\": 1}", 6, "output is not valid JSON (Expecting value at line 1 column 1)"),
    (f"is-json:{SCHEMA}", '{"age": 3}', 5, "output JSON does not match the schema: 'name' is a required property"),
    (f"is-json:{SCHEMA}", '{"name": 7}', 5,
     "output JSON does not match the schema: 7 is not of type 'string' (at $.name)"),
    ("max-length:5", "123456", 1, "output has 6 characters, more than 5"),
    ("max-length:10 tokens", "short", 11, "output has 11 tokens, more than 10"),
])
def test_each_kind_fails_with_a_reason(spec, output, tokens, detail):
    result = parse_assert(spec).check(output, tokens)
    assert not result.passed
    assert result.detail == detail
    assert result.label == assert_label(parse_assert(spec))


def test_case_sensitive_by_default():
    assert not parse_assert("contains:Paris").check("PARIS", 1).passed
    assert parse_assert("icontains:paris").check("PARIS", 1).passed
    assert parse_assert("icontains:STRASSE").check("straße", 1).passed  # casefold, not lower


def test_compact_and_dict_forms_agree():
    pairs = [
        ("contains:Paris", {"type": "contains", "value": "Paris"}),
        ("equals:4", {"type": "equals", "value": 4}),
        ("is-json", {"type": "is-json"}),
        (f"is-json:{SCHEMA}", {"type": "is-json", "schema": {"type": "object", "required": ["name"],
                                                             "properties": {"name": {"type": "string"}}}}),
        ("is-json:{\"type\": \"array\"}", {"kind": "is-json", "value": "{\"type\":\"array\"}"}),
        ("max-length:50 tokens", {"type": "max-length", "value": 50, "unit": "tokens"}),
        ("max-length:50 tokens", {"type": "max-length", "value": "50", "unit": "token"}),
        ("max-length:200", {"type": "max-length", "value": 200}),
        ("max-length:200 chars", {"type": "MAX-LENGTH", "value": "200 characters"}),
    ]
    for compact, as_dict in pairs:
        assert parse_assert(compact) == parse_assert(as_dict), compact


@pytest.mark.parametrize("spec", ["contains:Paris", "not-contains:a b", "regex:^(a|b)$", "is-json",
                                  f"is-json:{SCHEMA}", "max-length:7", "max-length:7 tokens", "starts-with:Hi",
                                  "icontains:x", "equals:{\"a\": 1}"])
def test_label_and_dict_round_trip(spec):
    item = parse_assert(spec)
    assert assert_label(item) == item.label == spec
    assert parse_assert(item.label) == item
    assert parse_assert(item.to_dict()) == item


def test_compact_form_strips_spaces_and_lowercases_kind():
    assert parse_assert("  Contains:  Paris ") == Assert("contains", "Paris")
    assert parse_assert("max-length: 10   tokens ") == Assert("max-length", 10, {"unit": "tokens"})


def test_dict_form_keeps_surrounding_spaces():
    assert parse_assert({"type": "contains", "value": " Paris "}).check("in Paris now", 3).passed
    assert not parse_assert({"type": "contains", "value": " Paris "}).check("Paris", 1).passed


def test_label_shows_newlines_escaped():
    assert parse_assert({"type": "contains", "value": "a\nb"}).label == "contains:a\\nb"


@pytest.mark.parametrize("spec, message", [
    ("foo:bar", r"unknown assert 'foo:bar'; write kind:value with kind one of contains, icontains, not-contains, "
                r"equals, regex, starts-with, similar, llm-rubric, contains-any, contains-all, icontains-any, icontains-all, "
                r"is-json, contains-json, is-xml, contains-xml, word-count, max-length, python, javascript, latency, cost, ttft, "
                r"tokens-per-second, levenshtein, rouge-n, bleu, gleu, meteor, is-sql, contains-sql, is-html, "
                r"contains-html, is-refusal, finish-reason, is-valid-openai-tools-call, "
                r"is-valid-openai-function-call, tool-call-f1, called-tool, perplexity, perplexity-score, "
                r"model-graded-closedqa, factuality, "
                r"g-eval, context-recall, context-relevance, context-faithfulness, select-best, max-score, "
                r"answer-relevance, "
                r"classifier, "
                r"or not- before one"),
    ("Paris", "unknown assert 'Paris'"),
    ("contains:", r"contains needs a value, e.g. contains:Paris"),
    ("regex", r"regex needs a value"),
    ("regex:(unclosed", r"regex:\(unclosed: invalid regular expression: missing \), unterminated subpattern"),
    ("regex:a{2,1}", "invalid regular expression"),
    ("is-json:{not json}", r"is-json: the schema is not valid JSON"),
    ('is-json:{"type": "bogus"}', r"is-json: invalid JSON schema: 'bogus' is not valid"),
    ('is-json:{"required": "name"}', r"is-json: invalid JSON schema: 'name' is not of type 'array'"),
    ("is-json:[1, 2]", r"is-json: a JSON schema must be a JSON object, got list"),
    ("max-length:", r"max-length needs a whole number"),
    ("max-length:-5", r"max-length needs a whole number .* got '-5'"),
    ("max-length:2.5", r"max-length needs a whole number"),
    ("max-length:²", r"max-length needs a whole number"),
    ("max-length:5 words", r"max-length: unknown unit 'words'; use chars or tokens"),
    ({"type": "contains"}, r"contains needs a \"value\""),
    ({"value": "x"}, r"needs \"type\" set to one of"),
    ({"type": "contains", "value": "x", "flags": "i"}, r"unknown key\(s\) flags"),
    ({"type": "max-length", "value": -1}, r"max-length needs a whole number >= 0, got -1"),
    ({"type": "max-length", "value": 5, "unit": "lines"}, r"unknown unit 'lines'"),
    ({"type": "is-json", "schema": {"type": 5}}, r"invalid JSON schema"),
    (3.5, r"an assert must be a string like 'contains:Paris'"),
])
def test_bad_specs_fail_eagerly(spec, message):
    with pytest.raises(BatchInputError, match=message):
        parse_assert(spec)


def test_direct_construction_is_validated():
    with pytest.raises(BatchInputError, match="unknown assert kind 'has'; kinds: contains"):
        Assert("has", "x")
    with pytest.raises(BatchInputError, match="regex:\\[: invalid regular expression"):
        Assert("regex", "[")
    with pytest.raises(BatchInputError, match="contains needs a non-empty text value"):
        Assert("contains", "")
    with pytest.raises(BatchInputError, match="unknown option"):
        Assert("contains", "x", {"unit": "tokens"})
    assert Assert("max-length", 3) == Assert("max-length", 3, {"unit": "chars"})
    assert Assert("is-json", '{ "type" : "object" }').value == '{"type":"object"}'


def test_parse_asserts_prefixes_where_and_accepts_one_or_none():
    assert parse_asserts(None) == [] and parse_asserts("") == []
    assert parse_asserts("contains:a") == [Assert("contains", "a")]
    with pytest.raises(BatchInputError, match=r"^line 4: unknown assert"):
        parse_asserts(["contains:a", "bad"], "line 4")


def test_check_all_and_kinds():
    results = check_all([parse_assert("contains:a"), parse_assert("max-length:1 tokens")], "abc", 2)
    assert [r.passed for r in results] == [True, False]
    assert set(KINDS) == {"contains", "icontains", "not-contains", "equals", "regex", "starts-with", "is-json",
                          "contains-json", "is-xml", "contains-xml", "word-count", "max-length", "similar",
                          "python", "javascript", "latency", "cost", "ttft", "tokens-per-second", "contains-any",
                          "contains-all", "icontains-any", "icontains-all", "llm-rubric", "levenshtein", "rouge-n",
                          "bleu", "gleu", "meteor", "is-sql", "contains-sql", "is-html", "contains-html", "is-refusal",
                          "finish-reason", "is-valid-openai-tools-call", "is-valid-openai-function-call",
                          "tool-call-f1", "called-tool", "perplexity", "perplexity-score", "model-graded-closedqa", "factuality", "g-eval",
                          "context-recall", "context-relevance", "context-faithfulness", "select-best",
                          "max-score", "answer-relevance", "classifier"}


@given(st.text(min_size=1), st.text())
def test_contains_agrees_with_python(needle, haystack):
    item = Assert("contains", needle)
    assert item.check(haystack, 0).passed == (needle in haystack)
    assert Assert("not-contains", needle).check(haystack, 0).passed == (needle not in haystack)
