"""A chat reply that calls tools (#44): the chat's tools are offered, each call the reply makes runs (through the
ToolBox: built-ins, tool files, MCP servers), its result goes back to the model, and the model goes on until it
answers without calling or the step limit is reached (webui.chat.tool_loop). Every step is stored with the reply as
it happens (its record's ``tool_steps``), so the log shows each call as a block, a reload or a kill -9 loses no call
already made, and regenerate, versions and export keep them. A person may edit a call's arguments (the tool runs
again) or its result, and the reply goes on from there as a new version.

No Gradio here; ChatSession (webui.controllers.chat) calls in, as the ChatHost these functions read.
"""

from __future__ import annotations

import json
import threading
from dataclasses import replace
from typing import Any, Iterator, Protocol, Sequence

from loaders.base import LoadedModel
from webui.chat import ChatPromptError
from webui.chat.context import FittedChat, fit_chat
from webui.chat.modes import INSTRUCT
from webui.chat.reply import ReplyRecord
from webui.chat.tool_loop import LoopUpdate, run_call, run_tool_loop
from webui.chat.tool_steps import CallRecord, ToolStep, history_of
from webui.chat.templates import ChatTemplate
from webui.chat.tools import ToolPlan, may_be_a_call, plan_tools, render_with_tools
from webui.controllers.chat_library import ChatLibrary, ChatView, block, tool_blocks
from webui.controllers.errors import UserError
from webui.controllers.generation import ActiveRequests, Key, Pace, new_request, stream_request
from webui.controllers.reply_stats import ReplyStart, final_stats
from webui.documents import with_documents
from webui.engine import GenerationEvent, SamplingParams
from webui.engine.params import InvalidParameter
from webui.engine.sequence import token_budget
from webui.models import Slot
from webui.services import Services
from webui.store.chats import ChatStore, Message
from webui.token_view import VIEW_TOP, token_rows


class ChatHost(Protocol):
    """What a tool reply reads of the chat session that runs it (webui.controllers.chat.ChatSession)."""

    services: Services
    chats: ChatStore
    library: ChatLibrary
    active: ActiveRequests
    view_interval: float

    def slot(self) -> Slot: ...

    def template(self, model: LoadedModel | None = None) -> ChatTemplate: ...


def tool_turns(messages: list[Message]) -> list[dict[str, Any]]:
    """The chat's turns as the model reads them: each reply that called tools preceded by its calls and their
    results."""
    out: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "assistant":
            out += history_of(list(m.record.tool_steps))
        out.append({"role": m.role, "content": with_documents(m.content, m.documents)})
    return out


def uses_tools(messages: list[Message]) -> bool:
    """Whether any reply of the chat called tools (its prompt then shows the calls, tools on or off now)."""
    return any(m.role == "assistant" and m.record.tool_steps for m in messages)


def chat_plan(session: ChatHost, names: Sequence[str]) -> ToolPlan | None:
    """The chat's tools as offered to the model (None: it has none); UserError names one that is gone."""
    if not names:
        return None
    listing = session.services.tools.list()
    missing = [n for n in names if listing.get(n) is None]
    if missing:
        raise UserError(f"This chat's tool{'s' if len(missing) > 1 else ''} {', '.join(missing)} "
                        f"{'are' if len(missing) > 1 else 'is'} not installed now (a tool file removed or broken, "
                        "an MCP server gone); untick it under Tools, or put it back")
    try:
        return plan_tools([listing.get(n).openai() for n in names], "auto", True)  # type: ignore[union-attr]
    except InvalidParameter as exc:
        raise UserError(f"The chat's tools: {exc}") from exc


def check_tool_chat(session: ChatHost, cid: int, history: list[Message]) -> None:
    """A chat with tools on can have a reply written: a local model, the instruct mode, no images."""
    model = session.slot().model
    if model.capabilities.renders_chats:
        raise UserError("Tools need a local model: a remote server is offered tools over its own API. Untick the "
                        "tools, or load a local model")
    if session.chats.get(cid).mode != INSTRUCT:
        raise UserError("Tools work in the instruct mode; switch the chat to instruct, or untick its tools")
    if any(m.images for m in history):
        raise UserError("A chat with images cannot use tools yet; untick the tools, or start a new chat")


