"""Requests on a text-only backend (a remote server): its stream relayed as our events.

The backend samples; we still apply our stop-string matcher (so a stop never
leaks even from a server that lets one through), the request's time limit and
its cancellation, and report usage and timings like any other request.

The engine hands such a request to its :class:`RelayRunner` when it is
admitted; from then on the request's relay thread owns its Sequence (the engine
only cancels it, through its request).
"""

from __future__ import annotations

import threading

from loaders.base import TextBackend
from webui.engine.sequence import Sequence
from webui.engine.types import FinishReason, GenerationEvent, TokenLogprob, Usage, now

REMOTE_FINISH: dict[str, FinishReason] = {"stop": "stop", "length": "length"}


class RelayRunner:
    """Runs the requests of text-only backends, each on its own thread, and knows which are running."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: set[Sequence] = set()

    def __len__(self) -> int:
        with self._lock:
            return len(self._running)

    def start(self, seq: Sequence, model: TextBackend) -> None:
        """Relay ``seq`` from ``model`` on a new thread; it ends the request's stream whatever happens."""
        with self._lock:
            self._running.add(seq)
        threading.Thread(target=self._run, args=(seq, model), daemon=True,
                         name=f"relay-{seq.request.request_id}").start()

    def cancel_all(self) -> None:
        """Cancel every relayed request (the model is going): each stream stops reading at its next chunk."""
        with self._lock:
            running = list(self._running)
        for seq in running:
            seq.request.cancel.cancel()

    def _run(self, seq: Sequence, model: TextBackend) -> None:
        try:
            relay(seq, model)
        finally:
            with self._lock:
                self._running.discard(seq)


def relay(seq: Sequence, model: TextBackend) -> None:
    """Run ``seq`` on ``model.stream`` and put its events; every outcome ends the stream (runs on its own thread)."""
    request = seq.request
    stops = seq.start_relayed()
    timed_out = False

    def stop_reading() -> bool:
        nonlocal timed_out
        timed_out = timed_out or seq.time_expired(now())
        return request.cancel.cancelled or timed_out

    finish: FinishReason | None = None
    usage = None
    try:
        for chunk in model.stream(request.prompt, request.messages, request.params.api_body(), request.logprobs,
                                  stop_reading):
            usage = chunk.usage or usage
            if chunk.text:
                seq.mark_first_token()
            text, stopped = stops.feed(chunk.text) if chunk.text else ("", False)
            logprobs = [TokenLogprob(-1, token, value, [(-1, t, v) for t, v in top])
                        for token, value, top in chunk.logprobs]
            if text or logprobs:
                seq.stream.put(GenerationEvent(request.request_id, text=text, logprobs=logprobs, seed=seq.seed))
            if stopped:
                finish = "stop"
                break
            finish = REMOTE_FINISH.get(chunk.finish_reason or "", finish)
    except Exception as exc:  # the caller gets it as a GenerationError
        seq.stream.put(seq.finish("error", error=str(exc), usage=_usage(usage)), exc)
        return
    if request.cancel.cancelled:
        finish = "cancelled"
    elif timed_out:
        finish = "timeout"
    tail = "" if stops.matched or stops.stopped else stops.flush()
    seq.stream.put(seq.finish(finish or "stop", text=tail, usage=_usage(usage)))


def _usage(reported: dict | None) -> Usage:
    u = reported or {}
    return Usage(int(u.get("prompt_tokens") or 0), int(u.get("completion_tokens") or 0))
