"""Parameters tab: a control per SamplingParams field, presets, and persistence across reloads."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import gradio as gr

from webui.engine.params import InvalidParameter, SamplingParams
from webui.names import InvalidName
from webui.presets import PresetError
from webui.services import Services
from webui.ui.params_panel import build_param_components, params_from_values, values_from_params


@dataclass
class ParametersTab:
    controls: dict[str, gr.components.Component]
    preset: gr.Dropdown
    note: gr.Markdown
    reload: Callable[[], list[Any]] | None = None  # fresh values for [*inputs, preset] on page load

    @property
    def inputs(self) -> list[gr.components.Component]:
        return list(self.controls.values())

    def params(self, data: dict) -> SamplingParams:
        """SamplingParams from an event's input dict (raises gr.Error naming the bad value)."""
        try:
            return params_from_values({name: data[c] for name, c in self.controls.items()})
        except InvalidParameter as exc:
            raise gr.Error(str(exc)) from exc


def saved_params(services: Services) -> SamplingParams:
    """The parameters in use when the page was last left (or the last preset's, on a fresh install)."""
    settings = services.settings.get()
    try:
        if settings.params is None:
            return services.presets.get(settings.last_preset).params if settings.last_preset else SamplingParams()
        return SamplingParams.from_dict(settings.params)
    except (InvalidParameter, PresetError, InvalidName):
        return SamplingParams()


def create_parameters_tab(services: Services) -> ParametersTab:
    settings = services.settings.get()
    with gr.Row():
        preset = gr.Dropdown(choices=services.presets.names(), value=settings.last_preset, label="Preset",
                             elem_id="preset", scale=3)
        neutral_btn = gr.Button("Reset to neutral", elem_id="params-neutral", scale=1)
    with gr.Row():
        save_name = gr.Textbox(label="Save current parameters as", placeholder="preset name", elem_id="preset-name",
                               scale=3)
        save_btn = gr.Button("Save preset", elem_id="preset-save", scale=1)
        delete_btn = gr.Button("Delete preset", variant="stop", elem_id="preset-delete", scale=1)
    note = gr.Markdown("", elem_id="preset-note")
    with gr.Row():
        with gr.Column():
            controls = build_param_components(saved_params(services))
    tab = ParametersTab(controls, preset, note)
    inputs = tab.inputs

    def remember(data: dict) -> None:
        try:
            params = params_from_values({name: data[c] for name, c in controls.items()})
        except InvalidParameter:
            return  # the next Generate reports it; keep the last good settings
        services.settings.update(params=params.changed())

    def apply_preset(name: str | None):
        if not name:
            return [gr.skip()] * len(inputs) + [""]
        try:
            chosen = services.presets.get(name)
        except (PresetError, InvalidName) as exc:
            raise gr.Error(str(exc)) from exc
        services.settings.update(last_preset=name, params=chosen.params.changed())
        note_text = (f"Ignored keys this workbench does not implement: {', '.join(chosen.ignored)}"
                     if chosen.ignored else "")
        return values_from_params(chosen.params) + [note_text]

    def neutral():
        services.settings.update(last_preset=None, params={})
        return values_from_params(SamplingParams()) + [None]

    def save(data: dict):
        name, params = data[save_name], tab.params(data)
        try:
            services.presets.save(name, params)
        except (InvalidName, OSError) as exc:
            raise gr.Error(f"Could not save the preset: {exc}") from exc
        services.settings.update(last_preset=name.strip())
        return gr.update(choices=services.presets.names(), value=name.strip()), f"Saved preset '{name.strip()}'."

    def delete(name: str | None):
        if not name:
            raise gr.Error("Choose a preset to delete first.")
        try:
            services.presets.delete(name)
        except (PresetError, InvalidName) as exc:
            raise gr.Error(str(exc)) from exc
        services.settings.update(last_preset=None)
        return gr.update(choices=services.presets.names(), value=None), f"Deleted preset '{name}'."

    def reload_values():
        s = services.settings.get()
        return values_from_params(saved_params(services)) + [gr.update(choices=services.presets.names(),
                                                                         value=s.last_preset)]

    preset.input(apply_preset, [preset], [*inputs, note])
    neutral_btn.click(neutral, None, [*inputs, preset])
    save_btn.click(save, {save_name, *inputs}, [preset, note])
    delete_btn.click(delete, [preset], [preset, note])
    for control in inputs:
        control.input(remember, set(inputs), None, show_progress="hidden")
    tab.reload = reload_values
    return tab
