"""The stream side of the engine's sequences, on a thread of its own: detokenizing, stop strings and events.

The engine thread only runs the model and samples. After each step it hands what happened to its sequences (the
token each drew, or how one ended) to the :class:`OutputWorker` in one message; the worker's thread turns each
token into text (``Sequence.emit``: the incremental detokenizer, then the stop-string matcher), builds the event
and puts it on the request's stream, in order. Torch leaves the GIL while the model computes, so this work runs
beside the next forward instead of before it.

A stop string found here ends the request at once for its caller (the final event carries the text before the
stop and the usage up to that token) and marks the sequence ``stream_ended``: the engine drops it at its next
step. Tokens the engine drew meanwhile are never emitted.
"""

from __future__ import annotations

import logging
import queue
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from webui.engine.types import FinishReason

if TYPE_CHECKING:
    from webui.engine.sampling import TokenChoice

log = logging.getLogger(__name__)


class Emits(Protocol):
    """A sequence as the output thread sees it (sequence.Sequence)."""

    def emit(self, out: "Output") -> None: ...

    def fail_stream(self, exc: BaseException) -> None: ...


@dataclass(frozen=True, slots=True)
class Output:
    """One thing that happened to a sequence on the engine thread: it drew ``choice`` (and ended with it when
    ``finish`` is set), or it ended (``choice`` None) for ``finish``, with ``error``/``exc`` on a failure."""

    seq: Emits
    choice: TokenChoice | None
    finish: FinishReason | None
    guide_fed: int  # tokens its CFG guide had cost by then (the final event's usage)
    error: str | None = None
    exc: BaseException | None = None


class OutputWorker:
    """The thread that turns the engine's outputs into stream events (one per engine)."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[list[Output] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name="engine-output", daemon=True)
        self._thread.start()

    def put(self, outputs: list[Output]) -> None:
        """(Engine thread.) A step's outputs, handled in order after every earlier step's."""
        if outputs:
            self._queue.put(outputs)

    def close(self) -> None:
        """Handle what was put, then end the thread."""
        self._queue.put(None)
        self._thread.join(timeout=30)

    def _loop(self) -> None:
        while (outputs := self._queue.get()) is not None:
            for out in outputs:
                try:
                    out.seq.emit(out)
                except Exception as exc:  # the request fails; the engine drops its sequence at the next step
                    log.exception("building a stream event failed")
                    out.seq.fail_stream(exc)
