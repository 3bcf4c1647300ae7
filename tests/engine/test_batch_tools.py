"""A promptfoo provider's tools and prompt prefix/suffix in batch runs (#32): the tools rendered into the prompt
as /v1/chat/completions renders them, the reply read back into what promptfoo's openai provider returns (the tool
calls, whose JSON promptfoo's text asserts read), and asserts on it as promptfoo runs them."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from tests.engine.test_batch_runner import run, scripted_loader
from webui.api.routes import render_messages
from webui.batch.run.grid import Cell, GridSpec
from webui.batch.asserts.errors import BatchInputError
from webui.batch.run.export import from_csv, from_jsonl, to_csv, to_jsonl
from webui.batch.promptfoo.reader import read_suite
from webui.batch.promptfoo.export import to_promptfoo
from webui.batch.run.runner import BatchJob, BatchRunner, reply_output
from webui.batch.run.provider_prompt import ProviderPrompt
from webui.chat.tools import plan_tools

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}},
                   "required": ["city"], "additionalProperties": False}}}
CALL = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
SUITE = """
prompts: ["What is the weather in {{city}}?"]
providers:
  - id: workbench:MODEL
    config: {tools: file://tools.yaml, max_tokens: 40, CONFIG}
tests:
  - vars: {city: Paris}
    assert:
      - type: is-valid-openai-tools-call
      - type: javascript
        value: output[0].function.name === 'get_weather' && JSON.parse(output[0].function.arguments).city === 'Paris'
      - type: contains
        value: '"name":"get_weather"'
"""


def suite_job(folder: Path, model: str, config: str = "", suite: str = SUITE) -> BatchJob:
    (folder / "tools.yaml").write_text(json.dumps([WEATHER]))
    read = read_suite(suite.replace("MODEL", model).replace(", CONFIG", config), folder)
    return BatchJob("tools", read.rows, GridSpec([], {}), settings=read.settings)


def scripted(services, folder: Path, answer: str) -> str:
    """Load a scripted model (named after ``folder``) that always answers ``answer``; its name."""
    services.registry.register(scripted_loader(services.loaded.tokenizer, answer, folder.name))
    services.models.load(services.models.catalog.entry_for_path(folder), loader="scripted", make_current=False)
    return folder.name


def test_a_reply_of_tool_calls_is_the_calls_as_promptfoos_openai_provider_returns_them(services, tmp_path):
    job = suite_job(tmp_path, scripted(services, tmp_path, CALL))
    (row,) = run(services, job).rows()
    calls = json.loads(row.output)
    assert row.output == json.dumps(calls, separators=(",", ":"))  # JSON.stringify's text, which text asserts read
    (call,) = calls
    assert call["id"].startswith("call_") and call["type"] == "function"
    assert call["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    assert [a.passed for a in row.asserts] == [True, True, True], row.asserts  # the javascript got the list
    assert row.passed and row.finish_reason == "stop"
    again = run(services, job).rows()[0]  # from the cache: the reply as generated, read again
    assert again.from_cache and again.passed and json.loads(again.output)[0]["function"] == call["function"]
    assert row.output_json and again.output_json
    exported = json.loads(to_promptfoo([row], prompts=job.rows))["results"]["results"][0]
    assert exported["response"]["output"] == calls  # the list itself, as promptfoo writes its tool calls
    assert from_jsonl(to_jsonl([row])) == [row] and from_csv(to_csv([row])) == [row]


def test_a_text_output_stays_text_in_promptfoos_export(services, tmp_path):
    (row,) = run(services, suite_job(tmp_path, scripted(services, tmp_path, '["not", "a", "call"]'))).rows()
    assert not row.output_json
    assert json.loads(to_promptfoo([row]))["results"]["results"][0]["response"]["output"] == '["not", "a", "call"]'


def test_the_prompt_offers_the_tools_as_the_api_does(services, tmp_path):
    job = suite_job(tmp_path, "tiny")
    model, setting = services.models.slot("tiny").model, job.settings[0]
    template = services.batch_runner.template(job, model)
    prompt, messages = BatchRunner._prompt(job, job.rows[0], model, template, setting.prompt)
    asked = [{"role": "user", "content": "What is the weather in Paris?"}]
    assert prompt == render_messages(model.tokenizer, asked, plan_tools([WEATHER], None, None), template)
    assert '"name": "get_weather"' in prompt and messages[0]["role"] == "system"


def test_text_beside_a_call_gives_the_whole_message(services, tmp_path):
    job = suite_job(tmp_path, scripted(services, tmp_path, "Let me look. " + CALL))
    (row,) = run(services, job).rows()
    message = json.loads(row.output)
    assert message["role"] == "assistant" and message["content"] == "Let me look."
    assert message["tool_calls"][0]["function"]["name"] == "get_weather"
    assert [a.passed for a in row.asserts] == [True, False, True]  # output[0] of a message is undefined


def test_a_reply_without_a_call_stays_text(services, tmp_path):
    (row,) = run(services, suite_job(tmp_path, scripted(services, tmp_path, "It is sunny."))).rows()
    assert row.output == "It is sunny." and not row.asserts[0].passed


def test_functions_come_back_as_a_function_call(services, tmp_path):
    suite = SUITE.replace("tools: file://tools.yaml", "functions: [FUNCTION], function_call: auto").replace(
        "FUNCTION", json.dumps(WEATHER["function"])).replace("is-valid-openai-tools-call",
                                                              "is-valid-openai-function-call")
    suite = suite.replace("output[0].function.name === 'get_weather' && JSON.parse(output[0].function.arguments)",
                          "output.name === 'get_weather' && JSON.parse(output.arguments)")
    (row,) = run(services, suite_job(tmp_path, scripted(services, tmp_path, CALL), suite=suite)).rows()
    assert json.loads(row.output) == {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    assert [a.passed for a in row.asserts] == [True, True, True]


def test_a_required_tool_choice_constrains_the_model_to_a_call(services, default_model_dir, tmp_path):
    """On the default model (the tiny random one would write whitespace for ever inside the call's JSON), as the
    API's test of tool_choice required."""
    services.models.load(services.models.catalog.entry_for_path(default_model_dir), make_current=False)
    job = suite_job(tmp_path, default_model_dir.name, ", tool_choice: required, parallel_tool_calls: false, "
                                                      "max_tokens: 60")
    assert job.settings[0].params.structured_outputs  # the calls' grammar, as the API sets it
    (row,) = run(services, replace(job, use_cache=False)).rows()
    (call,) = json.loads(row.output)
    assert call["function"]["name"] == "get_weather" and set(json.loads(call["function"]["arguments"])) == {"city"}
    assert row.asserts[0].passed and row.asserts[2].passed, row.asserts


def test_a_provider_prefix_and_suffix_go_around_each_text_prompt(services, tmp_path):
    suite = """
prompts: ["{{message}}", '[{"role": "user", "content": "{{message}}"}]']
providers:
  - id: workbench:tiny
    config: {prompt: {prefix: "[INST] ", suffix: " [/INST]"}}
    prompts: ["{{message}}"]
  - id: openai:chat:plain
tests:
  - vars: {message: hello there}
"""
    read = read_suite(suite, tmp_path)
    job = BatchJob("affixed", read.rows, GridSpec([], {}), settings=read.settings)
    model = services.models.slot("tiny").model
    template = services.batch_runner.template(job, model)
    text_row = read.rows[0]
    prompt, messages = BatchRunner._prompt(job, text_row, model, template, read.settings[0].prompt)
    assert messages[-1] == {"role": "user", "content": "[INST] hello there [/INST]"}
    assert BatchRunner._prompt(job, text_row, model, template, None)[1][-1]["content"] == "hello there"
    with pytest.raises(BatchInputError, match=r"prompt.prefix/suffix go around a text prompt, and this prompt is a "
                                              r"chat"):
        read_suite(suite.replace('    prompts: ["{{message}}"]\n', ""), tmp_path)
    with pytest.raises(BatchInputError, match=r"config.prompt must be a mapping of prefix and suffix"):
        read_suite(suite.replace('prefix: "[INST] "', "start: x"), tmp_path)


def test_tools_a_provider_cannot_offer_are_refused_by_name(tmp_path):
    def refused(config: str, match: str) -> None:
        with pytest.raises(BatchInputError, match=match):
            suite_job(tmp_path, "tiny", config)

    refused(", tool_choice: {type: function, function: {name: get_time}}", r"tool_choice names 'get_time', which is "
                                                                             r"not among the tools: get_weather")
    refused(", functions: []", r"give tools or functions \(OpenAI's older form\), not both")
    refused(", response_format: {type: json_object}, tool_choice: required", r"cannot be combined with response_")
    (tmp_path / "tools.txt").write_text("x")
    with pytest.raises(BatchInputError, match=r"tools: file://tools.txt: tools are read from .json or .yaml"):
        read_suite(SUITE.replace("MODEL", "tiny").replace(", CONFIG", "").replace("tools.yaml", "tools.txt"),
                   tmp_path)
    with pytest.raises(BatchInputError, match=r"an openai:completion provider sends the prompt as a completion"):
        read_suite(SUITE.replace("workbench:MODEL", "openai:completion:x").replace(", CONFIG", ""), tmp_path)


def test_a_json_schema_response_format_gives_the_parsed_value_as_promptfoos_openai_provider_does(services, tmp_path):
    suite = """
prompts: ["Describe {{city}} as JSON."]
providers:
  - id: workbench:MODEL
    config:
      max_tokens: 40
      response_format: {type: json_schema, json_schema: {name: city, schema: {type: object}}}
tests:
  - vars: {city: Paris}
    assert:
      - {type: javascript, value: "output.population === 2.0 && output.name === 'Paris'"}
      - {type: contains, value: '"population":2}'}
"""
    answer = '{"name": "Paris", "population": 2.0}'
    (row,) = run(services, suite_job(tmp_path, scripted(services, tmp_path, answer), suite=suite)).rows()
    assert row.output == '{"name":"Paris","population":2}' and row.output_json  # JSON.stringify's text
    assert [a.passed for a in row.asserts] == [True, True], row.asserts
    assert json.loads(to_promptfoo([row]))["results"]["results"][0]["response"]["output"]["name"] == "Paris"


PROMPT_FORMATS = """
prompts:
  - label: schema
    raw: "Review {{film}} as JSON."
    config:
      response_format: {type: json_schema, json_schema: {name: review, schema: {type: object}}}
  - label: object
    raw: "Review {{film}}."
    config: {response_format: {type: json_object}}
providers:
  - id: workbench:MODEL
    config: {max_tokens: 40}
tests:
  - vars: {film: Heat}
    assert:
      - {type: javascript, value: "output.sentiment === 'positive'"}
      - {type: python, value: "output['confidence'] == 8"}
      - {type: equals, value: positive, transform: output.sentiment}
      - {type: contains, value: '"sentiment":"positive","confidence":8'}
      - {type: is-json}
"""


def test_a_prompts_own_json_schema_response_format_gives_the_parsed_value_as_promptfoo_does(services, tmp_path):
    """promptfoo's f-score example (#49): a prompt's config (not the provider's) asks for a json_schema; promptfoo's
    openai chat provider merges the prompt's config over the provider's and parses the reply (0.115,
    providers/openai/chat.js), so javascript and python asserts and transforms get the object and text asserts
    its JSON.stringify; a json_object response_format is not parsed (promptfoo parses json_schema only)."""
    answer = '{"sentiment": "positive", "confidence": 8}'
    schema, plain = run(services, suite_job(tmp_path, scripted(services, tmp_path, answer),
                                            suite=PROMPT_FORMATS)).rows()
    assert schema.output == '{"sentiment":"positive","confidence":8}' and schema.output_json
    assert [a.passed for a in schema.asserts] == [True] * 5, schema.asserts
    assert plain.output == answer and not plain.output_json
    assert [a.passed for a in plain.asserts] == [False, False, False, False, True], plain.asserts


def test_a_prompts_text_response_format_overrides_its_providers_json_schema(tmp_path):
    """promptfoo merges a prompt's config over its provider's: a prompt's ``response_format: {type: text}``
    leaves its rows unconstrained and their replies text, whatever the provider asks for."""
    suite = PROMPT_FORMATS.replace("type: json_object", "type: text").replace(
        "config: {max_tokens: 40}", "config: {max_tokens: 40, response_format: {type: json_schema, json_schema: "
                                    "{name: r, schema: {type: object}}}}")
    job = suite_job(tmp_path, "tiny", suite=suite)
    schema, plain = (Cell(row, job.settings[0], 0, 0) for row in job.rows)
    assert schema.params.structured_outputs and not plain.params.structured_outputs
    assert reply_output(schema, '{"a": 1}', "stop") == ('{"a":1}', {"a": 1})
    assert reply_output(plain, '{"a": 1}', "stop") == ('{"a": 1}', None)


def test_a_json_schema_reply_that_is_a_json_string_is_that_text():
    """promptfoo's JSON.parse of a reply '"positive"' gives the text positive, which its text asserts read as it is
    (coerceString leaves a string alone) and scripts get as a string; a number or a list is a value."""
    shape = ProviderPrompt(json_schema=True)
    assert shape.output('"positive"', "stop") == ("positive", None)
    assert shape.output("[1, 2.0]", "stop") == ("[1,2]", [1, 2.0])
    assert shape.output("not json", "length") == ("not json", None)
