"""The reply a chat (or the Notebook, or the A/B tab's two sides) is writing, shown as it grows on a channel of its
own (#46).

Every message a Gradio event sends to the page while it runs makes the page update the loading status of every
component any event has ever filled (Gradio 6's ``update_loading_stati_state``): a few hundred here, each found by
a walk of the whole component tree and deep-copied. Streamed through a Gradio event, each token cost the page that
(a fifth of a second on this machine), so typing and clicking waited seconds behind a long reply.

So the Chat tab's event sends the page only what changes the log's shape (the message sent, a tool call's blocks,
the finished reply), and the reply's text goes on a plain stream of its own: ``GET /chat-live/{token}``, server-sent
events with the text so far, at most ``VIEW_INTERVAL`` apart, read by a small page script that shows it in a
bubble at the end of the log. The token is made per reply (unguessable, as a capability) and handed to the page in
the event's first update; the stream ends when the reply does, and the event's last update puts the finished
reply in the log and clears the bubble.

The stream is also how the server learns that the page went away: when its reader disconnects and none comes back
within ``GONE_AFTER`` seconds, :meth:`LiveReplies.gone` says so and the tab stops the reply as Stop would (before,
Gradio closed the event at its next update; the event now sends none while the text streams).
"""

from __future__ import annotations

import asyncio
import json
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import AsyncIterator, Awaitable, Callable, Iterator, TypeVar

from fastapi import FastAPI, Request
from fastapi.responses import Response, StreamingResponse

from webui.controllers.generation import VIEW_INTERVAL

V = TypeVar("V")

GONE_AFTER = 0.5
"""Seconds a reply's stream may stay without a reader (after it had one) before its page counts as gone: a reload
closes it at once, and the reloaded page reads the chat only after the reply is stored as Stop stores it."""


@dataclass
class _Reply:
    text: str = ""
    version: int = 0
    done: bool = False
    readers: int = 0
    left_at: float | None = None  # when its last reader disconnected (None: one reads now, or none came yet)
    changed: threading.Event = field(default_factory=threading.Event)


class LiveReplies:
    """The replies being written now, by token."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._replies: dict[str, _Reply] = {}

    def open(self) -> str:
        token = secrets.token_urlsafe(18)
        with self._lock:
            self._replies[token] = _Reply()
        return token

    def put(self, token: str, text: str) -> None:
        with self._lock:
            reply = self._replies.get(token)
            if reply is not None and reply.text != text:
                reply.text, reply.version = text, reply.version + 1

    def close(self, token: str) -> None:
        with self._lock:
            reply = self._replies.pop(token, None)
            if reply is not None:
                reply.done = True

    def gone(self, token: str) -> bool:
        """Whether the page that showed this reply went away (its reader left, and none came back)."""
        with self._lock:
            reply = self._replies.get(token)
            return reply is not None and reply.left_at is not None and time.monotonic() - reply.left_at > GONE_AFTER

    async def follow(self, token: str, disconnected: Callable[[], Awaitable[bool]]) -> AsyncIterator[str]:
        """Server-sent events: ``data: {"text": ...}`` each time the text changes (at most every VIEW_INTERVAL),
        then ``event: done``. ``disconnected``: an awaitable function, true once the reader has gone."""
        with self._lock:
            reply = self._replies.get(token)
            if reply is None:
                return
            reply.readers += 1
            reply.left_at = None
        sent = -1
        try:
            while True:
                with self._lock:
                    version, text, done = reply.version, reply.text, reply.done
                if version != sent:
                    sent = version
                    yield f"data: {json.dumps({'text': text})}\n\n"
                if done:
                    yield "event: done\ndata: {}\n\n"
                    return
                if await disconnected():
                    return
                await asyncio.sleep(VIEW_INTERVAL)
        finally:
            with self._lock:
                reply.readers -= 1
                if not reply.readers and not reply.done:
                    reply.left_at = time.monotonic()

    def following(self, views: Iterator[V]) -> Iterator[tuple[str, V]]:
        """(token, view) for each of ``views``, the token of a stream opened for them and closed when they end;
        when the page that follows it goes away, ``views`` are closed (a reply is stored as Stop stores it) and
        this ends."""
        token = self.open()
        try:
            for view in views:
                if self.gone(token):
                    getattr(views, "close", lambda: None)()
                    return
                yield token, view
        finally:
            self.close(token)

    def mount(self, app: FastAPI) -> None:
        """``GET /chat-live/{token}`` on the FastAPI ``app`` (outside the UI's own routes)."""
        def route(token: str, request: Request) -> Response:
            with self._lock:
                known = token in self._replies
            if not known:  # done already (the log has it), or never made
                return Response(status_code=204)
            return StreamingResponse(self.follow(token, request.is_disconnected), media_type="text/event-stream",
                                     headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})

        app.add_api_route("/chat-live/{token}", route, methods=["GET"], include_in_schema=False)


