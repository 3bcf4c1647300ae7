"""RequestStream: what a caller holds after submitting; events, sync or async."""

from __future__ import annotations

import asyncio
import queue
import threading
from typing import AsyncIterator, Callable, Iterable, Iterator

from webui.engine.types import (CancelToken, GenerationError, GenerationEvent, GenerationResult, Timings,
                                TokenLogprob, Usage)

_END = object()


class _Inbox:
    """Items put by the engine thread, taken by one consumer: blocking, or awaited once it first awaits."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._async_queue: asyncio.Queue | None = None

    def put(self, item: object) -> None:
        with self._lock:
            if self._loop is not None and self._async_queue is not None:  # set together, once
                self._loop.call_soon_threadsafe(self._async_queue.put_nowait, item)
            else:
                self._queue.put(item)

    def get(self):
        return self._queue.get()

    def take_all(self) -> list:
        """What is waiting, for a consumer that has not started (see RequestStream._merge_into)."""
        items = []
        while not self._queue.empty():
            items.append(self._queue.get())
        return items

    async def aget(self):
        with self._lock:
            if self._loop is None:  # from now on items go to this event loop
                self._loop, self._async_queue = asyncio.get_running_loop(), asyncio.Queue()
                while not self._queue.empty():
                    self._async_queue.put_nowait(self._queue.get())
            queue = self._async_queue
        assert queue is not None  # set above, once
        return await queue.get()


class RequestStream:
    """Events of one request, in order. Iterating raises GenerationError on failure.

    ``for event in stream`` consumes synchronously, ``async for event in stream``
    from an event loop. ``cancel()`` ends the request within one engine step.
    """

    def __init__(self, request_id: str, cancel_token: CancelToken, wake_engine: Callable[[], None]) -> None:
        self.request_id = request_id
        self._cancel_token = cancel_token
        self._wake_engine = wake_engine
        self._inbox = _Inbox()
        self._lock = threading.Lock()
        self._merged: tuple[_Inbox, int] | None = None
        self.prompt_tokens: int | None = None  # the prompt's tokens as the engine read it (None: a remote server's)

    # -- engine side ---------------------------------------------------------
    def put(self, event: GenerationEvent, exc: BaseException | None = None) -> None:
        with self._lock:
            if self._merged is not None:
                inbox, index = self._merged
                inbox.put((index, (event, exc)))
            else:
                self._inbox.put((event, exc))

    def _merge_into(self, inbox: _Inbox, index: int) -> None:
        """From now on (and for what came before), this stream's events go to ``inbox``, tagged ``index``: for a
        stream nobody has started to consume."""
        with self._lock:
            for item in self._inbox.take_all():
                inbox.put((index, item))
            self._merged = (inbox, index)

    # -- caller side ---------------------------------------------------------
    def cancel(self) -> None:
        self._cancel_token.cancel()
        self._wake_engine()

    @property
    def cancelled(self) -> bool:
        return self._cancel_token.cancelled

    def __iter__(self) -> Iterator[GenerationEvent]:
        while True:
            event, exc = self._inbox.get()
            yield _checked(event, exc)
            if event.finish_reason is not None:
                return

    async def __aiter__(self) -> AsyncIterator[GenerationEvent]:
        try:
            while True:
                event, exc = await self._inbox.aget()
                yield _checked(event, exc)
                if event.finish_reason is not None:
                    return
        except asyncio.CancelledError:  # the client went away: stop generating for it
            self.cancel()
            raise

    def result(self) -> GenerationResult:
        """Consume the whole stream and return the collected result."""
        return collect(self)


def _checked(event: GenerationEvent, exc: BaseException | None) -> GenerationEvent:
    if event.finish_reason == "error":
        raise GenerationError(event.error or "generation failed") from exc
    return event


def collect(events: Iterable[GenerationEvent]) -> GenerationResult:
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


class Interleaved:
    """Events of several streams as they come, tagged with the stream's index, for sync callers (an A/B view) and
    async ones (the API's n > 1) alike: each stream hands its events to one shared inbox, no thread or task each.

    ``for index, item in Interleaved(streams)`` or ``async for``. A failed request yields its GenerationError in
    place of events; leaving early cancels every stream.
    """

    def __init__(self, streams: list[RequestStream]) -> None:
        self.streams, self._inbox = streams, _Inbox()
        for index, stream in enumerate(streams):
            stream._merge_into(self._inbox, index)

    def _tagged(self, index: int, event: GenerationEvent, exc: BaseException | None
                ) -> tuple[int, GenerationEvent | GenerationError]:
        try:
            return index, _checked(event, exc)
        except GenerationError as error:
            return index, error

    def _cancel_all(self) -> None:
        for stream in self.streams:
            stream.cancel()

    def __iter__(self) -> Iterator[tuple[int, GenerationEvent | GenerationError]]:
        remaining = len(self.streams)
        try:
            while remaining:
                index, item = self._tagged(*_flat(self._inbox.get()))
                remaining -= isinstance(item, GenerationError) or item.finish_reason is not None
                yield index, item
        finally:
            self._cancel_all()

    async def __aiter__(self) -> AsyncIterator[tuple[int, GenerationEvent | GenerationError]]:
        remaining = len(self.streams)
        try:
            while remaining:
                index, item = self._tagged(*_flat(await self._inbox.aget()))
                remaining -= isinstance(item, GenerationError) or item.finish_reason is not None
                yield index, item
        finally:
            self._cancel_all()


def _flat(item: tuple[int, tuple[GenerationEvent, BaseException | None]]
          ) -> tuple[int, GenerationEvent, BaseException | None]:
    index, (event, exc) = item
    return index, event, exc
