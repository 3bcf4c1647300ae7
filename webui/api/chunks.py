"""Engine events as the OpenAI stream's chunks: ``ChatChunker`` (chat.completion.chunk) and ``CompletionChunker``
(text_completion), each fed a request's events choice by choice; the routes write what they give as SSE
(webui/api/routes.py ``_streaming``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, Sequence

from webui.api.serving import FINISH_REASONS, Choice, usage
from webui.chat.tools import ReplyReader, ToolPlan
from webui.engine.types import GenerationEvent, TokenLogprob


def _bytes(token: str) -> list[int]:
    return list(token.encode("utf-8"))


def chat_logprobs(items: list[TokenLogprob]) -> dict:
    return {"content": [{"token": lp.token, "logprob": lp.logprob, "bytes": _bytes(lp.token),
                         "top_logprobs": [{"token": t, "logprob": v, "bytes": _bytes(t)} for _, t, v in lp.top]}
                        for lp in items], "refusal": None}


def completion_logprobs(items: list[TokenLogprob], offset: int) -> dict:
    offsets, position = [], offset
    for lp in items:
        offsets.append(position)
        position += len(lp.token)
    return {"tokens": [lp.token for lp in items], "token_logprobs": [lp.logprob for lp in items],
            "top_logprobs": [{t: v for _, t, v in lp.top} for lp in items], "text_offset": offsets}


def envelope(rid: str, obj: str, created: int, model: str, choices: list, **extra: Any) -> dict:
    """The fields every completion body and chunk shares."""
    return {"id": rid, "object": obj, "created": created, "model": model, "system_fingerprint": None,
            "choices": choices, **extra}


@dataclass(frozen=True)
class StreamHead:
    """What every chunk of one stream says: its id, when it was created, the model; ``include_usage``: a usage
    chunk ends the stream (and every other chunk says ``"usage": null``)."""

    id: str
    created: int
    model: str
    include_usage: bool = False

    def chunk(self, obj: str, choice: dict) -> dict:
        return envelope(self.id, obj, self.created, self.model, [choice],
                        **({"usage": None} if self.include_usage else {}))

    def closing(self, obj: str, choices: list[Choice], prompts: int = 1) -> list[dict]:
        """The usage chunk, if asked for, once every choice has finished."""
        return [envelope(self.id, obj, self.created, self.model, [], usage=usage(choices, prompts))] \
            if self.include_usage else []


class Chunker(Protocol):
    """A stream's chunks: the opening ones, each event's, and the closing ones once every choice finished."""

    def opening(self) -> list[dict]: ...

    def feed(self, index: int, event: GenerationEvent) -> list[dict]: ...

    def closing(self, choices: list[Choice]) -> list[dict]: ...


class ChatChunker:
    """A chat request's events as chat.completion.chunk objects, for each of its ``choices``: a role chunk opening
    each choice, then each event's text as a content delta (with its ``logprobs`` when asked), and the
    finish_reason. With tools offered (``plan``) each call is streamed as soon as it is known, as OpenAI streams a
    call: its index, id and name, then pieces of its arguments (webui/chat/tools.py ``ReplyReader``: text that may
    still be a call is held back); a reply that called finishes with "tool_calls"."""

    object = "chat.completion.chunk"

    def __init__(self, head: StreamHead, choices: int, plan: ToolPlan | None = None, logprobs: bool = False) -> None:
        self.head, self.choices, self.logprobs = head, choices, logprobs
        self.readers = {i: ReplyReader(plan) for i in range(choices)} if plan is not None else {}

    def _chunk(self, index: int, delta: dict, finish: str | None = None, logprobs: dict | None = None) -> dict:
        return self.head.chunk(self.object, {"index": index, "delta": delta, "logprobs": logprobs,
                                             "finish_reason": finish})

    def opening(self) -> list[dict]:
        return [self._chunk(i, {"role": "assistant", "content": ""}) for i in range(self.choices)]

    def feed(self, index: int, event: GenerationEvent) -> list[dict]:
        reader = self.readers.get(index)
        if reader is not None and not reader.is_text:
            return self._tool_chunks(index, reader, event)
        out = []
        if event.text or event.logprobs:
            lp = chat_logprobs(event.logprobs) if self.logprobs else None
            out.append(self._chunk(index, {"content": event.text}, logprobs=lp))
        if event.finish_reason is not None:
            out.append(self._chunk(index, {}, FINISH_REASONS[event.finish_reason]))
        return out

    def _tool_chunks(self, index: int, reader: ReplyReader, event: GenerationEvent) -> list[dict]:
        out = []
        for piece in reader.feed(event.text, event.finish_reason):
            if piece.id is not None:
                call = {"index": piece.call, "id": piece.id, "type": "function",
                        "function": {"name": piece.name, "arguments": ""}}
                out.append(self._chunk(index, {"tool_calls": [call]}))
            elif piece.call is not None:
                out.append(self._chunk(index, {"tool_calls": [{"index": piece.call,
                                                               "function": {"arguments": piece.arguments}}]}))
            else:
                out.append(self._chunk(index, {"content": piece.text}))
        if event.finish_reason is not None:
            finish = "tool_calls" if reader.calls and event.finish_reason == "stop" else \
                FINISH_REASONS[event.finish_reason]
            out.append(self._chunk(index, {}, finish))
        return out

    def closing(self, choices: list[Choice]) -> list[dict]:
        return self.head.closing(self.object, choices)


class CompletionChunker:
    """A completions request's events as text_completion chunks: each choice opening with its ``prefixes`` (the
    echoed prompt, with ``prefix_logprobs`` when it was scored; an empty one opens nothing), then each event's text,
    its logprobs (offsets running on from the prefix) when ``logprobs`` is asked, and the finish_reason. ``n``
    choices per prompt: choice i continues prefix i // n."""

    object = "text_completion"

    def __init__(self, head: StreamHead, choices: int, n: int, prefixes: list[str],
                 prefix_logprobs: Sequence[dict | None], logprobs: bool = False) -> None:
        self.head, self.choices, self.n, self.logprobs = head, choices, n, logprobs
        self.prefixes, self.prefix_logprobs = prefixes, prefix_logprobs
        self.offsets = [len(self.prefix(i)) for i in range(choices)]

    def prefix(self, index: int) -> str:
        return self.prefixes[index // self.n]

    def _chunk(self, index: int, text: str, finish: str | None = None, logprobs: dict | None = None) -> dict:
        return self.head.chunk(self.object, {"index": index, "text": text, "logprobs": logprobs,
                                             "finish_reason": finish})

    def opening(self) -> list[dict]:
        return [self._chunk(i, self.prefix(i), logprobs=self.prefix_logprobs[i // self.n])
                for i in range(self.choices) if self.prefix(i)]

    def feed(self, index: int, event: GenerationEvent) -> list[dict]:
        lp = None
        if self.logprobs and event.logprobs:
            lp = completion_logprobs(event.logprobs, self.offsets[index])
        self.offsets[index] += len(event.text)
        finish = FINISH_REASONS[event.finish_reason] if event.finish_reason else None
        if event.text or lp or finish:
            return [self._chunk(index, event.text, finish, lp)]
        return []

    def closing(self, choices: list[Choice]) -> list[dict]:
        return self.head.closing(self.object, choices, len(self.prefixes))
