"""Batch rows that run the tool loop (#44): a provider that says who answers its tool calls
(webui.batch.run.tool_answers) runs webui.chat.tool_loop per row.

Each turn is rendered as the runner renders a row's prompt (the chat template's own tool support, else the
fallback block: webui.chat.tools.render_with_tools), with the history so far, and generated on the row's engine.
``tool_choice`` required or a named tool constrains the first turn only; later turns choose (auto), as OpenAI's
Agents SDK resets tool_choice after a call, so a loop can end before its step limit. The last turn the limit
allows is offered no tools, so it answers. The row's output is the final answer, its token counts are all its
turns' together (its time to first token the first turn's), its logprobs the final turn's, and its steps (each
call with its arguments, result, error and time) are kept with it. Such a row is never taken from or put in the
response cache (which keeps one reply, not a loop's steps; and a local tool may answer otherwise next time).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from webui.batch.run.grid import Setting
from webui.chat.templates import ChatTemplate
from webui.chat.tool_loop import Caller, ToolStep, run_tool_loop
from webui.chat.tools import ToolPlan, plan_tools, render_with_tools
from webui.engine import Engine, EngineError, GenerationEvent, GenerationRequest, SamplingParams
from webui.engine.stream import RequestStream
from webui.tools import ToolBox


@dataclass
class RowReply:
    """What a row's generation gave (one turn, or a whole tool loop): the output text and how it ended."""

    text: str = ""
    finish_reason: str = "error"
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    ttft: float | None = None
    tokens_per_second: float | None = None
    logprobs: list[float] = field(default_factory=list)
    """The chosen tokens' logprobs (of the final turn), when asked for."""
    error: str | None = None
    steps: list[ToolStep] | None = None
    """The tool loop's steps; None: no loop ran."""

    def add(self, event: GenerationEvent | None) -> None:
        """Count a finished turn's usage and speed (its last event's) into the row's."""
        if event is None or event.usage is None:
            return
        done, timings = self.completion_tokens, event.timings
        self.prompt_tokens += event.usage.prompt_tokens
        self.completion_tokens += event.usage.completion_tokens
        self.cached_tokens += event.usage.cached_tokens
        if timings is None:
            return
        if self.ttft is None:
            self.ttft = timings.first_token
        if timings.tokens_per_second:  # generation seconds so far, over all turns
            seconds = (done / self.tokens_per_second if self.tokens_per_second else 0.0) \
                + event.usage.completion_tokens / timings.tokens_per_second
            self.tokens_per_second = self.completion_tokens / seconds if seconds else None


class LoopTurns:
    """run_tool_loop's ``generate`` for one row: each turn rendered with the history and generated on ``engine``;
    ``watch(stream, running)`` is told of each turn's stream (so Cancel reaches it) and ``count(tokens)`` of each
    event's tokens (progress)."""

    def __init__(self, engine: Engine, tokenizer: Any, template: ChatTemplate | None, params: SamplingParams,
                 loras: tuple[tuple[str, float], ...], plan: ToolPlan, logprobs: bool,
                 watch: Callable[[RequestStream, bool], None], count: Callable[[int], None]) -> None:
        self.engine, self.tokenizer, self.template, self.params, self.loras = engine, tokenizer, template, params, loras
        self.plan, self.logprobs, self.watch, self.count = plan, logprobs, watch, count
        self.reply = RowReply()
        self.turns = 0

    def __call__(self, history: list[dict[str, Any]], offered: ToolPlan | None
                 ) -> Iterator[tuple[str, GenerationEvent]]:
        first, self.turns = self.turns == 0, self.turns + 1
        params = self.params
        if not first or offered is None:
            offered = offered if offered is None else replace(offered, choice="auto")
            if self.plan.grammar() is not None:  # the calls' grammar bound the first turn only
                params = params.replace(structured_outputs={})
        prompt, shaped = render_with_tools(self.tokenizer, history, offered, self.template)
        stream = self.engine.submit(GenerationRequest(prompt, params, add_special_tokens=False, loras=self.loras,
                                                      messages=shaped, logprobs=0 if self.logprobs else None))
        self.watch(stream, True)
        text, last = "", None
        self.reply.logprobs = []
        try:
            for event in stream:
                text += event.text
                self.reply.logprobs.extend(lp.logprob for lp in event.logprobs)
                last = event
                self.count(len(event.token_ids) or bool(event.text))
                yield text, event
        finally:
            self.watch(stream, False)
            self.reply.add(last)


def run_loop_row(messages: list[dict[str, Any]], turns: LoopTurns, caller: Caller, max_steps: int,
                 stopped: Callable[[], bool]) -> RowReply:
    """Run one row's tool loop to its end (in a worker thread: the loop waits on the engine and the tools)."""
    reply = turns.reply
    try:
        *_, last = run_tool_loop(messages, turns.plan, turns, caller, max_steps, stopped=stopped)
    except (EngineError, ValueError) as exc:
        reply.error, reply.finish_reason = str(exc), "error"
        return reply
    reply.text, reply.steps = last.text, list(last.steps)
    reply.finish_reason = (last.event.finish_reason or "error") if last.event is not None else "error"
    return reply


def most_turns(setting: Setting) -> int:
    """The most model turns a cell of ``setting`` runs: its tool loop's step limit and the answer, else one."""
    answers = setting.prompt.answers if setting.prompt is not None else None
    return 1 if answers is None else answers.max_steps + 1


def needs_local_tools(settings: Sequence[Setting] | None) -> bool:
    """Whether a setting's calls are answered by the workbench's own tools."""
    return any(s.prompt is not None and s.prompt.answers is not None and s.prompt.answers.local
               for s in settings or ())


def local_toolbox(user_data_dir: Path) -> ToolBox:
    """The tool box of the user data dir, for the run's local tools."""
    return ToolBox.for_user_data(user_data_dir)


def offer_local_tools(settings: list[Setting], toolbox: ToolBox) -> list[Setting]:
    """``settings`` with every local tool offered where the answers are local and no tools are listed (the
    tool_choice is then auto: webui.batch.run.tool_answers.check_local_choice)."""
    out = []
    for setting in settings:
        shape = setting.prompt
        if shape is not None and shape.answers is not None and shape.answers.local and shape.tools is None:
            setting = replace(setting, prompt=replace(shape, tools=plan_tools(toolbox.list().openai(), None, None)))
        out.append(setting)
    return out
