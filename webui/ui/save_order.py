"""Saving what the user types, keystroke by keystroke, so that the last change made is the one kept.

Gradio's default for ``.input``, "once", drops a keystroke that comes while
the previous one's save runs (48 was saved as 4). "always_last", used here,
sends one change at a time and, when the user typed on meanwhile, the value
the page holds after the save in flight: the last value typed is always the
last one sent, and a control's answers (its message) come back in order. With
several in flight ("multiple") the page could apply an older answer after a
newer one: typing 99999999 showed the message for 999999, and under load a
slider's box typed "abc" was left with the message for "ab". (Sliders once
sent each change at once because their box clamped what was typed when it lost
focus before a deferred change was sent; the typed boxes of
webui/ui/typed_slider.py keep what was typed, so they follow the same rule.)

Each change is still its own HTTP request, and the changes of two controls
(each saving every control's value) can reach a busy server in the other order
than the page made them: typing 0.7 saved the "0." sent before it, while the
page showed 0.7. So the page numbers every change as it makes it,
and a change older than one already handled for the same thing is not saved
(the newer one carries the later value).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Set
from typing import Any

import gradio as gr

from webui.ui.feedback import session_key, shows_errors

_NEXT = "(window.wbEditClock = (window.wbEditClock || 0) + 1)"
_KEPT_SESSIONS = 10_000


class SaveOrder:
    """Wires events that save what the user types; create it inside the Blocks (it adds a hidden number that
    carries each change's place in the order the page made them)."""

    def __init__(self) -> None:
        self.clock = gr.Number(None, visible=False)
        self._newest: dict[tuple[str, str, object], float] = {}
        self._lock = threading.Lock()

    def wire(self, event: Callable, fn: Callable[[dict], Any], inputs: Set, outputs: Any = None,
             key: Callable[[dict], object] = lambda data: None) -> None:
        """``event(...)`` runs ``fn(data)`` for each change, unless a change the page made later to the same
        ``key(data)`` (a chat's system prompt: its chat) was handled first; one save at a time per SaveOrder."""
        inputs = {*inputs, self.clock}
        place = sorted(inputs, key=lambda c: c._id).index(self.clock)  # how Gradio orders a set of inputs
        js = f"(...a) => {{ a = a.slice(0, {len(inputs)}); a[{place}] = {_NEXT}; return a; }}"

        def save(data: dict, request: gr.Request) -> Any:  # fn's outputs, or none (gr.skip())
            with self._lock:
                if self._outrun(request, key(data), data[self.clock]):
                    return gr.skip()
                return fn(data)

        event(shows_errors(save), inputs, outputs, js=js, trigger_mode="always_last",
              show_progress="hidden")

    def _outrun(self, request: gr.Request | None, key: object, clock: float | None) -> bool:
        """Whether a change the page made after this one (``clock``) was already handled for ``key``."""
        if clock is None:  # not sent by the page (the page's script did not run)
            return False
        slot = (*session_key(request, "saves"), key)
        if clock < self._newest.get(slot, 0):
            return True
        self._newest.pop(slot, None)
        self._newest[slot] = clock  # newest last: the oldest sessions are dropped first
        while len(self._newest) > _KEPT_SESSIONS:
            del self._newest[next(iter(self._newest))]
        return False
