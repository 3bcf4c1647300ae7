"""Parameters tab: a control per SamplingParams field and presets, wired to ParametersController."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import gradio as gr
from gradio.blocks import Block

from webui.controllers.parameters import ParametersController, pipeline_text, shown_with
from webui.engine.params import SamplingParams, specs
from webui.services import Services
from webui.ui.feedback import Updates, Update, shows_errors
from webui.ui.params_panel import ParamControl, ParamsPanel, build_params_panel
from webui.ui.save_order import SaveOrder


@dataclass
class ParametersTab:
    controls: dict[str, ParamControl]
    preset: gr.Dropdown
    note: gr.Markdown
    running: gr.Markdown
    controller: ParametersController
    panel: ParamsPanel
    delete: gr.Button
    """Offered only for the user's own presets (the preset's line says why a built-in one has none)."""

    @property
    def inputs(self) -> list[gr.components.Component]:
        return list(self.controls.values())

    def params(self, data: dict) -> SamplingParams:
        """SamplingParams from an event's input dict (UserError names the bad parameter and this tab)."""
        return self.controller.current({name: data[c] for name, c in self.controls.items()})


def create_parameters_tab(services: Services) -> ParametersTab:
    controller = ParametersController(services)
    params, preset_name, _ = controller.saved()
    with gr.Row():
        preset = gr.Dropdown(choices=services.presets.names(), value=preset_name, label="Preset", elem_id="preset",
                             info=controller.preset_line(preset_name), scale=3)
        neutral = gr.Button("Reset to neutral", elem_id="params-neutral", scale=1)
    with gr.Row():
        save_name = gr.Textbox(label="Save current parameters as", placeholder="preset name", elem_id="preset-name",
                               scale=3)
        save = gr.Button("Save preset", elem_id="preset-save", scale=1)
        delete = gr.Button("Delete preset", variant="stop", elem_id="preset-delete", scale=1,
                           interactive=_deletable(controller, preset_name))
    note = gr.Markdown("", elem_id="preset-note")
    confirm = gr.State(None)  # the preset whose Delete asks for a confirmation now
    panel = build_params_panel(params)
    tab = ParametersTab(panel.controls, preset, note, panel.running, controller, panel, delete)
    _wire_presets(tab, save_name, save, delete, neutral, confirm)
    _wire_controls(tab)
    return tab


def _wire_presets(tab: ParametersTab, save_name: gr.Textbox, save: gr.Button, delete: gr.Button,
                  neutral: gr.Button, confirm: gr.State) -> None:
    controller, inputs, shown = tab.controller, tab.inputs, tab.panel.shown

    @shows_errors
    def apply_preset(name: str | None) -> tuple | Update:
        if not name or name == controller.settings.get().last_preset:  # opened and closed: nothing new chosen
            return gr.skip()
        chosen = controller.apply(name)
        said = f"Preset '{chosen.name}' applied."
        if chosen.ignored:
            said += f" Not applied: {chosen.ignored_text()}."
        return *tab.panel.show(chosen.params), said, pipeline_text(chosen.params)

    @shows_errors
    def save_preset(data: dict) -> tuple[Update, str, Update]:
        saved = controller.save(data[save_name], tab.params(data))
        return (gr.update(choices=controller.presets.names(), value=saved, info=controller.preset_line(saved)),
                f"Saved preset '{saved}'.", gr.update(interactive=True))  # (also under the name shown: no change)

    @shows_errors
    def delete_preset(name: str | None, armed: str | None) -> Updates:
        """The first click asks about the preset shown; only a click on that same preset's Confirm deletes it."""
        if not name or armed != name:
            if not name:
                controller.delete(name)  # says what to do
            return {tab.note: f"Click **Confirm delete** to delete preset '{name}' for good.", confirm: name,
                    delete: gr.update(value="Confirm delete")}
        controller.delete(name)
        return {tab.preset: gr.update(choices=controller.presets.names(), value=None),
                tab.note: f"Deleted preset '{name}'.", confirm: None, delete: gr.update(value="Delete preset")}

    def preset_shown(name: str | None) -> tuple[Update, Update, None]:
        """Another preset shows (chosen, saved, deleted, or none: custom values): its line says what it is,
        Delete is offered for the user's own, and asks again."""
        return (gr.update(info=controller.preset_line(name)),
                gr.update(value="Delete preset", interactive=_deletable(controller, name)), None)

    # a preset fills every field: a spinner on each is noise (and costs the page; feedback.confine_progress)
    tab.preset.input(apply_preset, [tab.preset], [*shown, tab.note, tab.running], show_progress="hidden")
    tab.preset.change(preset_shown, [tab.preset], [tab.preset, delete, confirm], show_progress="hidden")

    def reset():
        params = controller.neutral()
        return (*tab.panel.show(params), gr.update(value=None, info=controller.preset_line(None)),
                "Neutral: every sampler off.", pipeline_text(params))

    neutral.click(reset, None, [*shown, tab.preset, tab.note, tab.running], show_progress="hidden")
    save.click(save_preset, {save_name, *inputs}, [tab.preset, tab.note, delete])
    delete.click(delete_preset, [tab.preset, confirm], [tab.preset, tab.note, confirm, delete])


def _deletable(controller: ParametersController, name: str | None) -> bool:
    return name is not None and bool(name) and controller.presets.is_own(name)


def _wire_controls(tab: ParametersTab) -> None:
    """Every change (typed, dragged, pasted, deleted) is checked and kept; a wrong value stays as typed, is not
    used, and is named beside its control with what is used instead (see ``resolve``)."""
    controller, panel = tab.controller, tab.panel

    def remember(name: str, data: dict) -> Updates | Update:
        if panel.outdated(data):  # made before the page showed a preset (say) that replaces it
            return gr.skip()
        edited = controller.edit({key: data[c] for key, c in tab.controls.items()}, name)
        fields = {panel.field(n): panel.message(n, edited.messages.get(n, "")) for n in shown_with(name)}
        if not edited.changed:  # nothing new used (a wrong value, or a value typed back)
            return fields or gr.skip()  # (an empty dict is no update to Gradio)
        preset = controller.settings.get().last_preset  # None: custom values (the preset's line says so)
        return {tab.preset: gr.update(value=preset, info=controller.preset_line(preset)), tab.note: "",
                tab.running: pipeline_text(edited.params), **fields}

    order = SaveOrder()  # one order for all controls: each change saves them all
    inputs: set[Block] = {*tab.inputs, panel.page_showing, panel.showing}  # the showing: see ParamsPanel.outdated
    for name, control in tab.controls.items():
        # Text boxes: every change (a paste or a deletion is not always an input event). The others: what the
        # user does (a preset or a reload setting all of them must not queue a check per control).
        event = control.change if specs()[name].widget in ("lines", "text", "json", "constraint") else control.input
        order.wire(event, functools.partial(remember, name), inputs,
                   [tab.preset, tab.note, tab.running, *(panel.field(n) for n in shown_with(name))])


def on_load(tab: ParametersTab) -> tuple[list, object]:
    """(outputs, function): a page (re)load shows the parameters last used, and says if they could not be."""
    def load():
        c = tab.controller
        params, preset_name, note = c.saved()
        return (*tab.panel.show(params), gr.update(choices=c.presets.names(), value=preset_name,
                                                   info=c.preset_line(preset_name)),
                note, pipeline_text(params), gr.update(interactive=_deletable(c, preset_name)))
    return [*tab.panel.shown, tab.preset, tab.note, tab.running, tab.delete], load