HELD = "a grammar: calls of the offered tools, arguments fitting their schemas"
"""How a first turn that must call a tool is held (the chat's "a tool must be called")."""


class ToolReplies:
    """The tool loop of ChatSession's replies; ``stopping`` holds each running loop's Stop, by its reply key."""

    def __init__(self, session: ChatHost) -> None:
        self.session = session
        self.stopping: dict[Key, threading.Event] = {}

    def stop(self, reply: Key) -> bool:
        flag = self.stopping.get(reply)
        if flag is not None:
            flag.set()
        return flag is not None

    def busy(self, reply: Key) -> bool:
        return reply in self.stopping

    def check(self, cid: int) -> None:
        """Before anything is stored or removed: a chat with tools (or earlier calls) can have a reply written
        (UserError says why not)."""
        chat, history = self.session.chats.get(cid), self.session.chats.messages(cid)
        if chat.tools or uses_tools(history):
            check_tool_chat(self.session, cid, history)
            chat_plan(self.session, chat.tools)

    def reply(self, cid: int, sampling: SamplingParams, reply: Key,
              steps: Sequence[ToolStep] = ()) -> Iterator[ChatView]:
        """Write a reply in chat ``cid`` with its tools offered (a chat whose tools were all unticked: none, its
        earlier calls still in the history); ``steps``: calls already made (a call a person edited), the reply
        going on after them."""
        session = self.session
        slot = session.slot()
        model, chats = slot.model, session.chats
        history = chats.messages(cid)
        check_tool_chat(session, cid, history)
        chat = chats.get(cid)
        plan = chat_plan(session, chat.tools)
        template = session.template(model)
        tokenizer = model.tokenizer
        budget = max(1, token_budget(model, sampling) - sampling.max_new_tokens)

        def render(messages: list[dict[str, Any]], offered: ToolPlan | None = plan) -> str:
            try:
                return render_with_tools(tokenizer, messages, offered, template)[0]
            except ChatPromptError as exc:
                raise UserError(str(exc)) from exc

        try:
            fitted = fit_chat(tokenizer, tool_turns(history), chat.system_prompt, budget, template,
                              policy=session.services.settings.get().context_policy, render=render)
        except ChatPromptError as exc:
            raise UserError(str(exc)) from exc
        turn: dict[str, Any] = {}

        required = session.services.settings.get().tool_choice == "required"

        def generate(messages: list[dict[str, Any]], offered: ToolPlan | None) -> Iterator[tuple[str, Any]]:
            params = sampling
            turn["constrained"] = ""
            if required and offered is not None and len(messages) == len(fitted.messages):  # the first turn calls
                offered = replace(offered, choice="required")
                params = sampling.replace(structured_outputs=offered.grammar() or {})
                turn["constrained"] = HELD
            prompt = render(messages, offered)
            size = len(tokenizer.encode(prompt, add_special_tokens=False))
            if size > budget:
                raise UserError(f"The calls' results fill the context: the next turn is {size} tokens and the context "
                                f"leaves {budget} for it (after max_new_tokens); lower max_new_tokens, or lower the "
                                "step limit")
            request = new_request(slot, prompt, params, False, messages,
                                  VIEW_TOP if model.capabilities.stepped else None)
            turn.update(request=request, offered=offered)
            yield from stream_request(slot, session.active, reply, request)

        flag = threading.Event()
        self.stopping[reply] = flag
        try:
            loop = run_tool_loop(fitted.messages, plan, generate, session.services.tools,
                                 session.services.settings.get().max_tool_steps, list(steps), flag.is_set) \
                if plan is not None else run_tool_loop(fitted.messages, ToolPlan((), "auto", True), generate,
                                                       session.services.tools, 0, list(steps), flag.is_set)
            yield from self._store(cid, loop, turn, fitted, template, model, flag)
        finally:
            self.stopping.pop(reply, None)

    def _store(self, cid: int, loop: Iterator[LoopUpdate], turn: dict[str, Any], fitted: FittedChat,
               template: ChatTemplate, model: Any, flag: threading.Event) -> Iterator[ChatView]:
        """Store the reply as the loop goes: its steps (each call as it finishes) and the answer's text as it
        streams; the answer's run record at the end."""
        chats, session = self.session.chats, self.session
        head = session.library.view(cid)  # title, system prompt and the earlier messages stay while it streams
        pace = Pace(session.view_interval)
        target: Message | None = None
        ids: list[int] = []
        rows: list[dict[str, Any]] = []
        seen: GenerationEvent | None = None
        steps: list[ToolStep] = []
        shape: Any = None  # what the last view showed besides the answer's text: its steps and the call running

        def keep(update: LoopUpdate) -> ChatView | None:
            nonlocal target, ids, rows, seen, steps, shape
            steps = list(update.steps)
            if update.running is not None:  # the turn called: its tokens go with its step, the next turn's are new
                if not update.steps[-1].calls:  # (its first call)
                    update.steps[-1].tokens, update.steps[-1].constrained = rows, turn.get("constrained", "")
                ids, rows = [], []
            elif update.event is not None and update.event is not seen:
                seen = update.event
                ids += update.event.token_ids
                rows += token_rows(update.event.logprobs)
            event = update.event if update.done else None
            final = event is not None
            now = (update.running, [(step.text, len(step.calls)) for step in steps])
            if not pace.due(now=final or target is None or now != shape):
                return None
            shape = now
            text = update.text if update.done or not may_be_a_call(update.text) else ""
            if event is not None and "request" in turn:
                stat = replace(final_stats(event, turn["request"], model, template, ReplyStart(), ids, rows,
                                           fitted), tool_steps=tuple(steps),
                               tools_offered=tuple(turn["offered"].tools) if turn.get("offered") else ())
            else:
                stat = ReplyRecord(tool_steps=tuple(steps))
            if target is None:
                target = chats.append(cid, "assistant", text, stats=stat)
            else:
                chats.update(target.id, content=text, stats=stat)
            shown = [*head.messages, *(b for _, b in tool_blocks(steps, 0)), {"role": "assistant", "content": text}]
            if update.running is not None:  # the call running now, as a block after those done
                call = update.running
                shown[-1:-1] = [block(call.arguments, f"Tool call: {call.name} · arguments"),
                                block("", f"{call.name} · running…", running=True)]
            status = stat.summary if final else (f"calling {update.running.name}…" if update.running is not None
                                                 else "generating…")
            return replace(head, messages=shown, stats=status, replying=not final)

        last: LoopUpdate | None = None
        try:
            for update in loop:
                last = update
                if update.running is None and update.event is not None and update.event is seen \
                        and not update.done and update.steps == steps:
                    continue  # the step's end repeats the turn's last event: nothing new to show
                view = keep(update)
                if view is not None:
                    yield view
        except GeneratorExit:  # the tab was closed or reloaded mid-reply: the calls made are kept, the loop ends
            flag.set()
            close = getattr(loop, "close", None)
            if close is not None:
                close()
            if target is not None and last is not None:
                chats.update(target.id, stats=ReplyRecord(tool_steps=tuple(last.steps)))
            raise


