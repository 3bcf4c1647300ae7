"""A response as it is generated: its output items and its stream of typed events, read from the engine's events.

``ResponseEvents`` holds the response object and writes every event (``response.created`` ... ``response.completed``,
each with its ``sequence_number``); ``ResponseReader`` reads a reply into it: text as a ``message`` item, tool
calls as ``function_call`` items (streamed as they are generated when tool_choice constrains the reply to calls;
with tool_choice auto read once the reply can no longer be one, as chat completions do). A stored response is
streamed again by feeding its output items through the same ``ResponseEvents`` (``replayed``). ``ResponseRun``
drives a reply on the engine for any number of readers: the request's own stream, a background response's
pollers.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from typing import Any, AsyncIterator, Awaitable, Callable

from webui.api.responses_items import item_id
from webui.api.chunks import chat_logprobs
from webui.api.serving import Choice, usage
from webui.chat.tools import ReplyReader, ToolPlan
from webui.engine import Interleaved, RequestStream
from webui.engine.types import GenerationEvent, TokenLogprob

log = logging.getLogger("webui.api")

TERMINAL = {"completed": "response.completed", "incomplete": "response.incomplete", "failed": "response.failed",
            "cancelled": "response.failed"}  # (OpenAI's stream has no cancelled event; a cancelled one has failed)


def response_usage(choice: Choice, cache_block: int | None) -> dict[str, Any]:
    """OpenAI's Responses usage from a finished reply; ``cache_block``: the prefix cache's block size (None: the
    model keeps no prefix cache), which keeps the prompt's whole blocks it did not find."""
    u = usage([choice])
    cached = u["prompt_tokens_details"]["cached_tokens"]
    written = max(0, u["prompt_tokens"] // cache_block * cache_block - cached) if cache_block else 0
    return {"input_tokens": u["prompt_tokens"],
            "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": written},
            "output_tokens": u["completion_tokens"], "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": u["total_tokens"]}


