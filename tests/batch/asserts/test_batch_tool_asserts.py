"""Asserts on a row's tool calls (#44): promptfoo's tool-call-f1 and our called-tool, on the calls a tool loop
made and on an output that is the calls (a row without a loop), and the OpenAI call checks on a loop's calls."""

from __future__ import annotations

import json

import pytest

from webui.batch.asserts.errors import BatchInputError
from webui.batch.asserts.assertion import parse_assert
from webui.batch.asserts.types import Observed
from webui.batch.promptfoo.reader import read_suite


def openai_call(name: str, arguments: str = "{}") -> dict:
    return {"id": f"call_{name}", "type": "function", "function": {"name": name, "arguments": arguments}}


WEATHER = openai_call("get_weather", '{"city": "Paris"}')
TIME = openai_call("get_time")
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


def looped(*calls: dict) -> Observed:
    """A row whose tool loop made ``calls``, its output the final answer."""
    return Observed("It is sunny.", tool_calls=calls)


def test_tool_call_f1_scores_the_called_names_against_the_expected_ones():
    both = parse_assert({"type": "tool-call-f1", "value": ["get_weather", "get_time"]})
    assert both.pass_at == 1.0 and both.label == "tool-call-f1:get_weather,get_time"
    result = both.check(looped(WEATHER, TIME, WEATHER))  # each name once, in any order
    assert result.passed and result.score == 1.0
    half = both.check(looped(WEATHER))
    assert not half.passed and half.score == pytest.approx(2 / 3)
    assert half.detail == ("tool call F1 0.667 (precision 1.000, recall 0.500); expected: get_time, get_weather; "
                           "called: get_weather (score 0.67, needs 1)")
    assert both.check(looped()).score == 0.0 and "called: (none)" in both.check(looped()).detail
    extra = parse_assert({"type": "tool-call-f1", "value": "get_weather", "threshold": 0.6})
    assert extra.check(looped(WEATHER, TIME)).passed  # precision 1/2, recall 1: F1 2/3 >= 0.6
    assert not parse_assert("tool-call-f1:get_weather").check(looped(WEATHER, TIME)).passed


def test_called_tool_passes_when_some_call_has_arguments_that_fit_the_schema():
    paris = parse_assert({"type": "called-tool", "value": {"name": "get_weather", "arguments": {
        "type": "object", "properties": {"city": {"const": "Paris"}}, "required": ["city"]}}})
    assert paris.check(looped(openai_call("get_weather", '{"city": "Lyon"}'), WEATHER)).passed
    lyon = paris.check(looped(openai_call("get_weather", '{"city": "Lyon"}')))
    assert not lyon.passed and lyon.detail == ("get_weather was called, but its arguments do not match the schema: "
                                               "'Paris' was expected (at $.city)")
    twice = paris.check(looped(openai_call("get_weather", "{}"), openai_call("get_weather", "not json")))
    assert "called 2 times, never with arguments that match the schema: 'city' is a required property" in twice.detail
    broken = paris.check(looped(openai_call("get_weather", "not json")))
    assert "its arguments are not JSON" in broken.detail
    named = parse_assert("called-tool:get_time")
    assert named.check(looped(TIME)).passed and not named.check(looped(WEATHER)).passed
    assert named.check(looped(WEATHER)).detail == "get_time was not called (called: get_weather)"
    assert named.check(looped()).detail == "get_time was not called (called: none)"
    assert parse_assert("not-called-tool:get_time").check(looped(WEATHER)).passed


def test_on_a_row_without_a_loop_the_call_asserts_read_the_calls_its_output_is():
    calls = json.dumps([WEATHER], separators=(",", ":"))  # what a provider's reply of calls is (JSON.stringify)
    message = json.dumps({"role": "assistant", "content": "Let me look.", "tool_calls": [WEATHER]})
    function_call = json.dumps({"name": "get_time", "arguments": "{}"})
    f1 = parse_assert("tool-call-f1:get_weather")
    assert f1.check(calls).passed and f1.check(message).passed and not f1.check("It is sunny.").passed
    assert f1.check(Observed(calls, output_value=[WEATHER])).passed
    assert parse_assert("called-tool:get_time").check(function_call).passed
    assert parse_assert("called-tool:get_weather").check(calls).passed


def test_the_openai_call_checks_read_every_call_of_a_loop():
    valid = parse_assert({"type": "is-valid-openai-tools-call", "value": TOOLS})
    assert valid.check(looped(WEATHER, WEATHER)).passed  # the output (the final answer) is not a call
    assert valid.check(looped(WEATHER, openai_call("get_weather", "{}"))).detail == \
        "Call to \"get_weather\" does not match schema: 'city' is a required property"
    assert valid.check(looped()).detail == "the model made no tool call"
    functions = parse_assert({"type": "is-valid-openai-function-call", "value": [TOOLS[0]["function"]]})
    assert functions.check(looped(WEATHER)).passed
    assert "there is no function with that name" in functions.check(looped(WEATHER, TIME)).detail


def test_a_bad_called_tool_value_is_refused_by_name():
    for value, match in (({"arguments": {}}, r"called-tool takes \{name: TOOL, arguments: JSON schema\}"),
                         ({"name": "x", "args": {}}, r"called-tool takes \{name: TOOL"),
                         ({"name": "x", "arguments": {"type": "nothing"}}, r"called-tool: arguments must be a JSON "
                                                                          r"schema of the call's arguments: invalid"),
                         ("", r"called-tool needs a tool name"), ("{not json", r"called-tool: the value is not valid "
                                                                               r"JSON")):
        with pytest.raises(BatchInputError, match=match):
            parse_assert({"type": "called-tool", "value": value})
    with pytest.raises(BatchInputError, match=r"tool-call-f1 needs a list of non-empty texts"):
        parse_assert({"type": "tool-call-f1", "value": []})


def test_a_promptfoo_suite_reads_the_call_asserts(tmp_path):
    suite = """
prompts: ["Weather in {{city}}?"]
providers: [{id: workbench:m, config: {tools: TOOLS, tool_results: {get_weather: Sunny}}}]
tests:
  - vars: {city: Paris}
    assert:
      - {type: tool-call-f1, value: "get_weather, get_time", threshold: 0.5}
      - {type: called-tool, value: {name: get_weather, arguments: {required: [city]}}}
      - {type: not-called-tool, value: get_time}
""".replace("TOOLS", json.dumps(TOOLS))
    f1, called, not_called = read_suite(suite, tmp_path).rows[0].asserts
    assert f1.value == ("get_weather", "get_time") and f1.threshold == 0.5  # split on commas, as promptfoo does
    assert called.label == 'called-tool:{"name":"get_weather","arguments":{"required":["city"]}}'
    assert not_called.negate and not_called.label == "not-called-tool:get_time"