def edited_steps(made: ReplyRecord, step: int, call: int, part: str, text: str,
                 session: ChatHost) -> list[ToolStep]:
    """The reply's steps up to and including step ``step``, with call ``call``'s ``part`` ("arguments": the
    tool runs again with them; "result": what the model reads) replaced by ``text``; later steps go (the model
    goes on from there)."""
    if not 0 <= step < len(made.tool_steps) or not 0 <= call < len(made.tool_steps[step].calls):
        raise UserError("That call is not in this reply any more; click one of its calls.")
    steps = [ToolStep.from_dict(s.to_dict()) for s in made.tool_steps[:step + 1]]  # copies: the stored ones stay
    edited = steps[step].calls[call]
    if part == "arguments":
        try:
            json.loads(text)
        except ValueError as exc:
            raise UserError(f"The arguments must be JSON (an object, as the tool's parameters say): {exc}") from exc
        steps[step].calls[call] = run_call(session.services.tools, CallRecord(edited.id, edited.name, text.strip()))
        steps[step].tokens, steps[step].constrained = [], ""  # (the model's tokens wrote other arguments)
    elif part == "result":
        steps[step].calls[call] = replace(edited, result=text, error=None, truncated=False)
    else:
        raise UserError("Only a call's arguments or its result can be edited; edit the reply's text below them.")
    return steps
