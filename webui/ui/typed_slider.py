"""A slider whose box passes what was typed on as it is, for the Parameters tab's own check to name.

Gradio's bounds check would answer 'Value -5 is less than minimum value 0.0.', naming no parameter (and log a
traceback); the controller names the parameter and its range, beside the control. It is a class, not a patched
instance, because Gradio rebuilds a component from its class when an event updates it (its message, say). Gradio
writes a .pyi stub beside any module defining a component (ignored by git; a read-only checkout only skips it).
"""

from __future__ import annotations

import gradio as gr


class TypedSlider(gr.Slider):
    is_template = True  # the page draws it as a Slider

    # Slider says -> float; an emptied box passes None on, for the controller to name (hence the override)
    def preprocess(self, payload: float | None) -> float | None:  # type: ignore[override]
        return payload
