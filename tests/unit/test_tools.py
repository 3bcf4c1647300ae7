"""Tool calling's pieces without a model: the request's tools checked, the fallback prompt, reading calls."""

from __future__ import annotations

import json

import pytest

from webui.chat.tools import (FALLBACK, CallStream, closed_schema, may_be_a_call, plan_tools, read_calls,
                              template_messages)
from webui.engine.params import InvalidParameter
from webui.engine.structured import grammar_of

WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                           "required": ["city"]}}}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}


def test_the_choice_is_read_and_checked():
    assert plan_tools(None, None, None) is None and plan_tools([WEATHER], "none", None) is None
    assert plan_tools([WEATHER], None, None).choice == "auto"
    named = plan_tools([WEATHER, TIME], {"type": "function", "function": {"name": "get_time"}}, False)
    assert named.choice == "get_time" and not named.parallel
    for tools, choice, param in (([WEATHER], {"type": "function", "function": {"name": "nope"}}, "tool_choice"),
                                 ([WEATHER], "sometimes", "tool_choice"), (None, "required", "tool_choice"),
                                 ([{"type": "function"}], None, "tools[0]"),
                                 ([{"type": "function", "function": {"name": "f", "parameters": 5}}], None, "tools[0]")):
        with pytest.raises(InvalidParameter) as info:
            plan_tools(tools, choice, None)
        assert info.value.param == param


def test_required_and_named_choices_become_a_grammar_of_calls():
    assert plan_tools([WEATHER], "auto", None).grammar() is None
    grammar = plan_tools([WEATHER, TIME], {"type": "function", "function": {"name": "get_time"}}, False).grammar()
    assert "get_time" in grammar["grammar"] and "get_weather" not in grammar["grammar"]
    grammar_of("grammar", grammar["grammar"])  # a grammar llguidance accepts
    assert "call+" in plan_tools([WEATHER], "required", None).grammar()["grammar"]


def test_reading_calls_from_a_reply():
    plan = plan_tools([WEATHER, TIME], "auto", None)
    text = 'Let me look.<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>' \
           '<tool_call>{"name": "get_time", "arguments": {}}</tool_call>'
    content, calls = read_calls(text, plan)
    assert content == "Let me look." and [c.name for c in calls] == ["get_weather", "get_time"]
    assert json.loads(calls[0].arguments) == {"city": "Paris"} and calls[0].id.startswith("call_")
    assert calls[0].id != calls[1].id
    assert read_calls('{"name": "get_time", "parameters": {}}', plan)[1][0].name == "get_time"  # bare JSON
    assert read_calls("The weather is fine.", plan) == ("The weather is fine.", [])
    assert read_calls('<tool_call>{"name": "rm_rf", "arguments": {}}</tool_call>', plan)[1] == []  # not a tool
    assert len(read_calls(text, plan_tools([WEATHER, TIME], "auto", False))[1]) == 1  # parallel calls off


def test_a_stream_holds_back_only_what_may_be_a_call():
    assert may_be_a_call("") and may_be_a_call("  <tool") and may_be_a_call('{"na')
    assert not may_be_a_call("The") and not may_be_a_call("<b>")


