"""What the page saves and reads outside Gradio's events (#46): drafts saved as typed, and the lines that show the
server's state (the status line, the Model tab's prefix cache line).

A message a Gradio event sends to the page costs the page a pass over the loading status of every component any
event ever filled (see webui.ui.live), so an event per key typed, or a timer's tick each second, made the page lag
even when idle. Instead:

- **Drafts**: a box's text goes to ``POST /drafts/{token}/{box}`` (JSON ``{"seq", "text", "name"}``) from a page
  script: 300 ms after its last change, and at once when the user leaves the box or the page is hidden or goes
  (``pagehide``, by ``navigator.sendBeacon``). The box's change reaches the script by a Gradio listener that runs
  only in the page (no event to the server, so no pass over the statuses), so typed, pasted, deleted, generated,
  sent (cleared) and loaded texts all go the same way. ``seq`` is the page's count of changes: a save that arrives
  after a later one (two requests may cross) is not made.
- **Lines**: ``GET /page-lines/{token}`` gives each line's HTML (``{"status-line": ...}``); the page script reads it
  each second while the page is visible and writes a line that changed into its element.

The token is made per page by the page-load event (unguessable, a capability) and names the user the page was
loaded for: a draft sent with it is saved as that user's, whoever sends it, and an unknown token is refused (404).
"""

from __future__ import annotations

import html
import logging
import re
import secrets
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response

from webui import owner
from webui.documents import MAX_DOCUMENT_CHARS
from webui.safeload import load_json

log = logging.getLogger(__name__)

MAX_DRAFT_BYTES = 4 * MAX_DOCUMENT_CHARS
"""The largest draft body taken (413 above it): room for a million characters (the most text a document gives a
message) of any script, as UTF-8 JSON."""
KEPT_PAGES = 10_000
"""Page tokens kept, the newest: an older page's drafts are refused (404) once this many newer pages loaded."""

Save = Callable[[str, "str | None"], None]


def line_html(text: str) -> str:
    """A line's Markdown (plain text with **bold**) as HTML."""
    return re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", html.escape(text))


def line_value(text: str) -> str:
    """The initial value of a line's gr.HTML: the element the page script writes into."""
    return f'<div class="page-line">{line_html(text)}</div>'


@dataclass
class _Page:
    owner: str
    newest: dict[str, int] = field(default_factory=dict)  # per box: the page's count of the last change saved


