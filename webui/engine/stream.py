"""RequestStream: what a caller holds after submitting; events, sync or async."""

from __future__ import annotations

import asyncio
import queue
import threading
from typing import AsyncIterator, Iterator

from webui.engine.types import (CancelToken, GenerationError, GenerationEvent, GenerationResult, Timings,
                                TokenLogprob, Usage)

_END = object()


class RequestStream:
    """Events of one request, in order. Iterating raises GenerationError on failure.

    ``for event in stream`` consumes synchronously, ``async for event in stream``
    from an event loop. ``cancel()`` ends the request within one engine step.
    """

    def __init__(self, request_id: str, cancel_token: CancelToken, wake_engine) -> None:
        self.request_id = request_id
        self._cancel_token = cancel_token
        self._wake_engine = wake_engine
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._async_queue: asyncio.Queue | None = None

    # -- engine side ---------------------------------------------------------
    def put(self, event: GenerationEvent, exc: BaseException | None = None) -> None:
        item = (event, exc)
        with self._lock:
            if self._loop is not None:
                self._loop.call_soon_threadsafe(self._async_queue.put_nowait, item)
            else:
                self._queue.put(item)

    # -- caller side ---------------------------------------------------------
    def cancel(self) -> None:
        self._cancel_token.cancel()
        self._wake_engine()

    @property
    def cancelled(self) -> bool:
        return self._cancel_token.cancelled

    def __iter__(self) -> Iterator[GenerationEvent]:
        while True:
            event, exc = self._queue.get()
            yield self._checked(event, exc)
            if event.finish_reason is not None:
                return

    async def __aiter__(self) -> AsyncIterator[GenerationEvent]:
        with self._lock:
            if self._loop is None:
                self._loop = asyncio.get_running_loop()
                self._async_queue = asyncio.Queue()
                while not self._queue.empty():
                    self._async_queue.put_nowait(self._queue.get())
        try:
            while True:
                event, exc = await self._async_queue.get()
                yield self._checked(event, exc)
                if event.finish_reason is not None:
                    return
        except asyncio.CancelledError:  # the client went away: stop generating for it
            self.cancel()
            raise

    @staticmethod
    def _checked(event: GenerationEvent, exc: BaseException | None) -> GenerationEvent:
        if event.finish_reason == "error":
            raise GenerationError(event.error or "generation failed") from exc
        return event

    def result(self) -> GenerationResult:
        """Consume the whole stream and return the collected result."""
        return collect(self)


def collect(events) -> GenerationResult:
    text: list[str] = []
    ids: list[int] = []
    logprobs: list[TokenLogprob] = []
    last: GenerationEvent | None = None
    for last in events:
        text.append(last.text)
        ids.extend(last.token_ids)
        logprobs.extend(last.logprobs)
    assert last is not None and last.finish_reason is not None
    return GenerationResult(last.request_id, "".join(text), ids, last.finish_reason,
                            last.usage or Usage(), last.timings or Timings(), last.seed or 0,
                            last.stop_string, logprobs)


def interleave(streams: list[RequestStream]) -> Iterator[tuple[int, GenerationEvent | Exception]]:
    """Events of several streams as they come, tagged with the stream's index (sync callers, e.g. an A/B view).

    A failed request yields its GenerationError in place of events; leaving early cancels every stream.
    """
    merged: queue.SimpleQueue = queue.SimpleQueue()

    def pump(index: int, stream: RequestStream) -> None:
        try:
            for event in stream:
                merged.put((index, event))
        except Exception as exc:
            merged.put((index, exc))

    threads = [threading.Thread(target=pump, args=(i, s), daemon=True) for i, s in enumerate(streams)]
    for t in threads:
        t.start()
    remaining = len(streams)
    try:
        while remaining:
            index, item = merged.get()
            if isinstance(item, Exception) or item.finish_reason is not None:
                remaining -= 1
            yield index, item
    finally:
        for s in streams:
            s.cancel()
