"""The tool loop's logic with scripted model turns and the real built-in tools (#44): calls run and go back as
history, several steps in a row, the step limit makes the model answer, a cut or cancelled turn ends it, Stop
before a call keeps what ran, and steps round-trip through their stored form."""

from __future__ import annotations

import json

from webui.chat.tool_loop import CallRecord, ToolStep, history_of, run_tool_loop
from webui.chat.tools import plan_tools
from webui.engine import GenerationEvent
from webui.tools import ToolBox

CALC = {"type": "function", "function": {"name": "calculate", "parameters": {
    "type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}}}
ASK = [{"role": "user", "content": "What is 6*7?"}]


def call(expression: str) -> str:
    return f'<tool_call>{{"name": "calculate", "arguments": {{"expression": "{expression}"}}}}</tool_call>'


class Script:
    """Model turns from a list: each turn streams its text in two pieces; what it was given is kept."""

    def __init__(self, *turns: str, finish: str = "stop") -> None:
        self.turns, self.finish, self.seen = list(turns), finish, []

    def __call__(self, history, plan):
        self.seen.append((history, plan))
        text = self.turns.pop(0)
        half = len(text) // 2
        yield text[:half], GenerationEvent("r", text[:half])
        yield text, GenerationEvent("r", text[half:], finish_reason=self.finish if not self.turns else "stop")


def run(script, tmp_path, **kw):
    with ToolBox(tmp_path / "tools", tmp_path / "mcp_servers.json") as box:
        return list(run_tool_loop(ASK, plan_tools([CALC], "auto", True), script, box, **kw))


def test_a_call_runs_its_result_goes_back_and_the_model_answers(tmp_path):
    script = Script(call("6*7"), "It is 42.")
    updates = run(script, tmp_path)
    last = updates[-1]
    assert last.done and last.text == "It is 42." and last.event.finish_reason == "stop"
    (step,) = last.steps
    (record,) = step.calls
    assert record.name == "calculate" and json.loads(record.arguments) == {"expression": "6*7"}
    assert "42" in record.result and record.error is None and record.seconds >= 0
    assert any(u.running is not None and u.running.name == "calculate" for u in updates)  # shown while it runs
    history, plan = script.seen[1]
    assert [m["role"] for m in history] == ["user", "assistant", "tool"] and plan is not None
    assert history[2]["tool_call_id"] == record.id and "42" in history[2]["content"]


def test_several_steps_then_the_limit_makes_the_model_answer(tmp_path):
    script = Script(call("1+1"), call("2+2"), "Done.")
    last = run(script, tmp_path, max_steps=2)[-1]
    assert [c.result for s in last.steps for c in s.calls] and len(last.steps) == 2 and last.text == "Done."
    assert script.seen[2][1] is None  # the last turn is offered no tools


def test_a_failing_call_is_an_error_the_model_reads(tmp_path):
    last = run(Script(call("__import__('os')"), "Sorry."), tmp_path)[-1]
    record = last.steps[0].calls[0]
    assert record.error and record.result.startswith("error:")


def test_a_cut_or_cancelled_turn_ends_the_loop_as_it_is(tmp_path):
    for finish in ("length", "cancelled"):
        last = run(Script(call("6*7"), finish=finish), tmp_path)[-1]
        assert last.done and last.steps == [] and last.text == call("6*7") and last.event.finish_reason == finish


def test_stop_before_a_call_keeps_the_calls_already_run(tmp_path):
    asked = iter([False, True])
    last = run(Script(call("1+1") + call("2+2")), tmp_path, stopped=lambda: next(asked))[-1]
    assert last.done and [len(s.calls) for s in last.steps] == [1]


def test_steps_round_trip_through_their_stored_form_and_read_as_history():
    step = ToolStep("Let me add.", [CallRecord("call_1", "calculate", '{"expression":"1+1"}', "2", None, 0.01)])
    again = ToolStep.from_dict(json.loads(json.dumps(step.to_dict())))
    assert again == step
    assistant, tool = history_of([again])
    assert assistant["tool_calls"][0]["function"]["arguments"] == '{"expression":"1+1"}'
    assert tool == {"role": "tool", "tool_call_id": "call_1", "content": "2"}