class PageChannel:
    """The pages' tokens, the drafts' saves by box, and the lines by element id."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pages: OrderedDict[str, _Page] = OrderedDict()
        self._saves: dict[str, Save] = {}
        self._lines: dict[str, Callable[[], str]] = {}

    def saves(self, box: str, save: Save) -> None:
        """``save(text, name)`` keeps the draft of ``box`` (as the user it runs as)."""
        self._saves[box] = save

    def shows(self, element_id: str, text: Callable[[], str]) -> None:
        """The element ``element_id`` (a gr.HTML made with ``line_value``) shows ``text()``, kept up to date."""
        self._lines[element_id] = text

    def open(self) -> str:
        """A token for a page loaded now, by the user the current event runs for."""
        token = secrets.token_urlsafe(18)
        with self._lock:
            self._pages[token] = _Page(owner.current())
            while len(self._pages) > KEPT_PAGES:
                self._pages.popitem(last=False)
        return token

    def save_draft(self, token: str, box: str, seq: int, text: str, name: str | None) -> None:
        """Save ``box``'s draft as the user of ``token``'s page, unless the page made a later change that was saved
        already. LookupError: an unknown token or box."""
        with self._lock:  # one save at a time: a later change never saved before an earlier one
            page = self._pages.get(token)
            if page is None or box not in self._saves:
                raise LookupError(box)
            if seq < page.newest.get(box, -1):
                return
            page.newest[box] = seq
            with owner.as_owner(page.owner):
                self._saves[box](text, name)

    def lines(self, token: str) -> dict[str, str]:
        """Each line's HTML, as the user of ``token``'s page sees it. LookupError: an unknown token."""
        with self._lock:
            page = self._pages.get(token)
        if page is None:
            raise LookupError(token)
        with owner.as_owner(page.owner):
            return {element_id: line_html(text()) for element_id, text in self._lines.items()}

    def mount(self, app: FastAPI) -> None:
        """``POST /drafts/{token}/{box}`` and ``GET /page-lines/{token}`` on ``app`` (outside the UI's routes)."""
        async def draft(token: str, box: str, request: Request) -> Response:
            with self._lock:
                known = token in self._pages and box in self._saves
            if not known:
                return Response("Unknown page: reload it.", status_code=404)
            declared = request.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > MAX_DRAFT_BYTES:
                return Response(f"A draft is at most {MAX_DRAFT_BYTES} bytes.", status_code=413)
            body = bytearray()
            async for chunk in request.stream():
                body += chunk
                if len(body) > MAX_DRAFT_BYTES:
                    return Response(f"A draft is at most {MAX_DRAFT_BYTES} bytes.", status_code=413)
            try:
                data = load_json(bytes(body))
                seq, text, name = data["seq"], data["text"], data.get("name")
                if not isinstance(seq, int) or not isinstance(text, str) or not isinstance(name, (str, type(None))):
                    raise TypeError("seq: a number, text: a string, name: a string or null")
            except (ValueError, KeyError, TypeError) as exc:
                return Response(f"Not a draft: {exc}", status_code=400)
            try:
                await run_in_threadpool(self.save_draft, token, box, seq, text, name)
            except LookupError:
                return Response("Unknown page: reload it.", status_code=404)
            except Exception:  # noqa: BLE001 - a save that failed is said, the server goes on
                log.exception("saving a draft failed")
                return Response("The draft could not be saved; see the server's log.", status_code=500)
            return Response(status_code=204)

        def lines(token: str) -> Response:
            try:
                return JSONResponse(self.lines(token), headers={"Cache-Control": "no-store"})
            except LookupError:
                return Response("Unknown page: reload it.", status_code=404)

        app.add_api_route("/drafts/{token}/{box}", draft, methods=["POST"], include_in_schema=False)
        app.add_api_route("/page-lines/{token}", lines, methods=["GET"], include_in_schema=False)


PAGE_JS = """
window.workbenchPage = (() => {
    let token = null, clock = 0, reading = null;
    const pending = {}, timers = {}, shown = {};
    const post = (box, closing) => {  // closing: the page is hidden or goes (a beacon outlives it)
        clearTimeout(timers[box]);
        delete timers[box];
        const data = pending[box];
        if (!data || !token) return;
        delete pending[box];
        const where = "drafts/" + encodeURIComponent(token) + "/" + box;  // beside the page, wherever it is
        const body = JSON.stringify(data);
        if (closing && body.length < 60000 && navigator.sendBeacon(where, body)) return;
        fetch(where, {method: "POST", body, keepalive: closing && body.length < 60000}).catch(() => {});
    };
    const flush = (closing) => Object.keys(pending).forEach((box) => post(box, closing));
    const read = async () => {
        if (!token || document.visibilityState !== "visible") return;
        try {
            const got = await (await fetch("page-lines/" + encodeURIComponent(token), {cache: "no-store"})).json();
            for (const [id, html] of Object.entries(got)) {
                const line = document.querySelector(`#${id} .page-line`);
                if (line && (shown[id] !== html || !line.innerHTML)) { line.innerHTML = html; shown[id] = html; }
            }
        } catch (e) {}  // the server is away: the next read tries again
    };
    addEventListener("pagehide", () => flush(true));
    document.addEventListener("visibilitychange", () => document.visibilityState === "hidden" ? flush(true) : read());
    document.addEventListener("focusout", () => flush(false));  // a box left: its draft goes now
    return {
        start: (t) => {
            token = t || null;
            flush(false);
            read();
            if (!reading) reading = setInterval(read, 1000);
        },
        draft: (box, text, name) => {
            pending[box] = {seq: ++clock, text: text == null ? "" : String(text), name: name == null ? null : name};
            clearTimeout(timers[box]);
            timers[box] = setTimeout(() => post(box, false), 300);
        },
        read,
    };
})();
"""
"""Page script: ``workbenchPage.start(token)`` (the page's token, from its load event) starts the lines' reads and
sends drafts made before it; ``workbenchPage.draft(box, text, name)`` is a box's change; ``workbenchPage.read()``
reads the lines now."""


def draft_js(box: str, *names: str) -> str:
    """The js of a page-only listener (``fn=None``) that sends ``box``'s draft; its inputs are ``names``."""
    args = ", ".join(names)
    return f"({args}) => {{ window.workbenchPage && window.workbenchPage.draft({box!r}, {names[-1]}, " \
           f"{names[0] if len(names) > 1 else 'null'}); }}"
