"""Sampling controls built from SamplingParams' own metadata, so bounds live in one place.

Number boxes carry no minimum, maximum or precision of their own: Gradio would
refuse or round a value with a message that names no parameter; the controller
checks it against the spec and says which parameter and what range. Controls
sit under their spec's group heading, in two columns; the sampler order and the
steps that run now come first on the right.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, TypedDict

import gradio as gr

from webui.controllers.parameters import (CONSTRAINT_FORMS, CONSTRAINT_HINTS, constraint_fields, constraint_json,
                                          field_text, pipeline_text, same_constraint, slider_range,
                                          values_from_params)
from webui.engine.params import ParamSpec, SamplingParams, specs
from webui.ui.feedback import Update, Updates
from webui.ui.save_order import SaveOrder
from webui.ui.typed_slider import TYPED, TypedNumber, TypedSlider

ParamControl = gr.Textbox | gr.Checkbox | TypedNumber | TypedSlider
"""The control a sampling parameter gets (from its spec's widget)."""

COLUMNS = (("Sampling", "Temperature shaping", "Mirostat and adaptive-p", "Guidance (CFG)", "Constrain output"),
           ("Sampler order", "Repetition", "Length, stops and tokens"))
WRONG = "param-wrong"
"""The class of a control whose message says its value is not used (the page styles it as a warning)."""
CLOSED = ("Temperature shaping", "Mirostat and adaptive-p")  # rarely used: folded until opened
_SHOWINGS = itertools.count(1)


@dataclass
class ParamsPanel:
    controls: dict[str, ParamControl]
    running: gr.Markdown
    """The steps that run now, in order (under the sampler order)."""
    form: gr.Dropdown
    text: gr.Textbox
    """The "Constrain output" form and its text; they write the structured_outputs control (which is hidden)."""
    page_showing: gr.Number
    showing: gr.State
    """Which :meth:`show` the page has applied, and which one this browser tab was sent last: a change the user
    made on a page that had not yet applied the last one (a preset, a reload) is :meth:`outdated`."""

    @property
    def shown(self) -> list[gr.components.Component]:
        """What :meth:`show` fills: every control, then the constraint's form and text (and the showing)."""
        return [*self.controls.values(), self.form, self.text, self.page_showing, self.showing]

    def show(self, params: SamplingParams) -> list:
        """Updates for ``shown``: every control holds ``params``' value, and a message from a wrong value typed
        before is gone."""
        values = values_from_params(params)
        showing = next(_SHOWINGS)
        return [*({**self.message(name, ""), "value": v} for name, v in zip(specs(), values)),
                *_constraint_updates(dict(zip(specs(), values))["structured_outputs"]), showing, showing]

    def outdated(self, data: dict) -> bool:
        """Whether an event's inputs (``data``, holding ``page_showing`` and ``showing``) come from a page that
        had not applied the values last sent to it: the user changed a control while a preset, a chat's
        parameters or a reload were on their way, and those values replace the whole panel once they arrive, so
        the change is not kept (what the page then shows is what is saved and used)."""
        return (data[self.page_showing] or 0) < (data[self.showing] or 0)

    def show_constraint(self, value: str) -> tuple:
        """Updates for (form, text) showing a structured_outputs JSON value."""
        return _constraint_updates(value)

    def message(self, name: str, message: str) -> dict[str, Any]:
        """An update for the control where a message about parameter ``name`` shows: ``message``, styled as a
        warning, or ("") its help line back."""
        classes = [TYPED] if specs()[name].widget in ("slider", "number") else []
        return gr.update(info=message or field_text(name), elem_classes=classes + ([WRONG] if message else []))

    def field(self, name: str) -> gr.components.Component:
        """The control where a message about parameter ``name`` is shown (the constraint's: its text box)."""
        return self.text if name == "structured_outputs" else self.controls[name]


def build_params_panel(initial: SamplingParams | None = None) -> ParamsPanel:
    """One component per SamplingParams field, elem ids "params-<name>", grouped under their headings."""
    initial = initial or SamplingParams()
    values = dict(zip(specs(), values_from_params(initial)))
    groups: dict[str, list[str]] = {}
    for name, spec in specs().items():
        groups.setdefault(spec.group, []).append(name)
    controls: dict[str, ParamControl] = {}
    running = None
    assert {g for column in COLUMNS for g in column} == set(groups), "every group has a place"
    with gr.Row():
        for column in COLUMNS:
            with gr.Column():
                for group in column:
                    with gr.Accordion(group, open=group not in CLOSED, elem_id=f"params-group-{_slug(group)}"):
                        for name in groups[group]:
                            if specs()[name].widget == "constraint":
                                form, text, controls[name] = _constraint_controls(name, values[name])
                            else:
                                controls[name] = _control(name, specs()[name], values[name])
                        if group == "Sampler order":
                            running = gr.Markdown(pipeline_text(initial), elem_id="params-running")
    assert running is not None
    # in the specs' order, as values_from_params lists the values (not the order they are laid out in)
    page_showing = gr.Number(0, elem_id="params-showing", render=False)  # the page renders it
    return ParamsPanel({name: controls[name] for name in specs()}, running, form, text, page_showing, gr.State(0))


def _slug(group: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in group.lower())


class _Labelled(TypedDict):
    """What every parameter control is given: its name, its help line and its elem id."""

    label: str
    info: str
    elem_id: str


def _control(name: str, spec: ParamSpec, value: Any) -> ParamControl:
    common = _Labelled(label=name, info=field_text(name), elem_id=f"params-{name}")
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
        return TypedNumber(value=value, elem_classes=[TYPED], **common)
    low, high, step = slider_range(spec)
    return TypedSlider(minimum=low, maximum=high, step=step, value=value, elem_classes=[TYPED], **common)


def _constraint_controls(name: str, value: str) -> tuple[gr.Dropdown, gr.Textbox, gr.Textbox]:
    """(form, text, the parameter's own JSON box): the user picks a form and types its text; the JSON box
    (hidden) holds the structured_outputs value that the other tabs read and that is remembered."""
    shown_form, shown_text = _constraint_shown(value)
    form = gr.Dropdown(choices=list(CONSTRAINT_FORMS), value=shown_form, label="Constrain output",
                       info="Every generated token must fit it: any JSON object, a JSON schema, a regular expression, "
                            "one of the choices, or a grammar (GBNF as llama.cpp takes it, or Lark). Over the API: "
                            f"{name}.", elem_id="params-constraint-form")
    text = gr.Textbox(lines=4, max_lines=30, label="Constraint", elem_id="params-constraint-text",
                      **shown_text)
    held = gr.Textbox(value=value, visible="hidden", label=name, elem_id=f"params-{name}")

    def from_form(chosen: str, typed: str, current: str) -> Updates:
        new = constraint_json(chosen, typed)
        return {text: _text_update(chosen), **({} if same_constraint(new, current) else {held: new})}

    def from_text(chosen: str, typed: str, current: str) -> str | Update:
        new = constraint_json(chosen, typed)
        return gr.skip() if same_constraint(new, current) else new

    order = SaveOrder()
    order.wire(form.input, lambda d: from_form(d[form], d[text], d[held]), {form, text, held}, [held, text])
    order.wire(text.change, lambda d: from_text(d[form], d[text], d[held]), {form, text, held}, held)  # typed,
    # pasted or deleted
    return form, text, held


class _TextShown(TypedDict, total=False):
    """How the constraint text box shows for a form (a Textbox's arguments, or an update's)."""

    visible: bool
    placeholder: str
    info: str
    elem_classes: list[str]
    value: str


def _text_shown(form_label: str, value: str | None = None) -> _TextShown:
    """The constraint text box for a form: hidden where the form takes no text, with an example."""
    form = CONSTRAINT_FORMS.get(form_label)
    shown = _TextShown(visible=form not in (None, "json_object"),
                       placeholder="" if form is None else CONSTRAINT_HINTS.get(form, ""), info="", elem_classes=[])
    if value is not None:
        shown["value"] = value
    return shown


def _text_update(form_label: str, value: str | None = None) -> dict[str, Any]:
    return gr.update(**_text_shown(form_label, value))


def _constraint_shown(value: str) -> tuple[str, _TextShown]:
    """The form and text box showing a structured_outputs JSON value (a value no form reads shows as none); the
    text is kept where the form takes none, for when the user picks a form that does again."""
    label, text = constraint_fields(value) or ("none", None)
    return label, _text_shown(label, text)


def _constraint_updates(value: str) -> tuple[str, dict[str, Any]]:
    """Updates for (form, text) showing a structured_outputs JSON value."""
    label, shown = _constraint_shown(value)
    return label, gr.update(**shown)
