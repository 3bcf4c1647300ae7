"""A/B tab: layout and wiring over ABController (webui.controllers.ab)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Iterator

import gradio as gr
from gradio.blocks import Block

from webui.controllers.ab import ABController, Side
from webui.controllers.generation import ActiveRequests
from webui.services import Services
from webui.ui.feedback import session_key, shows_errors
from webui.ui.live import LiveReplies
from webui.ui.parameters_tab import ParametersTab

PANEL = "ab"


@dataclass
class SideColumn:
    model: gr.Dropdown
    parameters: gr.Dropdown
    adapter: gr.Dropdown
    output: gr.Textbox
    stats: gr.Markdown


@dataclass
class ABTab:
    prompt: gr.Textbox
    chat: gr.Checkbox
    sides: tuple[SideColumn, SideColumn]
    run: gr.Button
    stop: gr.Button
    controller: ABController


def _side_column(name: str, side: Side, choices: tuple[list[str], list[str], list[str]]) -> SideColumn:
    with gr.Column():
        model = gr.Dropdown(choices=choices[2], value=side.model, label=f"{name.upper()}: model",
                            elem_id=f"ab-{name}-model")
        parameters = gr.Dropdown(choices=choices[0], value=side.parameters, label=f"{name.upper()}: parameters",
                                 elem_id=f"ab-{name}-preset",
                                 info="A preset sets the sampling; the length stays the Parameters tab's "
                                      "max_new_tokens unless the preset sets its own (the side's stats say which)")
        adapter = gr.Dropdown(choices=choices[1], value=side.adapter, label=f"{name.upper()}: LoRA adapter",
                              elem_id=f"ab-{name}-lora",
                              info="Runs with this side's request alone (loaded if need be, not attached: Chat and "
                                   "the API run as before)")
        output = gr.Textbox(label=f"Output {name.upper()}", lines=10, interactive=False, elem_id=f"ab-{name}-output")
        stats = gr.Markdown("", elem_id=f"ab-{name}-stats")
    return SideColumn(model, parameters, adapter, output, stats)


def create_ab_tab(services: Services, params: ParametersTab, active: ActiveRequests, live: LiveReplies) -> ABTab:
    controller = ABController(services, active)
    prompt = gr.Textbox(label="Prompt", lines=3, elem_id="ab-prompt", placeholder="Write a haiku about rain.")
    chat = gr.Checkbox(label="Chat format (the model's chat template)", value=True, elem_id="ab-chat")
    choices = controller.choices()
    with gr.Row():
        default_a, default_b = controller.default_sides()
        sides = (_side_column("a", default_a, choices), _side_column("b", default_b, choices))
    with gr.Row():
        run = gr.Button("Run both", variant="primary", elem_id="ab-run")
        stop = gr.Button("Stop", variant="stop", elem_id="ab-stop")
    tab = ABTab(prompt, chat, sides, run, stop, controller)
    _wire(tab, params, live)
    return tab


def _wire(tab: ABTab, params: ParametersTab, live: LiveReplies) -> None:
    c = tab.controller
    a, b = tab.sides
    # the token of the run streaming now: the page follows both sides' texts on a stream of their own (webui.ui.live)
    following = gr.Textbox("", visible="hidden", elem_id="ab-live-token", container=False)
    following.change(None, [following], None, js="(token) => window.workbenchLive && window.workbenchLive(token, 'ab')")

    @shows_errors
    def run(data: dict, request: gr.Request) -> Iterator[tuple[str, str, str, str, str]]:
        """The sides' texts through the event when a side's stats change (it starts, it ends); in between on their
        own stream, so that a token costs the page no Gradio update."""
        sides = (Side(data[a.parameters], data[a.adapter], data[a.model]),
                 Side(data[b.parameters], data[b.adapter], data[b.model]))
        runs = c.run(data[tab.prompt], data[tab.chat], sides, params.params(data), session_key(request, PANEL)[0])
        shown, texts, notes = None, ["", ""], ["", ""]
        for token, (texts, notes) in live.following(runs):
            live.put(token, json.dumps(texts))
            if notes != shown:
                shown = list(notes)
                yield texts[0], notes[0], texts[1], notes[1], token
        yield texts[0], notes[0], texts[1], notes[1], ""

    def stop(request: gr.Request) -> None:
        c.stop(session_key(request, PANEL)[0])

    inputs: set[Block] = {tab.prompt, tab.chat, *[x for s in tab.sides for x in (s.parameters, s.adapter, s.model)], *params.inputs}
    tab.run.click(run, inputs, [a.output, a.stats, b.output, b.stats, following], concurrency_limit=None)
    for side in tab.sides:  # adapters added or presets saved since the page loaded
        side.parameters.focus(lambda: gr.update(choices=c.choices()[0]), None, side.parameters)
        side.adapter.focus(lambda: gr.update(choices=c.choices()[1]), None, side.adapter)
        side.model.focus(lambda: gr.update(choices=c.choices()[2]), None, side.model)
    tab.stop.click(stop, None, None, concurrency_limit=None)


def on_load(tab: ABTab) -> tuple[list, object]:
    """(outputs, function): a page (re)load offers the presets and adapters there are now."""
    def load():
        presets, adapters, models = tab.controller.choices()
        return (*[gr.update(choices=presets) for _ in tab.sides], *[gr.update(choices=adapters) for _ in tab.sides],
                *[gr.update(choices=models) for _ in tab.sides])
    return [*[s.parameters for s in tab.sides], *[s.adapter for s in tab.sides], *[s.model for s in tab.sides]], load
