"""Requests on a text-only backend (a remote server): its stream relayed as our events.

The backend samples; we still apply our stop-string matcher (so a stop never
leaks even from a server that lets one through), the request's time limit and
its cancellation, and report usage and timings like any other request.
"""

from __future__ import annotations

from webui.engine.sequence import Sequence
from webui.engine.stopping import StopStringMatcher
from webui.engine.types import GenerationEvent, TokenLogprob, Usage, now

REMOTE_FINISH = {"stop": "stop", "length": "length"}


def relay(seq: Sequence, model) -> None:
    """Run ``seq`` on ``model.stream`` and put its events; every outcome ends the stream (runs on its own thread)."""
    request = seq.request
    seq.stops = StopStringMatcher(request.params.stop)
    seq.admitted = now()
    timed_out = False

    def stop_reading() -> bool:
        nonlocal timed_out
        timed_out = timed_out or seq.time_expired(now())
        return request.cancel.cancelled or timed_out

    finish, usage = None, None
    try:
        for chunk in model.stream(request.prompt, request.messages, request.params.api_body(), request.logprobs,
                                  stop_reading):
            usage = chunk.usage or usage
            if chunk.text and seq.first_token is None:
                seq.first_token = now()
            text, stopped = seq.stops.feed(chunk.text) if chunk.text else ("", False)
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
    tail = "" if seq.stops.matched or seq.stops.stopped else seq.stops.flush()
    seq.stream.put(seq.finish(finish or "stop", text=tail, usage=_usage(usage)))


def _usage(reported: dict | None) -> Usage:
    u = reported or {}
    return Usage(int(u.get("prompt_tokens") or 0), int(u.get("completion_tokens") or 0))
