"""Sampling controls built from SamplingParams' own metadata, so bounds live in one place.

Number boxes carry no minimum, maximum or precision of their own: Gradio would
refuse or round a value with a message that names no parameter; the controller
checks it against the spec and says which parameter and what range.
"""

from __future__ import annotations

import gradio as gr

from webui.controllers.parameters import values_from_params
from webui.engine.params import SamplingParams, specs


def build_param_components(initial: SamplingParams | None = None) -> dict[str, gr.components.Component]:
    """One component per SamplingParams field, in declaration order, elem ids "params-<name>"."""
    components: dict[str, gr.components.Component] = {}
    values = values_from_params(initial or SamplingParams())
    for (name, spec), default in zip(specs().items(), values):
        common = dict(label=name, info=spec.help, elem_id=f"params-{name}")
        if spec.widget == "lines":
            components[name] = gr.Textbox(value=default, lines=2, placeholder=r"one per line; \n for a newline",
                                          **common)
        elif spec.widget == "json":
            components[name] = gr.Textbox(value=default, lines=1, placeholder='{"token id": bias}, e.g. {"2": -100}',
                                          **common)
        elif spec.widget == "checkbox":
            components[name] = gr.Checkbox(value=default, **common)
        elif spec.widget == "number":
            components[name] = gr.Number(value=default, **{**common, "info": f"{spec.help} {spec.range_text()}"})
        else:
            lo = spec.minimum + spec.step if spec.min_exclusive else spec.minimum
            slider = gr.Slider(minimum=lo, maximum=spec.maximum, step=spec.step, value=default, **common)
            slider.preprocess = _unchecked  # a typed -5 reaches the check that names the parameter
            components[name] = slider
    return components


def _unchecked(payload: float | None) -> float | None:
    """A slider's value as typed: Gradio's own bounds check would answer 'Value -5 is less than minimum value
    0.0.' naming no parameter (and log a traceback); SamplingParams checks it and names the parameter."""
    return payload
