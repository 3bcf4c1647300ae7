"""What the generating tabs share: one running request per browser tab and panel, stats and status text."""

from __future__ import annotations

import threading
import time
from typing import Any, Generator

from loaders.base import PromptImage
from webui.chat.reply import RunStats
from webui.controllers.errors import UserError
from webui.engine import EngineError, GenerationEvent, GenerationRequest, RequestStream, SamplingParams
from webui.engine.types import Timings, Usage
from webui.models import Slot
from webui.services import Services


Key = tuple[str, str]
"""A running request's key: (browser tab, panel), so that Stop cancels only that tab's request there."""


def reply_key(key: Key, chat_id: int | None) -> Key:
    """The running reply's key: one per browser tab and chat, so a reply goes on in its chat while the tab shows
    another one (where another reply can be written meanwhile)."""
    return key[0], f"{key[1]}:{chat_id}"


class ActiveRequests:
    """The request each browser tab (session) runs per panel, so Stop cancels only that one."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._streams: dict[Key, RequestStream] = {}

    def start(self, key: Key, stream: RequestStream) -> None:
        with self._lock:
            old = self._streams.get(key)
            self._streams[key] = stream
        if old is not None:
            old.cancel()

    def finish(self, key: Key, stream: RequestStream) -> None:
        with self._lock:
            if self._streams.get(key) is stream:
                del self._streams[key]

    def cancel_session(self, session: str, prefix: str) -> int:
        """Cancel every request of ``session`` whose panel name starts with ``prefix``; how many."""
        with self._lock:
            streams = [s for (sess, panel), s in self._streams.items() if sess == session and panel.startswith(prefix)]
        for s in streams:
            s.cancel()
        return len(streams)

    def busy(self, key: Key) -> bool:
        """Whether ``key`` has a request that has not finished."""
        with self._lock:
            return key in self._streams

    def cancel(self, key: Key) -> bool:
        with self._lock:
            stream = self._streams.get(key)
        if stream is None:
            return False
        stream.cancel()
        return True


def lora_text(loras: tuple[tuple[str, float], ...]) -> str:
    """Adapters with their weights as the status line and A/B's stats name them ("notes ×1, style ×0.5")."""
    return ", ".join(f"{n} ×{w:g}" for n, w in loras)


def status_text(services: Services) -> str:
    model = services.loaded
    if model is None:
        return "**No model loaded** · load one in the Model tab"
    stats = services.engine.stats()
    state = (f"generating · {stats.running} running, {stats.waiting} waiting · {stats.tokens_per_second:.1f} tok/s"
             if stats.busy else "idle")
    loras = services.active_loras
    adapters = f" · LoRA: {lora_text(loras)}" if loras else ""
    cache = stats.prefix_cache
    size = f" {cache.bytes / 2**20:.0f} MB," if cache and cache.budget_bytes else ""
    cached = f" · prefix cache{size} {cache.hit_rate:.0%} hit" if cache else ""
    others = [n for n in services.models.names() if n != model.name]
    also = f" · also loaded: {', '.join(others)}" if others else ""
    return f"**{model.name}**{adapters} · {model.loader} · {model.device}/{model.dtype} · {state}{cached}{also}"


def prefix_cache_text(services: Services) -> str:
    """The Model tab's line about the prefix cache: its size and hit rate, or why it is not used."""
    model = services.loaded
    if model is None:
        return ""
    stats = services.engine.stats().prefix_cache
    read = f"{stats.hit_tokens:,} of {stats.prompt_tokens:,} prompt tokens read from it" if stats else ""
    if stats is not None and model.capabilities.prefix_cache == "native":
        return (f"**Prefix cache**: prompts already read stay in {model.loader}'s own KV cells · {read} "
                f"({stats.hit_rate:.0%}) since the last clear")
    if stats is not None:
        return (f"**Prefix cache**: {stats.bytes / 2**20:.1f} of {stats.budget_bytes / 2**20:.0f} MB, "
                f"{stats.blocks} blocks of {stats.block_tokens} tokens · {read} ({stats.hit_rate:.0%}) "
                "since the last clear")
    if services.engine.config.prefix_cache_mb == 0:
        return "**Prefix cache**: off (`--prefix-cache-mb 0`); every prompt is prefilled in full."
    if not model.capabilities.stepped:
        return "**Prefix cache**: the remote server keeps its own (if it has one)."
    return (f"**Prefix cache**: not used with this model: the {model.loader} loader cannot reuse its KV in blocks "
            "(e.g. sliding-window layers keep only their last tokens), so every prompt is prefilled in full; "
            "outputs are exact either way.")


