"""Sampling controls built from SamplingParams' own metadata, so bounds live in one place.

Number boxes carry no minimum, maximum or precision of their own: Gradio would
refuse or round a value with a message that names no parameter; the controller
checks it against the spec and says which parameter and what range. Controls
sit under their spec's group heading, in two columns; the sampler order and the
steps that run now come first on the right.
"""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from webui.controllers.parameters import pipeline_text, values_from_params
from webui.engine.params import ParamSpec, SamplingParams, specs

COLUMNS = (("Sampling", "Temperature shaping", "Mirostat and adaptive-p", "Guidance (CFG)"),
           ("Sampler order", "Repetition", "Length, stops and tokens"))
CLOSED = ("Temperature shaping", "Mirostat and adaptive-p")  # rarely used: folded until opened


@dataclass
class ParamsPanel:
    controls: dict[str, gr.components.Component]
    running: gr.Markdown
    """The steps that run now, in order (under the sampler order)."""


def build_params_panel(initial: SamplingParams | None = None) -> ParamsPanel:
    """One component per SamplingParams field, elem ids "params-<name>", grouped under their headings."""
    initial = initial or SamplingParams()
    values = dict(zip(specs(), values_from_params(initial)))
    groups: dict[str, list[str]] = {}
    for name, spec in specs().items():
        groups.setdefault(spec.group, []).append(name)
    controls: dict[str, gr.components.Component] = {}
    running = None
    assert {g for column in COLUMNS for g in column} == set(groups), "every group has a place"
    with gr.Row():
        for column in COLUMNS:
            with gr.Column():
                for group in column:
                    with gr.Accordion(group, open=group not in CLOSED, elem_id=f"params-group-{_slug(group)}"):
                        for name in groups[group]:
                            controls[name] = _control(name, specs()[name], values[name])
                        if group == "Sampler order":
                            running = gr.Markdown(pipeline_text(initial), elem_id="params-running")
    assert running is not None
    # in the specs' order, as values_from_params lists the values (not the order they are laid out in)
    return ParamsPanel({name: controls[name] for name in specs()}, running)


def _slug(group: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in group.lower())


def _control(name: str, spec: ParamSpec, value) -> gr.components.Component:
    common = dict(label=name, info=spec.help, elem_id=f"params-{name}")
    if spec.widget == "lines":
        if name == "sampler_priority":
            return gr.Textbox(value=value, lines=6, max_lines=30, placeholder="one sampler a line", **common)
        return gr.Textbox(value=value, lines=2, placeholder=r"one per line; \n for a newline", **common)
    if spec.widget == "text":
        return gr.Textbox(value=value, lines=1, **common)
    if spec.widget == "json":
        example = '{"token id": bias}, e.g. {"2": -100}' if name == "logit_bias" else '{"regex": "[0-9]+"}'
        return gr.Textbox(value=value, lines=1, placeholder=example, **common)
    if spec.widget == "checkbox":
        return gr.Checkbox(value=value, **common)
    if spec.widget == "number":
        return gr.Number(value=value, **{**common, "info": f"{spec.help} {spec.range_text()}"})
    lo = spec.minimum + spec.step if spec.min_exclusive else spec.minimum
    slider = gr.Slider(minimum=lo, maximum=spec.maximum, step=spec.step, value=value, **common)
    slider.preprocess = _unchecked  # a typed -5 reaches the check that names the parameter
    return slider


def _unchecked(payload: float | None) -> float | None:
    """A slider's value as typed: Gradio's own bounds check would answer 'Value -5 is less than minimum value
    0.0.' naming no parameter (and log a traceback); SamplingParams checks it and names the parameter."""
    return payload
