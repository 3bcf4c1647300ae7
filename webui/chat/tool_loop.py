"""The tool loop (#44): a reply that calls tools runs each call, gives the results back to the model and generates
again, until the model answers without calling or the step limit is reached (the last turn is then generated with
no tools offered, so it answers).

The loop knows nothing of slots, tabs or batches: the caller gives ``generate`` (one model turn: the history and
the tools to offer -> (text so far, event) pairs, the last event with a finish reason) and a ``caller`` that runs
one call (a :class:`~webui.tools.ToolBox`, or canned results in a batch). What the loop made is a list of
:class:`ToolStep` (the model's text and its calls, each with its result, time and error), which the caller stores
with the reply and which :meth:`ToolStep.messages` turns back into the history the model reads (an assistant
message with ``tool_calls``, then one ``tool`` message per call), so a later turn, a regenerate or a reproduce
record sees exactly what the model saw.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Protocol

from webui.chat.tool_steps import CallRecord, ToolStep, history_of
from webui.chat.tools import ToolPlan, read_calls
from webui.engine import GenerationEvent

MAX_STEPS = 5
"""Turns that may call tools before the model must answer (a setting; text-generation-webui's default too)."""

Generate = Callable[[list[dict[str, Any]], "ToolPlan | None"], Iterator[tuple[str, GenerationEvent]]]
"""One model turn: the history (OpenAI's message dicts) and the tools to offer (None: none, the model answers)."""


class Caller(Protocol):
    """Runs one call: ``arguments`` is the JSON text the model wrote."""

    def call(self, name: str, arguments: Any, timeout: float | None = None) -> Any: ...


@dataclass
class LoopUpdate:
    """Where the loop is: the finished steps, the turn being generated (its text so far), a call that is running,
    and the last engine event. ``done``: ``text`` is the answer and ``event`` its final event."""

    steps: list[ToolStep]
    text: str
    running: CallRecord | None
    event: GenerationEvent | None
    done: bool = False

    @property
    def tool_seconds(self) -> float:
        """Time the tools took (not the model)."""
        return sum(c.seconds for step in self.steps for c in step.calls)


def run_tool_loop(messages: list[dict[str, Any]], plan: ToolPlan, generate: Generate, caller: Caller,
                  max_steps: int = MAX_STEPS, steps: list[ToolStep] | None = None,
                  stopped: Callable[[], bool] = lambda: False) -> Iterator[LoopUpdate]:
    """Generate, run the calls the reply makes, give their results back, and again; yields a LoopUpdate for every
    event and around every call, the last one ``done``. ``steps``: calls already made (a reply continued after a
    person edited a call), which count toward ``max_steps``. A turn that ends other than by its model (cut by
    max_tokens, cancelled by Stop, an error) ends the loop as it is; ``stopped()`` is asked before each call and
    each new turn, and a loop stopped there keeps the calls already run."""
    steps = list(steps or [])
    last: GenerationEvent | None = None
    while True:
        if steps and stopped():  # Stop pressed while the last call ran: no new turn
            yield LoopUpdate(steps, "", None, last, done=True)
            return
        offered = plan if len(steps) < max_steps else None
        text, last = "", None
        for text, event in generate(messages + history_of(steps), offered):
            last = event
            yield LoopUpdate(steps, text, None, event)
        content, calls = read_calls(text, offered) if offered is not None and last is not None \
            and last.finish_reason == "stop" else (text, [])
        if not calls:
            yield LoopUpdate(steps, text, None, last, done=True)
            return
        step = ToolStep(content or "")
        for call in calls:
            if stopped():
                yield LoopUpdate(steps + [step] if step.calls else steps, "", None, last, done=True)
                return
            record = CallRecord(call.id, call.name, call.arguments)
            yield LoopUpdate(steps + [step], "", record, last)
            step.calls.append(run_call(caller, record))
        steps = [*steps, step]
        yield LoopUpdate(steps, "", None, last)


def run_call(caller: Caller, record: CallRecord) -> CallRecord:
    """Run ``record``'s call through ``caller`` and fill in its result, error, time and truncation."""
    started = time.monotonic()
    result = caller.call(record.name, record.arguments)
    record.result = str(getattr(result, "text", result))
    error = getattr(result, "error", None)
    record.error = None if error is None else str(getattr(error, "message", error))
    record.seconds = float(getattr(result, "seconds", time.monotonic() - started))
    record.truncated = bool(getattr(result, "truncated", False))
    return record