def run_stats(event: GenerationEvent, params: dict[str, Any] | None = None) -> RunStats:
    """A finished request's figures (and the parameters it ran with) as a reply's record keeps them."""
    u, t = event.usage or Usage(), event.timings or Timings()
    return RunStats(params or {}, event.finish_reason or "", event.seed, u.completion_tokens, u.prompt_tokens,
                    u.cached_tokens, u.guidance_tokens, t.first_token, t.tokens_per_second, event.stop_string)


def stats_text(event: GenerationEvent) -> str:
    """A finished request's figures as one line ("" before it has them)."""
    return "" if event.usage is None or event.timings is None else run_stats(event).line()


STOP = object()
"""Sent into a ``stream_text`` generator (``.send(STOP)``) by a caller whose page went away mid-reply: the request is
cancelled, and iterating on gives the rest of its events up to the final one, so the caller can store the reply
marked as cut off."""

Streamed = Generator[tuple[str, GenerationEvent], object, None]
"""What ``stream_text`` gives: (text so far, event) pairs, into which a caller may send STOP."""

VIEW_INTERVAL = 0.05
"""The shortest time between two views of a streaming reply (20 a second, as fast as the eye follows): the tokens
between them are shown together, so a page's cost per second stays the same however fast a model writes."""


class Pace:
    """When the next view of a stream is due: at most one per ``interval`` seconds, and always when ``now`` says
    so (the first, the last, a change of what is shown besides the text)."""

    def __init__(self, interval: float = VIEW_INTERVAL) -> None:
        self.interval, self.last = interval, float("-inf")

    def due(self, now: bool = False) -> bool:
        at = time.monotonic()
        if now or at - self.last >= self.interval:
            self.last = at
            return True
        return False


def stream_text(slot: Slot, active: ActiveRequests, key: Key, prompt: str | list[int],
                params: SamplingParams, add_special_tokens: bool, messages: list[dict[str, str]] | None = None,
                logprobs: int | None = None) -> Streamed:
    """Submit to ``slot`` (the model the caller uses, resolved once by the caller) with its attached LoRA adapters
    and yield (text so far, event); the last event has a finish_reason.

    Errors become UserError with the engine's message; leaving the loop early
    (tab closed, Stop) cancels the request.
    """
    yield from stream_request(slot, active, key,
                              new_request(slot, prompt, params, add_special_tokens, messages, logprobs))


def new_request(slot: Slot, prompt: str | list[int], params: SamplingParams, add_special_tokens: bool,
                messages: list[dict[str, str]] | None = None, logprobs: int | None = None,
                images: tuple[PromptImage, ...] = ()) -> GenerationRequest:
    """A request with the adapters attached to ``slot``'s model now: what it runs with, whatever is attached or
    detached meanwhile (so a record made from it holds what ran). UserError for a bad one."""
    try:
        return GenerationRequest(prompt, params, add_special_tokens=add_special_tokens,
                                 loras=slot.active_loras, messages=messages, logprobs=logprobs, images=images)
    except ValueError as exc:
        raise UserError(str(exc)) from exc


def stream_request(slot: Slot, active: ActiveRequests, key: Key,
                   request: GenerationRequest) -> Streamed:
    """``stream_text`` for a request built by the caller (a branch, say), on ``slot``'s engine."""
    try:
        stream = slot.engine.submit(request)
    except (EngineError, ValueError) as exc:
        raise UserError(str(exc)) from exc
    active.start(key, stream)
    text = ""
    try:
        for event in stream:
            text += event.text
            if (yield text, event) is STOP:  # the caller's page went away: end the request as Stop does
                stream.cancel()  # the events up to its final one (finish "cancelled") still come
    except EngineError as exc:
        raise UserError(str(exc)) from exc
    finally:
        stream.cancel()  # no-op when finished
        active.finish(key, stream)