class ResponseEvents:
    """A response object and the events that build it: at most one output item open at a time."""

    def __init__(self, response: dict[str, Any]) -> None:
        self.response = response
        self.sequence = 0
        self.item: dict[str, Any] | None = None  # the open item

    def _event(self, kind: str, **fields: Any) -> dict[str, Any]:
        event = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return event

    def lifecycle(self, kind: str) -> dict[str, Any]:
        """response.created, .queued, .in_progress or a terminal event, with the response as it is now."""
        return self._event(kind, response=copy.deepcopy(self.response))

    def _open(self, item: dict[str, Any]) -> list[dict[str, Any]]:
        events = self.close()
        self.item = item
        self.response["output"].append(item)
        return events + [self._event("response.output_item.added", output_index=self._index(),
                                     item=copy.deepcopy(item))]

    def _index(self) -> int:
        return len(self.response["output"]) - 1

    def text(self, delta: str, logprobs: list[dict[str, Any]], id: str | None = None) -> list[dict[str, Any]]:
        """A piece of the reply's text (its message opened first if need be)."""
        events = []
        item = self.item
        if item is None or item["type"] != "message":
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            item = {"id": id or item_id("msg"), "type": "message", "status": "in_progress", "role": "assistant",
                    "content": []}
            events += self._open(item)  # (added without its part, which is added next)
            item["content"].append(part)
            events.append(self._event("response.content_part.added", item_id=item["id"],
                                      output_index=self._index(), content_index=0, part=copy.deepcopy(part)))
        part = item["content"][0]
        part["text"] += delta
        part["logprobs"] += logprobs
        if delta or logprobs:
            events.append(self._event("response.output_text.delta", item_id=item["id"],
                                      output_index=self._index(), content_index=0, delta=delta, logprobs=logprobs))
        return events

    def call(self, call_id: str, name: str, id: str | None = None) -> list[dict[str, Any]]:
        """A function call begins (its arguments follow)."""
        return self._open({"id": id or item_id("fc"), "type": "function_call", "status": "in_progress",
                           "call_id": call_id, "name": name, "arguments": ""})

    def arguments(self, delta: str) -> list[dict[str, Any]]:
        assert self.item is not None and self.item["type"] == "function_call", "arguments outside a call"
        self.item["arguments"] += delta
        return [self._event("response.function_call_arguments.delta", item_id=self.item["id"],
                            output_index=self._index(), delta=delta)]

    def close(self, status: str = "completed") -> list[dict[str, Any]]:
        """The open item is done (``status``: completed, or incomplete when the reply was cut)."""
        item, self.item = self.item, None
        if item is None:
            return []
        item["status"] = status
        index = len(self.response["output"]) - 1
        if item["type"] == "function_call":
            events = [self._event("response.function_call_arguments.done", item_id=item["id"], output_index=index,
                                  arguments=item["arguments"], name=item["name"])]
        else:
            part = item["content"][0]
            events = [self._event("response.output_text.done", item_id=item["id"], output_index=index,
                                  content_index=0, text=part["text"], logprobs=part["logprobs"]),
                      self._event("response.content_part.done", item_id=item["id"], output_index=index,
                                  content_index=0, part=copy.deepcopy(part))]
        return events + [self._event("response.output_item.done", output_index=index, item=copy.deepcopy(item))]

    def end(self, status: str, usage: dict[str, Any] | None, reason: str | None = None,
            error: dict[str, Any] | None = None, now: float | None = None) -> list[dict[str, Any]]:
        """The response ends with ``status`` (completed, incomplete with ``reason``, failed with ``error``,
        cancelled): the open item closed, then the terminal event."""
        events = self.close("incomplete" if status == "incomplete" else "completed")
        self.response.update(status=status, usage=usage, error=error,
                             incomplete_details={"reason": reason} if reason else None,
                             completed_at=now if status == "completed" else None)
        return events + [self.lifecycle(TERMINAL[status])]


def _logprobs(items: list[TokenLogprob]) -> list[dict[str, Any]]:
    return chat_logprobs(items)["content"]


class ResponseReader:
    """Reads one reply's engine events into ``out``: plain text, or with tools offered (``plan``) each call as soon
    as it is known (webui/chat/tools.py ``ReplyReader``, as the chat completions and Messages streams read them)."""

    def __init__(self, out: ResponseEvents, plan: ToolPlan | None, logprobs: bool,
                 cache_block: int | None) -> None:
        self.out, self.logprobs, self.cache_block = out, logprobs, cache_block
        self.tools = ReplyReader(plan) if plan is not None else None
        self.pending: list[dict[str, Any]] = []  # logprobs of text held back
        self.queue_timed_out = False  # it never got a slot in the engine

    def feed(self, event: GenerationEvent) -> list[dict[str, Any]]:
        if self.logprobs:
            self.pending += _logprobs(event.logprobs)
        if self.tools is None or self.tools.is_text:
            return self._text(event.text)
        events = []
        for piece in self.tools.feed(event.text, event.finish_reason):
            if piece.id is not None:
                events += self.out.call(piece.id, piece.name or "")
            elif piece.call is not None:
                events += self.out.arguments(piece.arguments)
            else:
                events += self._text(piece.text)
        return events

    def _text(self, text: str) -> list[dict[str, Any]]:
        logprobs, self.pending = self.pending, []
        return self.out.text(text, logprobs) if text or logprobs else []

    def finish(self, choice: Choice, now: float) -> list[dict[str, Any]]:
        """The reply ended (``choice`` has its finish reason and usage; its last event was fed): the response
        ended."""
        reason = choice.finish_reason
        if reason == "timeout" and not choice.token_ids:
            self.queue_timed_out = True
            return self.out.end("failed", None, error={
                "code": "server_error", "message": "the request timed out waiting for a free slot in the engine"})
        status = {"length": "incomplete", "timeout": "incomplete", "cancelled": "cancelled"}.get(reason or "",
                                                                                                  "completed")
        return self.out.end(status, response_usage(choice, self.cache_block),
                            "max_output_tokens" if status == "incomplete" else None, now=now)

    def fail(self, message: str) -> list[dict[str, Any]]:
        return self.out.end("failed", None, error={"code": "server_error", "message": message})


