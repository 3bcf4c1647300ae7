"""How the UI turns a controller's UserError into a message, and names a browser tab's running request.

A mistake the user can fix is shown as a warning toast; the handler's outputs
are skipped, so every panel keeps its content (the text just typed included)
and nothing is logged as a server crash.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable

import gradio as gr

from webui.controllers import UserError

Update = dict[str, Any]
"""What ``gr.update(...)`` and ``gr.skip()`` give a handler to return in place of an output's value: a change to
the component's properties, or none."""


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
