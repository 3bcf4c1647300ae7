"""A/B tab: one prompt, two settings (presets, the current parameters, with or without an adapter), streamed at once.

Both requests are submitted together, so they share the engine's decode steps.
"""

from __future__ import annotations

import gradio as gr

from webui.chat import ChatPromptError, chat_messages, render_chat_prompt
from webui.engine import EngineError, GenerationError, GenerationRequest
from webui.engine.stream import interleave
from webui.names import InvalidName
from webui.presets import PresetError
from webui.controllers import UserError
from webui.services import Services
from webui.controllers.generation import ActiveRequests, stats_text
from webui.ui.feedback import session_key, shows_errors

PANEL = "ab"
CURRENT = "current parameters"
NO_ADAPTER = "no adapter"


def side_choices(services: Services) -> tuple[list[str], list[str]]:
    model = services.models.loaded
    adapters = list(getattr(model, "loras", {}) or {}) if model is not None else []
    return [CURRENT, *services.presets.names()], [NO_ADAPTER, *adapters]


def create_ab_tab(services: Services, params, active: ActiveRequests) -> dict:
    prompt = gr.Textbox(label="Prompt", lines=3, elem_id="ab-prompt", placeholder="Write a haiku about rain.")
    chat = gr.Checkbox(label="Chat format (the model's chat template)", value=True, elem_id="ab-chat")
    presets, adapters = side_choices(services)
    sides = []
    with gr.Row():
        for name in ("a", "b"):
            with gr.Column():
                preset = gr.Dropdown(choices=presets, value=CURRENT if name == "a" else None,
                                     label=f"{name.upper()}: parameters", elem_id=f"ab-{name}-preset")
                adapter = gr.Dropdown(choices=adapters, value=NO_ADAPTER, label=f"{name.upper()}: LoRA adapter",
                                      elem_id=f"ab-{name}-lora")
                output = gr.Textbox(label=f"Output {name.upper()}", lines=10, interactive=False,
                                    elem_id=f"ab-{name}-output")
                stats = gr.Markdown("", elem_id=f"ab-{name}-stats")
                sides.append((preset, adapter, output, stats))
    with gr.Row():
        run_btn = gr.Button("Run both", variant="primary", elem_id="ab-run")
        stop_btn = gr.Button("Stop", variant="stop", elem_id="ab-stop")

    def request_for(data: dict, preset, adapter, text: str, messages) -> GenerationRequest:
        choice = data[preset]
        if not choice:
            raise UserError("Choose parameters for both sides (a preset or the current parameters).")
        try:
            sampling = params.params(data) if choice == CURRENT else services.presets.get(choice).params
        except (PresetError, InvalidName) as exc:
            raise UserError(str(exc)) from exc
        weight = dict(services.models.active_loras).get(data[adapter], 1.0)  # as attached in the Model tab
        loras = () if data[adapter] in (None, NO_ADAPTER) else ((data[adapter], weight),)
        return GenerationRequest(text, sampling, add_special_tokens=messages is None, loras=loras,
                                 messages=messages)

    def run(data: dict, request: gr.Request):
        model = services.models.loaded
        if model is None:
            raise UserError("No model is loaded; load one in the Model tab.")
        if not data[prompt].strip():
            raise UserError("Type a prompt first.")
        messages = None
        text = data[prompt]
        if data[chat]:
            try:
                messages = chat_messages([{"role": "user", "content": text}])
                text = render_chat_prompt(model.tokenizer, messages)
            except ChatPromptError as exc:
                raise UserError(str(exc)) from exc
        requests = [request_for(data, p, a, text, messages) for p, a, _, _ in sides]
        try:
            streams = [services.engine.submit(r) for r in requests]
        except (EngineError, ValueError) as exc:
            raise UserError(str(exc)) from exc
        key = session_key(request, PANEL)
        texts, notes = ["", ""], ["generating…", "generating…"]
        for s in streams:
            active.start((key[0], f"{PANEL}-{id(s)}"), s)
        try:
            for index, item in interleave(streams):
                if isinstance(item, GenerationError):
                    notes[index] = f"error: {item}"
                else:
                    texts[index] += item.text
                    if item.finish_reason is not None:
                        notes[index] = stats_text(item)
                yield texts[0], notes[0], texts[1], notes[1]
        finally:
            for s in streams:
                active.finish((key[0], f"{PANEL}-{id(s)}"), s)

    def stop(request: gr.Request) -> None:
        active.cancel_session(session_key(request, PANEL)[0], prefix=PANEL)

    outputs = [sides[0][2], sides[0][3], sides[1][2], sides[1][3]]
    inputs = {prompt, chat, *[c for side in sides for c in side[:2]], *params.inputs}
    run_btn.click(shows_errors(run), inputs, outputs, concurrency_limit=None)
    for preset, adapter, _, _ in sides:  # adapters attached or presets saved since the page loaded
        preset.focus(lambda: gr.update(choices=side_choices(services)[0]), None, preset)
        adapter.focus(lambda: gr.update(choices=side_choices(services)[1]), None, adapter)
    stop_btn.click(shows_errors(stop), None, None, concurrency_limit=None)
    return {"presets": [sides[0][0], sides[1][0]], "adapters": [sides[0][1], sides[1][1]]}
