"""Canned tool results and the local tools in a suite's provider config (#44): how calls are answered, and every
mistake in the config refused naming the field and what to do."""

from __future__ import annotations

import json

import pytest

from webui.batch.asserts.errors import BatchInputError
from webui.batch.promptfoo.reader import read_suite
from webui.batch.run.provider_prompt import ProviderPrompt
from webui.batch.run.tool_answers import CannedResult, ToolAnswers
from webui.chat.tool_loop import MAX_STEPS

TOOLS = [{"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}
         for name in ("get_weather", "get_time")]
SUITE = """
prompts: ["Weather in {{city}}?"]
providers:
  - id: ID
    config: {tools: TOOLS, CONFIG}
tests: [{vars: {city: Paris}}]
"""


def read(config: str, tools: list | None = None, provider: str = "workbench:m"):
    text = SUITE.replace("TOOLS", json.dumps(TOOLS if tools is None else tools)).replace("ID", provider)
    if tools == []:
        text = text.replace("tools: [], ", "")
    return read_suite(text.replace("CONFIG", config), ".")


def answers_of(config: str, **kw) -> ToolAnswers:
    shape = read(config, **kw).settings[0].prompt
    assert shape is not None and shape.answers is not None
    return shape.answers


def test_canned_results_answer_by_tool_and_by_arguments():
    answers = answers_of('tool_results: {get_time: "14:00", get_weather: [{arguments: {city: Paris, days: 1}, '
                         'result: Sunny}, {result: "no forecast"}]}, max_tool_steps: 2')
    assert answers.max_steps == 2 and not answers.local
    assert answers.call("get_time", "{}").text == "14:00"
    assert answers.call("get_weather", '{"days": 1.0, "city": "Paris"}').text == "Sunny"  # key order, 1 and 1.0
    assert answers.call("get_weather", '{"city": "Lyon"}').text == "no forecast"  # the fallback
    assert answers.call("get_weather", "not json").text == "no forecast"
    only = ToolAnswers({"get_weather": (CannedResult("Sunny", {"city": "Paris"}),)})
    missed = only.call("get_weather", '{"city": "Lyon"}')
    assert missed.error is not None and missed.text == ('error: the test gives no result for get_weather with the '
                                                        'arguments {"city": "Lyon"}')
    assert only.call("get_time", "{}").text == ("error: the test gives no result for get_time (it gives results "
                                                "for: get_weather)")
    assert answers_of("tools_from: local") == ToolAnswers({}, True, MAX_STEPS)


def test_the_answers_are_stored_with_the_provider_and_read_back():
    shape = read("tool_results: {get_weather: [{arguments: {city: Paris}, result: Sunny}]}, max_tool_steps: 3"
                 ).settings[0].prompt
    assert shape is not None and ProviderPrompt.from_dict(json.loads(json.dumps(shape.to_dict()))) == shape
    plain = read("max_tokens: 5").settings[0].prompt
    assert plain is not None and plain.answers is None and "answers" not in plain.to_dict()  # as stored before


@pytest.mark.parametrize("config, match", [
    ('tool_results: {get_date: "x"}', r"config.tool_results.get_date: 'get_date' is not among the provider's tools "
                                      r"\(get_weather, get_time\); give results for the tools it offers"),
    ("tool_results: {get_weather: 21}", r"config.tool_results.get_weather must be the result as text \(what the "
                                        r"model reads\), or a list of \{arguments, result\}; got 21; quote it to give "
                                        r"it as text: '21'"),
    ("tool_results: {get_weather: {temp: 21}}", r"quote it to give it as text: '\{\"temp\": 21\}'"),
    ("tool_results: {get_weather: [{arguments: {city: Paris}}]}", r"config.tool_results.get_weather\[0\] must be "
                                                                 r"\{arguments: \{...\}, result: text\}"),
    ("tool_results: {get_weather: [{result: [1]}]}", r"config.tool_results.get_weather\[0\].result must be text"),
    ("tool_results: {get_weather: [{arguments: Paris, result: x}]}", r"get_weather\[0\].arguments must be a mapping"),
    ("tool_results: [get_weather]", r"config.tool_results must map tool names to their results"),
    ("tool_results: {get_weather: x}, max_tool_steps: 0", r"config.max_tool_steps must be a whole number of turns "
                                                          r"from 1 to 50 .*got 0"),
    ("tool_results: {get_weather: x}, max_tool_steps: '3'", r"max_tool_steps must be a whole number .*got '3'"),
    ("tool_results: {get_weather: x}, max_tool_steps: true", r"max_tool_steps must be a whole number .*got True"),
    ("tool_results: {get_weather: x}, max_tool_steps: 51", r"max_tool_steps must be a whole number .*got 51"),
    ("max_tool_steps: 2", r"config.max_tool_steps limits the tool loop, which runs when the provider gives "
                          r"tool_results \(canned results\) or tools_from: local"),
    ("tool_results: {get_weather: x}, tools_from: local", r"give tool_results \(canned results\) or tools_from: "
                                                          r"local, not both"),
    ("tools_from: remote", r"config.tools_from must be local \(the workbench's own tools"),
    ("tool_results: {get_weather: x}, tool_choice: none", r"the provider offers no tools \(tool_choice none, or an "
                                                          r"empty list\), so no call can be answered"),
])
def test_a_mistake_in_the_canned_results_is_refused_naming_the_field(config, match):
    with pytest.raises(BatchInputError, match=match):
        read(config)


def test_results_or_local_tools_need_tools_a_chat_provider_offers():
    with pytest.raises(BatchInputError, match=r"config.tool_results answer the calls of the provider's tools, and it "
                                              r"offers none; add tools"):
        read("tool_results: {get_weather: x}", tools=[])
    with pytest.raises(BatchInputError, match=r"config.tool_choice: with tools_from: local and no tools listed, the "
                                              r"model is offered every local tool and chooses \(auto\)"):
        read("tools_from: local, tool_choice: required", tools=[])
    with pytest.raises(BatchInputError, match=r"tools are offered to chat models; an openai:completion provider"):
        read("tools_from: local", tools=[], provider="openai:completion:m")
    local = read("tools_from: local", tools=[]).settings[0].prompt
    assert local is not None and local.tools is None and local.answers.local  # listed when the run starts