def replayed(response: dict[str, Any]) -> list[dict[str, Any]]:
    """The events of a finished (stored) response, as its stream had them: its output items fed again."""
    start = {**copy.deepcopy(response), "status": "in_progress", "output": [], "usage": None,
             "incomplete_details": None, "error": None, "completed_at": None}
    out = ResponseEvents(start)
    events = [out.lifecycle("response.created"), out.lifecycle("response.in_progress")]
    for item in response.get("output") or []:
        if item.get("type") == "message":
            for part in item.get("content") or []:
                events += out.text(part.get("text", ""), part.get("logprobs") or [], id=item["id"])
        elif item.get("type") == "function_call":
            events += out.call(item["call_id"], item["name"], id=item.get("id")) + out.arguments(item["arguments"])
        events += out.close(item.get("status", "completed"))
    status = response.get("status") or "completed"
    if status in ("queued", "in_progress"):
        return events
    return events + out.end(status, response.get("usage"), (response.get("incomplete_details") or {}).get("reason"),
                            response.get("error"), response.get("completed_at"))


class ResponseRun:
    """A reply generating on the engine, read into its response: its events kept for any number of readers
    (``follow``), ``ended`` (given the finished response) awaited before the terminal event is seen, ``cancel``
    stopping it within a step."""

    def __init__(self, out: ResponseEvents, reader: ResponseReader, streams: list[RequestStream],
                 ended: Callable[[dict[str, Any], Choice], Awaitable[None]], clock: Callable[[], float],
                 first: list[dict[str, Any]]) -> None:
        self.out, self.reader, self.streams, self.ended, self.clock = out, reader, streams, ended, clock
        self.events: list[dict[str, Any]] = list(first)
        self.choice = Choice(0)
        self.done = asyncio.Event()
        self._wake = asyncio.Event()
        self.task = asyncio.create_task(self._run())

    def _add(self, events: list[dict[str, Any]]) -> None:
        if events:
            self.events += events
            self._wake.set()
            self._wake = asyncio.Event()

    async def _run(self) -> None:
        try:
            async for _, item in Interleaved(self.streams):
                if isinstance(item, BaseException):
                    await self._end(self.reader.fail(f"generation failed: {item}"))
                    return
                self.choice.add(item)
                events = self.reader.feed(item)
                if item.finish_reason is None:
                    self._add(events)
                else:
                    await self._end(events + self.reader.finish(self.choice, self.clock()))
        except Exception as exc:  # noqa: BLE001 - a reader's failure ends the response as failed, said
            log.exception("the response %s failed", self.out.response.get("id"))
            self.cancel()
            await self._end(self.reader.fail(f"the response could not be read: {type(exc).__name__}"))
        finally:
            self.done.set()
            self._wake.set()

    async def _end(self, events: list[dict[str, Any]]) -> None:
        """The last events: the terminal one seen only once ``ended`` kept the response."""
        self._add(events[:-1])
        await self.ended(self.out.response, self.choice)
        self._add(events[-1:])

    def cancel(self) -> None:
        for stream in self.streams:
            stream.cancel()

    async def follow(self, after: int = -1) -> AsyncIterator[dict[str, Any]]:
        """The events with a sequence number over ``after``, as they come, until the response ends."""
        index = next((i for i, e in enumerate(self.events) if e["sequence_number"] > after), len(self.events))
        while True:
            wake = self._wake
            while index < len(self.events):
                yield self.events[index]
                index += 1
            if self.done.is_set():
                return
            await wake.wait()
