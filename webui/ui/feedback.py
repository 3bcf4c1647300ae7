"""How the UI turns a controller's UserError into a message, names a browser tab's running request, and opens a tab.

A mistake the user can fix is shown as a warning toast; the handler's outputs
are skipped, so every panel keeps its content (the text just typed included)
and nothing is logged as a server crash.
"""

from __future__ import annotations

import functools
import inspect
import time
from typing import Any, Callable

import gradio as gr

from webui.controllers import UserError

Update = dict[str, Any]
"""What ``gr.update(...)`` and ``gr.skip()`` give a handler to return in place of an output's value: a change to
the component's properties, or none."""
Updates = dict[Any, Any]
"""An event's updates keyed by component (gr.Block -> value or gr.update); components left out are not
updated. Keyed by Any: a dict is invariant, and handlers build theirs from narrower component types."""


def session_key(request: gr.Request | None, panel: str) -> tuple[str, str]:
    """The running request's key: the browser tab (Gradio's session hash) and the panel."""
    return ((request.session_hash if request is not None else None) or "anonymous", panel)


def shows_errors(fn: Callable) -> Callable:
    """Wrap an event handler (plain or generator) so UserError becomes a message and no output changes."""
    if inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def stream(*args, **kwargs):
            try:
                yield from fn(*args, **kwargs)
            except UserError as exc:
                gr.Warning(str(exc))
                yield gr.skip()
        return stream

    @functools.wraps(fn)
    def call(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except UserError as exc:
            gr.Warning(str(exc))
            return gr.skip()
    return call


OPEN_TAB_JS = """(value) => {
    const id = (value || "").split(" ")[0];
    const button = id && document.querySelector(`#tabs [role=tab][data-tab-id="${id}"]`);
    if (button) button.click();
}"""
"""Page script for the page's tab opener: opens the tab its value names."""


def create_tab_opener() -> gr.Textbox:
    """A hidden box whose new value ("<tab id> <nonce>", see ``opens``) opens that tab of the page.

    A handler that opens a tab (Send to Notebook, say) fills this box, not the page's Tabs: every component an event
    ever filled gets the page's loading status with every later Gradio message, and for the Tabs that means a deep
    copy of every component in the page each time (#46)."""
    opener = gr.Textbox("", visible="hidden", elem_id="open-tab", container=False)
    opener.change(None, [opener], None, js=OPEN_TAB_JS)
    return opener


def opens(tab_id: str) -> str:
    """The opener's value that opens tab ``tab_id`` (a new value each time, so the same tab opens again)."""
    return f"{tab_id} {time.monotonic_ns()}"


def confine_progress(demo: gr.Blocks) -> None:
    """Each event of ``demo`` (call it last in its ``with``) whose progress is hidden reports its progress to one
    hidden element rather than to its outputs.

    The page keeps a loading status for every component that was ever an event's progress target (its outputs,
    unless ``show_progress_on`` names others), and with each message of any event it updates every one of them, each
    found by a walk of the component tree (see webui.ui.live). The page load alone filled 177, so a click that
    changed a preset cost the page ~5 s of work on one core. An event that shows no progress needs no targets:
    pointed at one hidden element, the statuses stay few and a click costs about a third of that (#46). An event
    that shows progress (a model's load bar) keeps its outputs."""
    sink = gr.HTML("", visible="hidden", elem_id="progress-sink", container=False)
    for fn in demo.fns.values():
        if fn.fn is not None and fn.show_progress == "hidden" and fn.show_progress_on is None:
            fn.show_progress_on = [sink]