def test_the_fallback_writes_tools_calls_and_results_into_the_history():
    plan = plan_tools([WEATHER], "auto", None)
    history = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather in Paris?"},
               {"role": "assistant", "content": "", "tool_calls": [
                   {"id": "call_1", "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
               {"role": "tool", "content": "Sunny", "tool_call_id": "call_1"}]
    shaped = template_messages(history, plan, native=False)
    assert shaped[0]["content"].startswith("Be brief.\n\n" + FALLBACK) and "get_weather" in shaped[0]["content"]
    assert shaped[2] == {"role": "assistant", "content": '<tool_call>{"name": "get_weather", "arguments": '
                                                         '{"city": "Paris"}}</tool_call>'}
    assert shaped[3] == {"role": "user", "content": "<tool_response>\nSunny\n</tool_response>"}
    native = template_messages(history, plan, native=True)
    assert native[2]["tool_calls"][0]["function"]["arguments"] == {"city": "Paris"}  # templates expect objects
    assert native[3] == {"role": "tool", "content": "Sunny", "tool_call_id": "call_1"}


@pytest.mark.parametrize("piece", [1, 3, 7, 1000])
def test_a_constrained_reply_streams_calls_piece_by_piece_however_it_is_cut(piece):
    text = ('<tool_call>{"name": "get_weather", "arguments": {"city": "Pa\\"r}is", "n": [1, {"a": 2}]}}</tool_call>'
            '<tool_call> {"name":"get_time","arguments":{}}</tool_call>')
    reader, deltas = CallStream(), []
    for i in range(0, len(text), piece):
        deltas += reader.feed(text[i:i + piece])
    calls: dict[int, dict] = {}
    for delta in deltas:
        call = calls.setdefault(delta["index"], {"id": None, "arguments": ""})
        if "id" in delta:
            assert call["id"] is None and delta["id"].startswith("call_") and delta["function"]["arguments"] == ""
            call.update(id=delta["id"], name=delta["function"]["name"])
        call["arguments"] += delta["function"]["arguments"]
    assert reader.calls == 2 and [c["name"] for c in calls.values()] == ["get_weather", "get_time"]
    assert json.loads(calls[0]["arguments"]) == {"city": 'Pa"r}is', "n": [1, {"a": 2}]}
    assert json.loads(calls[1]["arguments"]) == {}
    if piece == 1:
        assert sum(1 for d in deltas if d["index"] == 0 and "id" not in d) > 10  # a piece per token, not one


def test_a_reply_cut_inside_a_call_gives_the_call_so_far_never_its_markup():
    """#33: max_tokens cutting a call gave finish 'length' with '<tool_call>{"name": ...' as content and no call."""
    from webui.chat.tools import reply_calls

    plan = plan_tools([WEATHER, TIME], "auto", None)
    cut = 'Let me check. <tool_call>{"name": "get_weather", "arguments": {"city": "Par'
    content, calls = reply_calls(cut, plan, "length")
    assert content == "Let me check." and [(c.name, c.arguments) for c in calls] == [("get_weather", '{"city": "Par')]
    assert calls[0].id.startswith("call_")
    done = '<tool_call>{"name": "get_time", "arguments": {}}</tool_call><tool_call>{"name": "get_weather", "argu'
    content, calls = reply_calls(done, plan, "length")
    assert content is None and [(c.name, c.arguments) for c in calls] == [("get_time", "{}"), ("get_weather", "")]
    assert reply_calls('<tool_call>{"name": "get_wea', plan, "length") == (None, [])  # its name unfinished
    assert reply_calls('<tool_call>{"na', plan, "length") == (None, [])  # no markup as content
    assert reply_calls("Plain text cut sho", plan, "length") == ("Plain text cut sho", [])
    bare = '{"name": "get_weather", "arguments": {"ci'
    assert [(c.name, c.arguments) for c in reply_calls(bare, plan, "length")[1]] == [("get_weather", '{"ci')]
    assert reply_calls('{"answer": 4', plan, "length") == ('{"answer": 4', [])  # JSON that is no call stays text
    assert reply_calls(cut, plan, "stop") == (cut, [])  # a reply that ended by itself is read as before
    single = plan_tools([WEATHER, TIME], "auto", False)
    assert len(reply_calls(done.replace('"argu', '"arguments": {"city": "X"}}</tool_call>'), single, "length")[1]) == 1


def test_a_schema_that_does_not_say_additional_properties_takes_no_other_keys():
    given = {"type": "object", "properties": {"city": {"type": "string"},
                                              "where": {"type": "object", "properties": {"lat": {"type": "number"}}},
                                              "tags": {"type": "array", "items": {"type": "object",
                                                                                  "properties": {"k": {}}}},
                                              "free": {"type": "object"}},
             "$defs": {"unit": {"type": "object", "properties": {"c": {}}}},
             "anyOf": [{"properties": {"a": {}}}, {"properties": {"b": {}}, "additionalProperties": True}]}
    closed = closed_schema(given)
    assert closed["additionalProperties"] is False and closed["properties"]["where"]["additionalProperties"] is False
    assert closed["properties"]["tags"]["items"]["additionalProperties"] is False
    assert "additionalProperties" not in closed["properties"]["free"]  # no properties listed: any object
    assert closed["$defs"]["unit"]["additionalProperties"] is False
    assert closed["anyOf"][0]["additionalProperties"] is False and closed["anyOf"][1]["additionalProperties"] is True
    assert "additionalProperties" not in given  # a copy: the request's own schema is left as sent


def test_a_required_call_takes_exactly_the_keys_asked_with_compact_whitespace():
    grammar = plan_tools([WEATHER], "required", False).grammar()["grammar"]
    body = json.loads(grammar.split("%json ", 1)[1])
    assert body["x-guidance"] == {"whitespace_flexible": False}
    assert body["anyOf"][0]["properties"]["arguments"]["additionalProperties"] is False
    grammar_of("grammar", grammar)  # llguidance takes it


def test_a_closing_tag_inside_an_argument_string_does_not_end_the_call():
    """The schema lets a string hold "</tool_call>" (a sampled reply did: "Paris}}</tool_call>Prony"): the call is
    read as JSON, to its real end."""
    plan = plan_tools([WEATHER], "required", False)
    text = '<tool_call>{"name":"get_weather","arguments":{"city":"Paris}}</tool_call>Prony"}}</tool_call>'
    content, (call,) = read_calls(text, plan)
    assert content is None and json.loads(call.arguments) == {"city": "Paris}}</tool_call>Prony"}
    content, calls = read_calls("Hi <tool_call>not json</tool_call> there", plan)
    assert calls == [] and content == "Hi <tool_call>not json</tool_call> there"
