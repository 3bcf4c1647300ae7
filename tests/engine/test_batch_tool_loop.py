"""Tool use as a test (#44): a suite's provider gives canned results (or the local tools) and each row runs the tool
loop on the engine; the calls are kept with the row, asserted on, exported, and pass rates come per provider."""

from __future__ import annotations

import csv
import io
import json
import time
from pathlib import Path

from tests.engine.scripted import ScriptedModel, loader_of
from tests.engine.test_batch_runner import run
from webui.batch.run.grid import GridSpec
from webui.batch.run.export import CSV_COLUMNS, from_csv, from_jsonl, to_csv, to_jsonl
from webui.batch.promptfoo.reader import read_suite
from webui.batch.promptfoo.export import to_promptfoo
from webui.batch.run.results import ResultRow, summarize
from webui.batch.run.runner import BatchJob
from webui.chat.tool_loop import MAX_STEPS
from webui.chat.tools import FALLBACK
from webui.ui.batch_views import result_table

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}
SUITE = """
prompts: ["What is the weather in {{city}}?"]
providers:
  - id: workbench:MODEL
    label: canned
    config:
      tools: TOOLS
      max_tokens: 60
      CONFIG
tests:
  - vars: {city: Paris}
    assert:
      - {type: tool-call-f1, value: [get_weather, get_time]}
      - {type: called-tool, value: {name: get_weather, arguments: {properties: {city: {const: Paris}}}}}
      - {type: is-valid-openai-tools-call}
      - {type: icontains, value: sunny}
"""
NO_TOOLS_CALL = "      - {type: is-valid-openai-tools-call}\n"
CANNED = """tool_results:
        get_weather:
          - {arguments: {city: Paris}, result: "Sunny, 21 °C"}
        get_time: "14:00"
"""


def call(name: str, **arguments) -> str:
    return f'<tool_call>{{"name": "{name}", "arguments": {json.dumps(arguments)}}}</tool_call>'


class TurnsModel(ScriptedModel):
    """A scripted model for tool loops: a turn whose prompt holds N tool results writes ``turns[N]`` (the last one
    past the end); each turn's prompt is kept in ``prompts``."""

    def __init__(self, tokenizer, turns: list[str], name: str, step_delay: float = 0.0) -> None:
        super().__init__(tokenizer, [], name=name, context_length=4096, step_delay=step_delay)
        self.turns = [tokenizer.encode(t, add_special_tokens=False) for t in turns]
        self.prompts: list[str] = []

    def new_cache(self):
        return {"ids": [], "steps": 0, "decodes": 0}

    def forward(self, caches, new_ids):
        import torch

        time.sleep(self.step_delay)
        rows = []
        for cache, ids in zip(caches, new_ids):
            if len(ids) == 1 and cache["steps"]:
                cache["decodes"] += 1  # one token fed back: a decode step (prompt chunks are longer)
            cache["steps"] += 1
            if not cache["decodes"]:  # still reading the prompt
                cache["ids"].extend(ids)
                prompt = self.tokenizer.decode(cache["ids"], skip_special_tokens=False)
                cache["script"] = self.turns[min(prompt.count("<tool_response>"), len(self.turns) - 1)]
                cache["prompt"] = prompt
            elif cache["decodes"] == 1:
                self.prompts.append(cache["prompt"])
            script, at = cache["script"], cache["decodes"]
            row = torch.zeros(self.vocab)
            row[script[at] if at < len(script) else min(self.tokenizer.eos_token_ids)] = 100.0
            rows.append(row)
        return torch.stack(rows)


def turns_model(services, folder: Path, turns: list[str], step_delay: float = 0.0) -> TurnsModel:
    """Load a TurnsModel named after ``folder`` (beside the tiny model)."""
    model = TurnsModel(services.loaded.tokenizer, turns, folder.name, step_delay)

    services.registry.register(loader_of(lambda: model, about="a model for tool loops"))
    services.models.load(services.models.catalog.entry_for_path(folder), loader="scripted", make_current=False)
    return model


def suite_job(folder: Path, config: str = CANNED, tools: list | None = None, suite: str = SUITE) -> BatchJob:
    text = suite.replace("MODEL", folder.name).replace("TOOLS", json.dumps(tools or [WEATHER, TIME]))
    read = read_suite(text.replace("CONFIG", config.strip()), folder)
    return BatchJob("tools", read.rows, GridSpec([], {}), settings=read.settings)


def calls_of(row: ResultRow) -> list[dict]:
    return [c for step in row.tool_steps or [] for c in step["calls"]]


def test_a_two_step_loop_answers_from_canned_results_and_keeps_its_calls(services, tmp_path):
    model = turns_model(services, tmp_path, [call("get_weather", city="Paris"), call("get_time"),
                                             "Sunny in Paris, and it is 14:00."])
    handle = run(services, suite_job(tmp_path))
    (row,) = handle.rows()
    assert row.output == "Sunny in Paris, and it is 14:00." and row.finish_reason == "stop" and not row.output_json
    calls = calls_of(row)
    assert [(c["name"], json.loads(c["arguments"]), c["result"], c["error"]) for c in calls] == [
        ("get_weather", {"city": "Paris"}, "Sunny, 21 °C", None), ("get_time", {}, "14:00", None)]
    assert [a.passed for a in row.asserts] == [True, True, True, True], row.asserts
    assert row.passed and row.score == 1.0
    assert len(model.prompts) == 3 and FALLBACK in model.prompts[1]  # turns after a call are offered tools too
    assert "Sunny, 21 °C" in model.prompts[1] and "14:00" in model.prompts[2]  # the model read each result
    assert row.completion_tokens > len(services.loaded.tokenizer.encode(row.output, add_special_tokens=False))

    stored = services.batches.results(handle.run_id)[0]
    assert stored["tool_steps"] == row.tool_steps and ResultRow.from_dict(stored) == row
    assert from_jsonl(to_jsonl([row])) == [row] and from_csv(to_csv([row])) == [row]
    (written,) = csv.DictReader(io.StringIO(to_csv([row])))
    assert CSV_COLUMNS[-1] == "tool_steps" and json.loads(written["tool_steps"]) == row.tool_steps
    exported = json.loads(to_promptfoo([row]))["results"]["results"][0]["response"]
    assert exported["output"] == row.output and exported["metadata"]["toolSteps"] == row.tool_steps
    shown = result_table([row])["tool calls"][0]
    assert shown == 'get_weather({"city": "Paris"}) → Sunny, 21 °C · get_time({}) → 14:00'

    spec = services.batches.get(handle.run_id).spec  # a re-run repeats the loop from the stored spec
    again = run(services, BatchJob.from_stored("again", spec)).rows()[0]
    assert again.output == row.output and not again.from_cache and len(calls_of(again)) == 2


