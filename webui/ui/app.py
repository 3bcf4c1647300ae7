"""The browser UI: a thin layer over the Engine and ModelManager.

This first page is the playground that proves the engine end to end: type a
prompt, pick a preset or move the sliders, watch the answer stream, stop it.
Per-browser-tab state (the running request) is keyed by Gradio's session hash
inside this Blocks instance, never in module globals.
"""

from __future__ import annotations

import threading
import gradio as gr

from webui.engine import (EngineError, GenerationEvent, GenerationRequest, InvalidParameter, RequestStream)
from webui.names import InvalidName
from webui.presets import PresetError
from webui.services import Services
from webui.ui.params_panel import build_param_components, params_from_values, values_from_params

CSS = """
#status-line {font-family: ui-monospace, monospace; font-size: 0.9em; opacity: 0.85}
#output textarea {font-family: ui-monospace, monospace}
"""


STARTING_PRESET = "Balanced"


class ActiveRequests:
    """The request each browser tab is running, so its Stop button cancels only that one."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._streams: dict[str, RequestStream] = {}

    def start(self, session: str, stream: RequestStream) -> None:
        with self._lock:
            old = self._streams.get(session)
            self._streams[session] = stream
        if old is not None:
            old.cancel()

    def finish(self, session: str, stream: RequestStream) -> None:
        with self._lock:
            if self._streams.get(session) is stream:
                del self._streams[session]

    def cancel(self, session: str) -> bool:
        with self._lock:
            stream = self._streams.get(session)
        if stream is None:
            return False
        stream.cancel()
        return True


def status_text(services: Services) -> str:
    stats = services.engine.stats()
    model = services.models.loaded
    if model is None:
        return "No model loaded"
    state = f"generating ({stats.running} running, {stats.waiting} waiting)" if stats.busy else "idle"
    return f"Model: {model.name} · {model.loader} · {model.device}/{model.dtype} · {state}"


def stats_text(event: GenerationEvent) -> str:
    u, t = event.usage, event.timings
    if u is None or t is None:
        return ""
    ttft = f"{t.first_token:.2f}s" if t.first_token is not None else "-"
    reason = event.finish_reason + (f" ({event.stop_string!r})" if event.stop_string else "")
    return (f"{u.completion_tokens} tokens · prompt {u.prompt_tokens} · first token {ttft} · "
            f"{t.tokens_per_second:.1f} tokens/s · finish: {reason} · seed {event.seed}")


def build_ui(services: Services) -> gr.Blocks:
    active = ActiveRequests()
    start_preset = STARTING_PRESET if STARTING_PRESET in services.presets.names() else None
    start_params = services.presets.get(start_preset).params if start_preset else None
    with gr.Blocks(title="LLM Workbench", analytics_enabled=False) as demo:
        status = gr.Markdown(status_text(services), elem_id="status-line")
        with gr.Row():
            with gr.Column(scale=3):
                prompt = gr.Textbox(label="Prompt", lines=6, elem_id="prompt",
                                    placeholder="Ask something, e.g. What is the capital of France?")
                use_chat = gr.Checkbox(value=True, label="Chat format (the model's chat template)",
                                       elem_id="use-chat")
                with gr.Row():
                    generate_btn = gr.Button("Generate", variant="primary", elem_id="generate")
                    stop_btn = gr.Button("Stop", variant="stop", elem_id="stop")
                output = gr.Textbox(label="Output", lines=12, interactive=False, elem_id="output")
                stats = gr.Markdown("", elem_id="stats")
            with gr.Column(scale=2):
                with gr.Row():
                    preset = gr.Dropdown(choices=services.presets.names(), value=start_preset, label="Preset",
                                         elem_id="preset", allow_custom_value=False)
                    neutral_btn = gr.Button("Reset to neutral", elem_id="neutral", size="sm")
                preset_note = gr.Markdown("", elem_id="preset-note")
                params = build_param_components(start_params)
        param_inputs = list(params.values())

        def generate(data: dict, request: gr.Request):
            prompt_text, chat = data[prompt], data[use_chat]
            try:
                sampling = params_from_values({name: data[c] for name, c in params.items()})
            except InvalidParameter as exc:
                raise gr.Error(str(exc)) from exc
            model = services.models.loaded
            if model is None:
                raise gr.Error("No model is loaded; start with --model NAME (the Model tab comes next).")
            if not prompt_text.strip():
                raise gr.Error("The prompt is empty; type something first.")
            text, special = prompt_text, True
            if chat:
                text = model.tokenizer.apply_chat_template([{"role": "user", "content": prompt_text}])
                special = False
            try:
                stream = services.engine.submit(GenerationRequest(text, sampling, add_special_tokens=special))
            except (EngineError, ValueError) as exc:
                raise gr.Error(str(exc)) from exc
            session = request.session_hash or "anonymous"
            active.start(session, stream)
            out = ""
            try:
                for event in stream:
                    out += event.text
                    if event.finish_reason is not None:
                        yield out, stats_text(event), status_text(services)
                    elif event.text:
                        yield out, "generating…", gr.skip()
            except EngineError as exc:
                raise gr.Error(str(exc)) from exc
            finally:
                stream.cancel()  # no-op when finished; ends the request if the tab went away
                active.finish(session, stream)

        def stop(request: gr.Request) -> None:
            active.cancel(request.session_hash or "anonymous")

        def apply_preset(name: str | None):
            if not name:
                return [gr.skip()] * len(param_inputs) + [""]
            try:
                chosen = services.presets.get(name)
            except (PresetError, InvalidName) as exc:
                raise gr.Error(str(exc)) from exc
            note = f"Ignored keys this workbench does not implement: {', '.join(chosen.ignored)}" \
                if chosen.ignored else ""
            return values_from_params(chosen.params) + [note]

        def neutral():
            from webui.engine import SamplingParams

            return values_from_params(SamplingParams()) + [None]

        generate_inputs = {prompt, use_chat, *param_inputs}
        generate_btn.click(generate, generate_inputs, [output, stats, status], concurrency_limit=None)
        prompt.submit(generate, generate_inputs, [output, stats, status], concurrency_limit=None)
        stop_btn.click(stop, None, None, concurrency_limit=None)
        preset.change(apply_preset, [preset], [*param_inputs, preset_note])
        neutral_btn.click(neutral, None, [*param_inputs, preset])
        gr.Timer(2.0).tick(lambda: status_text(services), None, status)
    return demo
