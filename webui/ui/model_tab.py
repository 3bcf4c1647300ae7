"""Model tab: choose a model and loader, load / unload / reload, see what is loaded."""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from loaders.base import DTYPES, LoaderError, LoadOptions, available_devices
from webui.names import InvalidName
from webui.controllers import UserError
from webui.services import Services
from webui.ui.feedback import shows_errors
from webui.ui.backends_panel import create_backends_panel
from webui.controllers.generation import prefix_cache_text

AUTO_LOADER = "auto"
REMOTE_SAMPLERS = ("the server's: temperature, top_p, stop, seed, penalties, logit_bias, max tokens; top_k, min_p, "
                   "typical_p, repetition_penalty, min_tokens, no_repeat_ngram_size, ignore_eos sent as vLLM-style "
                   "extras only when set (a server that lacks one answers with a clear error)")
PREFIX_CACHE = {"blocks": "yes (the engine's blocks)", "native": "yes (in the backend's own cache)", "": "no"}


@dataclass
class ModelTab:
    model: gr.Dropdown
    info: gr.Markdown
    template: gr.Code
    lora_pick: gr.Dropdown
    lora_active: gr.Markdown


def loader_choices(services: Services) -> list[tuple[str, str]]:
    """(label, value) pairs; a loader whose backend is missing says why and how to install it."""
    choices = [("auto (from what the model holds; the default model: transformers)", AUTO_LOADER)]
    for s in services.registry.status():
        label = s.name if s.available else f"{s.name} — unavailable: {s.reason}; install: {s.install_hint}"
        choices.append((label, s.name))
    return choices


def model_info(services: Services) -> tuple[str, str]:
    model = services.models.loaded
    if model is None:
        return "No model loaded.", ""
    caps = model.capabilities
    if caps.text_only:
        return (f"**{model.name}** on the remote server `{model.base_url}` · it samples and batches itself; "
                f"context length: {model.context_length or 'not reported'}  \nChats are sent as messages and the "
                "server applies its own chat template.", "(the remote server's own)")
    info = (f"**{model.name}** · loader `{model.loader}` · {model.device} / {model.dtype}  \n"
            f"context length: {model.context_length} tokens · weights: {model.memory_bytes() / 2**20:,.0f} MiB · "
            f"batched forward: {'yes' if caps.batched_forward else 'no'} · LoRA: {'yes' if caps.lora else 'no'} · "
            f"prefix cache: {PREFIX_CACHE[caps.prefix_cache]}  \n"
            f"path: `{model.path}`")
    return info, model.tokenizer.chat_template or "(this model has no chat template)"