def test_a_call_with_no_canned_result_gets_an_error_the_model_reads(services, tmp_path):
    model = turns_model(services, tmp_path, [call("get_weather", city="Lyon"), call("get_time"), "No idea, sorry."])
    config = 'tool_results: {get_weather: [{arguments: {city: Paris}, result: "Sunny"}]}'
    (row,) = run(services, suite_job(tmp_path, config)).rows()
    lyon, time = calls_of(row)
    assert lyon["error"] == 'the test gives no result for get_weather with the arguments {"city": "Lyon"}'
    assert time["error"] == "the test gives no result for get_time (it gives results for: get_weather)"
    assert lyon["result"] == "error: " + lyon["error"] and model.prompts[2].count("error: the test gives") == 2
    assert row.output == "No idea, sorry." and row.error is None
    assert [a.passed for a in row.asserts] == [True, False, True, False]  # called both; never for Paris
    assert "get_weather was called, but its arguments do not match the schema" in row.asserts[1].detail


def test_the_step_limit_makes_the_last_turn_answer_without_tools(services, tmp_path):
    always = call("get_weather", city="Paris")
    model = turns_model(services, tmp_path, [always])
    (row,) = run(services, suite_job(tmp_path, CANNED + "      max_tool_steps: 1")).rows()
    assert len(row.tool_steps) == 1 and row.output == always  # the last turn's call is text: no tools were offered
    assert FALLBACK in model.prompts[0] and FALLBACK not in model.prompts[1]
    model.prompts.clear()
    (row,) = run(services, suite_job(tmp_path)).rows()  # the default limit
    assert len(row.tool_steps) == MAX_STEPS and len(model.prompts) == MAX_STEPS + 1


def test_a_grid_of_two_tool_sets_gives_a_pass_rate_for_each(services, tmp_path):
    turns_model(services, tmp_path, [call("get_weather", city="Paris"), "Sunny."])
    suite = SUITE.replace("""tests:""", """  - id: workbench:MODEL
    label: no weather tool
    config:
      tools: [TIME_TOOL]
      tool_results: {get_time: "14:00"}
tests:""").replace("TIME_TOOL", json.dumps(TIME))
    suite = suite.replace("{type: tool-call-f1, value: [get_weather, get_time]}",
                          "{type: tool-call-f1, value: get_weather}").replace(NO_TOOLS_CALL, "")
    rows = run(services, suite_job(tmp_path, suite=suite)).rows()
    by_setting = {s.label: s.pass_rate for s in summarize(rows)}
    assert by_setting == {"canned": 1.0, "no weather tool": 0.0}
    other = next(r for r in rows if r.setting == "no weather tool")
    assert other.tool_steps == [] and other.output == call("get_weather", city="Paris")  # not its tool: text


def test_local_tools_answer_the_calls(services, tmp_path):
    model = turns_model(services, tmp_path, [call("calculate", expression="6*7"), "It is 42."])
    suite = SUITE.replace("      tools: TOOLS\n", "").replace(NO_TOOLS_CALL, "").replace(
        "{type: icontains, value: sunny}", "{type: contains, value: '42'}")
    suite = suite.replace("value: [get_weather, get_time]", "value: [calculate]").replace(
        "{type: called-tool, value: {name: get_weather, arguments: {properties: {city: {const: Paris}}}}}",
        "{type: called-tool, value: calculate}")
    job = suite_job(tmp_path, "tools_from: local", suite=suite)
    handle = run(services, job)
    (row,) = handle.rows()
    (calculation,) = calls_of(row)
    assert calculation["name"] == "calculate" and "42" in calculation["result"] and calculation["error"] is None
    assert row.output == "It is 42." and row.passed, row.asserts
    assert "roll_dice" in model.prompts[0] and "get_datetime" in model.prompts[0]  # every local tool offered
    offered = services.batches.get(handle.run_id).spec.settings[0].prompt["tools"]["tools"]
    assert {t["function"]["name"] for t in offered} >= {"calculate", "get_datetime", "roll_dice"}  # as they ran
    assert handle.toolbox is not None and handle.toolbox._closed  # stopped with the run


def test_cancel_stops_a_loop_between_its_turns_and_keeps_no_half_row(services, tmp_path):
    model = turns_model(services, tmp_path, [call("get_weather", city="Paris")], step_delay=0.01)
    handle = services.batch_runner.start(suite_job(tmp_path, CANNED + "      max_tool_steps: 50"))
    deadline = time.monotonic() + 60
    while len(model.prompts) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    handle.cancel()
    assert handle.wait(30) and handle.status == "cancelled" and handle.rows() == []
    assert len(model.prompts) < 10 and not handle._streams
