"""Model tab: choose a model and loader, load / unload / reload, see what is loaded."""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from loaders.base import DTYPES, LoaderError, LoadOptions
from webui.names import InvalidName
from webui.services import Services

AUTO_LOADER = "auto"
DEVICES = ("auto", "cpu", "cuda", "mps")


@dataclass
class ModelTab:
    model: gr.Dropdown
    info: gr.Markdown
    template: gr.Code


def loader_choices(services: Services) -> list[tuple[str, str]]:
    """(label, value) pairs; a loader whose backend is missing says why and how to install it."""
    choices = [("auto (the first loader that can read the model)", AUTO_LOADER)]
    for s in services.registry.status():
        label = s.name if s.available else f"{s.name} — unavailable: {s.reason}; install: {s.install_hint}"
        choices.append((label, s.name))
    return choices


def model_info(services: Services) -> tuple[str, str]:
    model = services.models.loaded
    if model is None:
        return "No model loaded.", ""
    caps = model.capabilities
    info = (f"**{model.name}** · loader `{model.loader}` · {model.device} / {model.dtype}  \n"
            f"context length: {model.context_length} tokens · weights: {model.memory_bytes() / 2**20:,.0f} MiB · "
            f"batched forward: {'yes' if caps.batched_forward else 'no'} · LoRA: {'yes' if caps.lora else 'no'}  \n"
            f"path: `{model.path}`")
    return info, model.tokenizer.chat_template or "(this model has no chat template)"


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
        device = gr.Dropdown(choices=list(DEVICES), value=opts.get("device", services.config.device), label="Device",
                             elem_id="model-device")
        dtype = gr.Dropdown(choices=list(DTYPES), value=opts.get("dtype", services.config.dtype), label="dtype",
                            elem_id="model-dtype")
        threads = gr.Number(value=opts.get("threads") or services.config.threads or 0, precision=0, minimum=0,
                            label="CPU threads (0 = torch's default)", elem_id="model-threads")
    with gr.Row():
        load_btn = gr.Button("Load", variant="primary", elem_id="model-load")
        unload_btn = gr.Button("Unload", elem_id="model-unload")
        reload_btn = gr.Button("Reload", elem_id="model-reload")
    info_text, template_text = model_info(services)
    info = gr.Markdown(info_text, elem_id="model-info")
    template = gr.Code(template_text, language="jinja2", label="Chat template", interactive=False,
                       elem_id="model-template")

    def load(name: str | None, loader_name: str, device_name: str, dtype_name: str, n_threads: float | None,
             progress=gr.Progress()):
        if not name:
            raise gr.Error("Choose a model first.")
        try:
            options = LoadOptions(device_name, dtype_name, int(n_threads) if n_threads else None)
            chosen = None if loader_name in (None, AUTO_LOADER) else loader_name
            services.models.load(name, chosen, options, progress=lambda f, m: progress(f, desc=m))
        except (LoaderError, InvalidName, ValueError) as exc:
            still = services.models.loaded
            kept = f" The previous model ({still.name}) is still loaded." if still else ""
            raise gr.Error(f"{exc}.{kept}") from exc
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
            raise gr.Error(str(exc)) from exc
        return model_info(services)

    def refresh_list():
        return gr.update(choices=[e.name for e in services.models.available()]), gr.update(
            choices=loader_choices(services))

    load_btn.click(load, [model, loader, device, dtype, threads], [info, template], concurrency_limit=1,
                   concurrency_id="model")
    unload_btn.click(unload, None, [info, template], concurrency_limit=1, concurrency_id="model")
    reload_btn.click(reload, None, [info, template], concurrency_limit=1, concurrency_id="model")
    refresh.click(refresh_list, None, [model, loader])
    return ModelTab(model, info, template)