def announced(views: Iterator[V]) -> Iterator[V | None]:
    """None, then ``views``: through ``LiveReplies.following``, an event hands the page its stream's token before
    the first view is made (the page opens the stream while the model reads the prompt). Closing it closes
    ``views``."""
    yield None
    yield from views


LIVE_JS = """
window.workbenchLive = (() => {
    const sources = {};
    const bubble = () => document.querySelector("#chat-log .chat-live");
    const shows = {  // where each tab shows the text that streams
        chat: (text) => {
            const log = document.querySelector("#chat-log");
            const wrap = log && log.querySelector(".bubble-wrap");
            if (!text) { const b = bubble(); if (b) b.remove(); return; }
            if (!wrap) return;
            const near = log.scrollHeight - log.scrollTop - log.clientHeight < 80;  // following the end: keep at it
            let b = bubble();
            if (!b) {
                b = document.createElement("div");
                b.className = "chat-live message-row bubble bot-row";
                b.innerHTML = '<div class="message bot"><div data-testid="bot-live" class="chat-live-text"></div></div>';
                wrap.appendChild(b);
            }
            b.querySelector(".chat-live-text").textContent = text;
            if (near) log.scrollTop = log.scrollHeight;
        },
        notebook: (text) => {  // the box shows the text as it grows; the event's last update sets it for good
            const box = document.querySelector("#notebook-text textarea");
            if (!box || !text) return;
            const near = box.scrollHeight - box.scrollTop - box.clientHeight < 80;
            box.value = text;
            if (near) box.scrollTop = box.scrollHeight;
        },
        message: (text) => {  // Impersonate: the Chat message box shows the text as it grows (then the event's)
            const box = document.querySelector("#chat-message textarea");
            if (box && text) box.value = text;
        },
        ab: (text) => {  // both sides' texts, as a JSON list
            const texts = JSON.parse(text || "[]");
            ["a", "b"].forEach((side, i) => {
                const box = document.querySelector(`#ab-${side}-output textarea`);
                if (box && texts[i] !== undefined) box.value = texts[i];
            });
        },
    };
    const ends = {chat: () => shows.chat(""), notebook: () => {}, message: () => {}, ab: () => {}};
    return (token, where = "chat") => {
        if (sources[where]) { sources[where].close(); delete sources[where]; }
        ends[where]();
        if (!token) return;
        const source = new EventSource("chat-live/" + encodeURIComponent(token));  // beside the page, wherever it is
        sources[where] = source;
        source.onmessage = (event) => shows[where](JSON.parse(event.data).text);
        source.addEventListener("done", () => { source.close(); if (sources[where] === source) delete sources[where]; });
    };
})();
"""
"""Page script: ``workbenchLive(token, where)`` follows a reply's stream into the place ``where`` (a tab) shows it:
the Chat tab's bubble at the end of the log, the Notebook's box, the Chat message box (Impersonate), the A/B tab's
two outputs. An empty token: the
text is in place now."""

LIVE_CSS = """
#chat-log .chat-live {display: flex; justify-content: flex-start; padding: 0 var(--spacing-xl)}
#chat-log .chat-live .message {padding: var(--spacing-xl) calc(var(--spacing-xl) + var(--spacing-md));
    border: 1px solid var(--border-color-primary); border-radius: var(--radius-xl);
    background: var(--background-fill-secondary); color: var(--body-text-color);
    font-size: var(--chatbot-text-size, var(--text-lg)); line-height: var(--line-md);
    max-width: 90%; width: fit-content; margin: var(--spacing-lg) 0}
#chat-log .chat-live-text {white-space: pre-wrap; overflow-wrap: anywhere}
"""
