"""Keeping API requests (#33): each request to a generating endpoint, as sent and as answered, goes to the store
when capture is on (``--capture-requests``), and a chat completion that asks ``store: true`` always does (OpenAI's
stored chat completions, served by webui/api/stored.py).

What is kept: the endpoint, the client (its API key's label, never the key: no header is kept at all), the body as
sent (parsed JSON, or its text when a route would not take it as JSON: not UTF-8, nested too deep, cut short), the
answer (a stream's put together as the unstreamed body; the error body of a refused request), and what the model
saw: the prompt as rendered, the parameters as resolved, model, loader and adapters, the reply's token ids, usage
and timings. A request is written just before its answer's last byte goes out, so an app that reads it back next
finds it. A body is parsed only when its request is kept (a chat completion's only when its bytes could ask
``store: true``). Whatever fails while keeping (a full disk, say) is logged, never raised: the answer always goes
out whole and unchanged.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from starlette.types import ASGIApp, Scope

from webui.api.body import BodyError, parse_json
from webui.api.serving import DONE, new_id
from webui.store.requests import CapturedRequest, RequestStore

log = logging.getLogger("webui.api")

GENERATING = ("/v1/chat/completions", "/v1/completions", "/v1/messages", "/v1/responses")
# the last event of a stream: OpenAI's [DONE], Anthropic's message_stop (webui/api/messages.py)
STREAM_ENDS = (DONE.encode(), b"event: message_stop\n")
REPLAY_OF = "x-workbench-replay-of"  # a replay (webui/api/replay.py): kept whatever capture says, marked as such
REPLAY_ID = "x-workbench-replay-id"  # the id a replay is kept under when its answer has none (an error)


class Capture:
    """Pure ASGI middleware: keeps POSTs to the generating endpoints in ``store`` (see the module's docstring);
    ``store.capture_all`` says whether every request is kept or only those that ask ``store: true``."""

    def __init__(self, app: ASGIApp, store: RequestStore, max_body_bytes: int | None) -> None:
        self.app, self.store, self.limit = app, store, max_body_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] not in GENERATING:
            return await self.app(scope, receive, send)
        started, body, answer = time.time(), bytearray(), bytearray()
        status, streamed, kept = 0, False, False

        async def kept_receive():
            message = await receive()
            if message["type"] == "http.request" and (self.limit is None or len(body) <= self.limit):
                body.extend(message.get("body", b""))
            return message

        async def keep() -> None:
            nonlocal kept
            kept = True
            try:  # (on a thread: parsing a body of megabytes and writing it must not hold up other requests)
                await asyncio.to_thread(self._keep, scope, started, bytes(body), status, bytes(answer))
            except Exception:  # noqa: BLE001 - the answer must still go out whole; what could not be kept is logged
                log.exception("could not keep the API request to %s (status %s) in the store", scope["path"], status)

        async def kept_send(message):
            nonlocal status, streamed
            if message["type"] == "http.response.start":
                status = message["status"]
                streamed = any(k.lower() == b"content-type" and v.startswith(b"text/event-stream")
                               for k, v in message.get("headers", []))
            elif message["type"] == "http.response.body":
                if not streamed and len(answer) < 2**20:
                    answer.extend(message.get("body", b""))
                chunk = message.get("body", b"")
                ends = not message.get("more_body") or (streamed and any(end in chunk for end in STREAM_ENDS))
                if ends and not kept:  # kept before the answer ends: a client that reads it back next finds it
                    await keep()
            await send(message)

        try:
            await self.app(scope, kept_receive, kept_send)
        finally:
            if not kept:  # the answer never ended (the client left): what there was
                await keep()

    def _keep(self, scope: Scope, started: float, body: bytes, status: int, answer: bytes) -> None:
        item = self._item(scope, started, body, status, answer)
        if item is not None:
            self.store.add(item)

    def _item(self, scope: Scope, started: float, body: bytes, status: int, answer: bytes) -> CapturedRequest | None:
        """The request as kept, or None when it is not kept (then its body is not even parsed)."""
        if status == 401:  # no key, or a wrong one: nobody's request, not kept
            return None
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        replay_of = headers.get(REPLAY_OF)
        chat = scope["path"] == GENERATING[0]
        if not (self.store.capture_all or replay_of or (chat and _may_ask_store(body))):
            return None
        sent = _parsed(body)
        asked_store = chat and isinstance(sent, dict) and sent.get("store") is True
        if not (self.store.capture_all or asked_store or replay_of):
            return None
        state: dict[str, Any] = scope.get("state") or {}
        whole = state.get("answer")
        response = whole if whole is not None else _parsed(answer)
        seen = dict(state.get("seen") or {})
        details = {**seen, "token_ids": state.get("token_ids"), "ttft": state.get("ttft"),
                   "duration": round(time.time() - started, 4), "finish": state.get("finish"),
                   **({"replay_of": replay_of} if replay_of else {})}
        given = whole.get("id") if isinstance(whole, dict) else None
        rid = given if isinstance(given, str) else headers.get(REPLAY_ID) or new_id("req")
        metadata = sent.get("metadata") if isinstance(sent, dict) else None
        return CapturedRequest(rid, started, scope["path"], status, state.get("client", ""), sent, response,
                               seen.get("model"), asked_store and status == 200 and whole is not None,
                               metadata if isinstance(metadata, dict) else {}, details)


def _may_ask_store(raw: bytes) -> bool:
    """Whether a body could hold ``"store": true``, read from its bytes: a JSON ``true`` is never escaped, and the
    key's letters only as \\u escapes."""
    return b"true" in raw and (b'"store"' in raw or b"\\u" in raw)


def _parsed(raw: bytes) -> Any:
    """JSON as sent, read as the routes read it (webui/api/body.py); the text when it is not JSON a route takes (not
    UTF-8, nested too deep, cut short: kept as it came, to show what the app really sent)."""
    try:
        return parse_json(raw)
    except BodyError:
        return raw.decode("utf-8", errors="replace")