def capability_table(services: Services) -> str:
    """Markdown: what each registered loader can do, and why one is unavailable."""
    rows = ["| loader | available | formats | devices | batched | LoRA | logprobs | prefix cache | samplers |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for s in services.registry.status():
        c = s.capabilities
        available = "yes" if s.available else f"no: {s.reason}"
        samplers = REMOTE_SAMPLERS if c.text_only else "all (our pipeline on its logits)"
        rows.append(f"| {s.name} | {available} | {', '.join(c.formats) or '-'} | {', '.join(c.devices)} | "
                    f"{'yes' if c.batched_forward else 'no'} | {'yes' if c.lora else 'no'} | "
                    f"{'yes' if c.logprobs else 'no'} | {PREFIX_CACHE[c.prefix_cache]} | "
                    f"{samplers} |")
    return "\n".join(rows) + ("\n\nPrefix cache: prompts already read are not prefilled again (chat turns, "
                              "regenerate, n > 1, batch grids). Models with sliding-window layers (e.g. Gemma 2/3, "
                              "Mistral with a sliding window) keep only their last tokens, so they are always "
                              "prefilled in full.")


def lora_choices(services: Services) -> list[str]:
    """Adapters in the loras dir that fit the loaded model."""
    return [e.name for e in services.models.compatible_loras()]


def active_text(services: Services) -> str:
    loras = services.models.active_loras
    if services.models.loaded is not None and not services.models.loaded.capabilities.lora:
        return f"The {services.models.loaded.loader} loader cannot apply LoRA adapters."
    if not loras:
        return f"No adapter attached. Put adapters (peft folders) in `{services.config.loras_dir}`."
    return "Attached: " + ", ".join(f"**{n}** ×{w:g}" for n, w in loras)


def create_model_tab(services: Services) -> ModelTab:
    settings = services.settings.get()
    loaded = services.models.loaded
    names = [e.name for e in services.models.available()]
    opts = settings.load_options
    with gr.Row():
        model = gr.Dropdown(choices=names, value=loaded.name if loaded else settings.last_model,
                            label="Model", elem_id="model-name", scale=4, allow_custom_value=False)
        refresh = gr.Button("Refresh list", elem_id="model-refresh", scale=1)
    loader = gr.Dropdown(choices=loader_choices(services), value=settings.last_loader or AUTO_LOADER,
                         label="Loader", elem_id="model-loader")
    with gr.Row():
        devices = available_devices()  # only what this machine has (a saved "cuda" from elsewhere falls back)
        saved = opts.get("device", services.config.device)
        device = gr.Dropdown(choices=list(devices), value=saved if saved in devices else "auto", label="Device",
                             elem_id="model-device")
        dtype = gr.Dropdown(choices=list(DTYPES), value=opts.get("dtype", services.config.dtype), label="dtype",
                            elem_id="model-dtype")
        threads = gr.Number(value=opts.get("threads") or services.config.threads or 0, precision=0, minimum=0,
                            label="CPU threads (0 = torch's default)", elem_id="model-threads")
    with gr.Row():
        load_btn = gr.Button("Load", variant="primary", elem_id="model-load")
        unload_btn = gr.Button("Unload", elem_id="model-unload")
        reload_btn = gr.Button("Reload", elem_id="model-reload")
    with gr.Accordion("Remote server (any OpenAI-compatible API: vLLM, llama.cpp server, TGI, another workbench)",
                      open=False):
        with gr.Row():
            remote_url = gr.Textbox(label="Base URL", placeholder="http://gpu-box:8000/v1", elem_id="remote-url",
                                    scale=3)
            remote_key = gr.Textbox(label="API key (kept in memory only)", type="password", elem_id="remote-key",
                                    scale=2)
            remote_model = gr.Textbox(label="Model (empty: the server's first)", elem_id="remote-model", scale=2)
        connect_btn = gr.Button("Connect", elem_id="remote-connect")
    with gr.Accordion("LoRA adapters", open=True):
        with gr.Row():
            lora_pick = gr.Dropdown(choices=lora_choices(services), label="Adapter (from the loras dir)",
                                    elem_id="lora-pick", scale=3)
            lora_weight = gr.Number(value=1.0, minimum=-10, maximum=10, step=0.1, label="Weight",
                                    elem_id="lora-weight", scale=1)
        with gr.Row():
            attach_btn = gr.Button("Attach", elem_id="lora-attach")
            detach_btn = gr.Button("Detach", elem_id="lora-detach")
        lora_active = gr.Markdown(active_text(services), elem_id="lora-active")
    info_text, template_text = model_info(services)
    info = gr.Markdown(info_text, elem_id="model-info")
    with gr.Row(equal_height=True):
        cache_info = gr.Markdown(prefix_cache_text(services), elem_id="prefix-cache-info")
        cache_clear = gr.Button("Clear prefix cache", elem_id="prefix-cache-clear", size="sm", scale=0, min_width=160)
    with gr.Accordion("What each loader can do", open=False):
        capabilities = gr.Markdown(capability_table(services), elem_id="loader-capabilities")
    installed, quantized = create_backends_panel(services, lambda: [e.name for e in services.models.available()])
    template = gr.Code(template_text, language="jinja2", label="Chat template", interactive=False,
                       elem_id="model-template")

    def load_failed(exc: Exception) -> UserError:
        still = services.models.loaded
        kept = f" The previous model ({still.name}) is still loaded." if still else ""
        return UserError(f"{exc}.{kept}")

    def load(name: str | None, loader_name: str, device_name: str, dtype_name: str, n_threads: float | None,
             progress=gr.Progress()):
        if not name:
            raise UserError("Choose a model first.")
        try:
            options = LoadOptions(device_name, dtype_name, int(n_threads) if n_threads else None)
            chosen = None if loader_name in (None, AUTO_LOADER) else loader_name
            services.models.load(name, chosen, options, progress=lambda f, m: progress(f, desc=m))
        except (LoaderError, InvalidName, ValueError) as exc:
            raise load_failed(exc) from exc
        services.settings.update(last_model=name, last_loader=chosen,
                                 load_options={"device": device_name, "dtype": dtype_name,
                                               "threads": int(n_threads) if n_threads else None})
        return model_info(services)

    def unload():
        services.models.unload()
        return model_info(services)

    def reload(progress=gr.Progress()):
        try:
            services.models.reload(progress=lambda f, m: progress(f, desc=m))
        except LoaderError as exc:
            raise UserError(str(exc)) from exc
        return model_info(services)

    def change_lora(change, name: str | None, *args) -> str:
        if not name:
            if not lora_choices(services):
                raise UserError(f"No adapter fits this model: put LoRA adapters (peft folders with "
                               f"adapter_config.json) in {services.config.loras_dir}, then reload the page.")
            raise UserError("Choose an adapter first.")
        try:
            change(name, *args)
        except (LoaderError, InvalidName) as exc:
            raise UserError(str(exc)) from exc
        return active_text(services)

    def attach(name: str | None, weight: float | None) -> str:
        return change_lora(services.models.attach_lora, name, 1.0 if weight is None else float(weight))

    def detach(name: str | None) -> str:
        return change_lora(services.models.detach_lora, name)

    def connect(url: str, key: str, name: str, progress=gr.Progress()):
        if not url.strip():
            raise UserError("Type the server's base URL first, e.g. http://gpu-box:8000/v1")
        progress(0.1, desc=f"connecting to {url.strip()}")
        try:
            services.models.load_remote(url, key, name.strip() or None)
        except LoaderError as exc:
            raise load_failed(exc) from exc
        return model_info(services)

    def refresh_list():
        return gr.update(choices=[e.name for e in services.models.available()]), gr.update(
            choices=loader_choices(services))

    def lora_views():
        return gr.update(choices=lora_choices(services)), active_text(services)

    model_events = [(load_btn, load, [model, loader, device, dtype, threads]), (unload_btn, unload, None),
                    (reload_btn, reload, None), (connect_btn, connect, [remote_url, remote_key, remote_model])]
    for btn, fn, inputs in model_events:  # a new model has its own adapters: refresh them once it is in
        btn.click(shows_errors(fn), inputs, [info, template], concurrency_limit=1, concurrency_id="model").then(
            lora_views, None, [lora_pick, lora_active])
    refresh.click(shows_errors(refresh_list), None, [model, loader])

    def clear_cache() -> str:
        services.engine.clear_prefix_cache()
        return prefix_cache_text(services)

    cache_clear.click(shows_errors(clear_cache), None, [cache_info])
    gr.Timer(2.0).tick(lambda: prefix_cache_text(services), None, cache_info, show_progress="hidden")
    installed.then(shows_errors(refresh_list), None, [model, loader]).then(lambda: capability_table(services), None, [capabilities])
    quantized.then(shows_errors(refresh_list), None, [model, loader])
    attach_btn.click(shows_errors(attach), [lora_pick, lora_weight], [lora_active], concurrency_limit=1, concurrency_id="model")
    detach_btn.click(shows_errors(detach), [lora_pick], [lora_active], concurrency_limit=1, concurrency_id="model")
    return ModelTab(model, info, template, lora_pick, lora_active)
