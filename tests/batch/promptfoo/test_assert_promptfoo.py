"""Asserts read from a promptfoo file are checked as promptfoo 0.115 checks them (webui/batch/promptfoo/dialect.py);
the Batch tab's own asserts keep ours. The agreement with promptfoo itself is tests/e2e/test_promptfoo_agreement.py;
these pin each difference from both sides, and that the dialect survives storing and re-reading a row."""

from __future__ import annotations

import json
import time

import pytest

from webui.batch.asserts.errors import BatchInputError, ScriptError
from webui.batch.asserts.assertion import parse_assert
from webui.batch.promptfoo.dialect import DIALECT, json_objects
from webui.batch.asserts.js_regex import js_regex_test
from webui.batch.promptfoo.reader import read_config
from webui.batch.promptfoo.export import promptfoo_assertion
from webui.batch.run.prompts import PromptRow


def _both(spec: dict) -> tuple:
    """(ours, promptfoo's) of one assert in the dict form."""
    return parse_assert(spec), parse_assert({**spec, "dialect": DIALECT})


@pytest.mark.parametrize("spec, output, ours, promptfoo", [
    ({"type": "equals", "value": "4"}, " 4\n", True, False),
    ({"type": "starts-with", "value": "The"}, " The end", True, False),
    ({"type": "icontains", "value": "straße"}, "STRASSE", True, False),
    ({"type": "icontains-any", "value": ["straße", "x"]}, "STRASSE", True, False),
    ({"type": "icontains-all", "value": ["STRASSE", "weg"]}, "Straße und Weg", True, False),
    ({"type": "regex", "value": "^\\d+$"}, "42\n", True, False),  # JavaScript's $: only at the very end
    ({"type": "regex", "value": "^\\d$"}, "٣", True, False),  # JavaScript's \d: 0-9 only
    ({"type": "contains-json"}, 'Sure: {"a": 1 done', False, True),  # closed and read as YAML's flow mapping
    ({"type": "is-xml"}, " <a>1</a>", True, False),
    ({"type": "is-xml"}, "<a>1</a> and <b>2</b>", False, True),
])
def test_each_difference_from_both_sides(spec, output, ours, promptfoo):
    native, theirs = _both(spec)
    assert native.check(output).passed is ours
    assert theirs.check(output).passed is promptfoo


def test_a_javascript_only_regex_reads_in_a_promptfoo_file_and_one_javascript_refuses_is_named_when_read(tmp_path):
    named = parse_assert({"type": "regex", "value": "(?<year>\\d{4})-\\d\\d", "dialect": DIALECT})
    assert named.check("on 2024-01-02").passed
    with pytest.raises(BatchInputError, match="invalid regular expression"):
        parse_assert({"type": "regex", "value": "(?<year>\\d{4})"})  # Python's re writes (?P<year>...)
    config = "prompts: ['{{q}}']\ntests:\n  - vars: {q: hi}\n    assert:\n      - {type: regex, value: '(?i)paris'}\n"
    with pytest.raises(BatchInputError, match=r"tests\[0\].*not a JavaScript regular expression, as promptfoo "
                                              r"reads regex values \(SyntaxError"):
        read_config(config, tmp_path)
    assert parse_assert("regex:(?i)paris").check("PARIS").passed  # ours is Python's


def test_a_catastrophic_javascript_regex_is_stopped_at_its_time_limit():
    started = time.monotonic()
    with pytest.raises(ScriptError, match="took more than 0.3 s on this output and was stopped"):
        js_regex_test("^(a+)+$", "a" * 40 + "b", timeout=0.3)
    assert time.monotonic() - started < 3


def test_an_equals_value_written_as_an_object_compares_parsed_json_in_both():
    native, theirs = _both({"type": "equals", "value": {"a": 1, "b": [2]}})
    assert native.to_dict() == {"type": "equals", "value": {"a": 1, "b": [2]}}
    assert parse_assert(native.to_dict()) == native
    for item in (native, theirs):
        assert item.check('{"b": [2.0], "a": 1}').passed  # key order and 2 vs 2.0 aside, as JavaScript
        assert not item.check('{"a": true, "b": [2]}').passed  # true is not 1
        assert item.check("a: 1").detail == 'output is not JSON, expected {"a": 1, "b": [2]}'
    assert native.check(' {"a": 1, "b": [2]}\n').passed and not theirs.check("{'a': 1}").passed
    text = parse_assert({"type": "equals", "value": '{"a": 1}', "dialect": DIALECT})  # a text value: as text
    assert not text.check('{"a":1}').passed and text.check('{"a": 1}').passed


def test_json_objects_reads_as_promptfoos_extractor():
    assert json_objects('x {"a": 1} y {"b": {"c": 2}}') == [{"a": 1}, {"b": {"c": 2}}]
    assert json_objects('Sure: {"a": 1, "b": [2') == []  # an unclosed list is not repaired
    assert json_objects("{a: 1, b: two}") == [{"a": 1, "b": "two"}]
    assert json_objects('{"a": 1 // one\n}') == [{"a": 1}]
    assert json_objects('{"url": "http://x"}') == [{"url": "http://x"}]  # // inside a string stays
    assert json_objects("no braces") == [] and json_objects("{") == []


def test_the_dialect_is_stored_with_a_row_and_kept_out_of_promptfoos_export(tmp_path):
    config = "prompts: ['{{q}}']\ntests:\n  - vars: {q: hi}\n    assert:\n      - {type: equals, value: hi}\n"
    _, rows, _ = read_config(config, tmp_path)
    (item,) = rows[0].asserts
    assert item.dialect == DIALECT and item.to_dict()["dialect"] == DIALECT
    again = PromptRow.from_dict(json.loads(json.dumps(rows[0].to_dict())))
    assert again.asserts == rows[0].asserts and not again.asserts[0].check(" hi").passed
    assert promptfoo_assertion(item) == {"type": "equals", "value": "hi"}
    with pytest.raises(BatchInputError, match="dialect must be \"promptfoo\" or left out, got 'jest'"):
        parse_assert({"type": "equals", "value": "hi", "dialect": "jest"})


def test_a_check_that_cannot_judge_fails_negated_or_not(monkeypatch):
    not_equals = parse_assert({"type": "not-equals", "value": {"a": 1}, "dialect": DIALECT})
    assert not not_equals.check("a: 1").passed  # promptfoo: an object value against text that is not JSON fails
    assert not_equals.check('{"a": 2}').passed and parse_assert({"type": "not-equals", "value": {"a": 1}}).check(
        "a: 1").passed  # ours: text that is not JSON is not equal

    def stopped(pattern: str, text: str) -> bool:
        raise ScriptError(f"regex {pattern} took more than 5 s on this output and was stopped")

    monkeypatch.setattr("webui.batch.promptfoo.dialect.js_regex_test", stopped)
    result = parse_assert({"type": "not-regex", "value": "^(a+)+$", "dialect": DIALECT}).check("aaab")
    assert not result.passed and "was stopped" in result.detail
