"""Model tab: layout and wiring over ModelController (webui.controllers.model)."""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from typing import Any, Callable, Sequence, TypedDict

import gradio as gr
from gradio.events import Dependency

from loaders.base import DTYPES, available_devices
from loaders.options import LoadOption, options_of
from webui.controllers import UserError
from webui.controllers.model import ModelController, ModelInfo
from webui.services import Services
from webui.ui.backends_panel import create_backends_panel
from webui.ui.feedback import Updates, shows_errors
from webui.ui.page_channel import PageChannel, line_value

log = logging.getLogger(__name__)


OptionControl = gr.Checkbox | gr.Dropdown | gr.Number | gr.Textbox
"""The control a load option gets (from its kind and choices)."""


class _OptionLabels(TypedDict):
    """What every load option's control is given."""

    label: str
    info: str
    elem_id: str
    elem_classes: list[str]


@dataclass
class ModelTab:
    model: gr.Dropdown
    refresh: gr.Button
    loader: gr.Dropdown
    device: gr.Dropdown
    dtype: gr.Dropdown
    threads: gr.Number
    keep: gr.Checkbox
    load: gr.Button
    unload: gr.Button
    reload: gr.Button
    remote_url: gr.Textbox
    remote_key: gr.Textbox
    remote_model: gr.Textbox
    connect: gr.Button
    lora_pick: gr.Dropdown
    lora_weight: gr.Number
    attach: gr.Button
    detach: gr.Button
    lora_active: gr.Markdown
    info: gr.Markdown
    cache_info: gr.HTML
    cache_clear: gr.Button
    capabilities: gr.Markdown
    template: gr.Code
    loaded: gr.Markdown
    option_groups: dict[str, gr.Column]
    """Each loader's own load options, shown for the loader the chosen model would load with."""
    option_fields: list[tuple[str, LoadOption, OptionControl]]
    estimate: gr.Markdown
    """What loading the chosen model would take, and a warning when it cannot fit the memory budget."""
    message: gr.Markdown
    """Why the last load, unload, reload or connect failed; it stays until the next one."""
    picker: gr.Dropdown
    """The header's "Model in use" (every tab's), kept in step with loads and unloads here."""
    controller: ModelController


def _model_rows(services: Services, controller: ModelController) -> dict:
    opts = services.settings.get().load_options
    with gr.Row():
        model = gr.Dropdown(choices=controller.model_names(), value=controller.selected_model(), label="Model",
                            elem_id="model-name", scale=4, allow_custom_value=False)
        refresh = gr.Button("Refresh list", elem_id="model-refresh", scale=1)
    loader = gr.Dropdown(choices=controller.loader_choices(), value=controller.selected_loader(), label="Loader",
                         elem_id="model-loader")
    with gr.Row():
        devices = available_devices()  # only what this machine has (a saved "cuda" from elsewhere falls back)
        saved = opts.get("device", services.config.device)
        device = gr.Dropdown(choices=list(devices), value=saved if saved in devices else "auto", label="Device",
                             elem_id="model-device")
        dtype = gr.Dropdown(choices=list(DTYPES), value=opts.get("dtype", services.config.dtype), label="dtype",
                            elem_id="model-dtype", visible=controller.takes_dtype(controller.selected_model(),
                                                                                  controller.selected_loader()))
        threads = gr.Number(value=opts.get("threads") or services.config.threads or 0, precision=0, minimum=0,
                            label="CPU threads (0 = torch's default)", elem_id="model-threads")
    groups, fields = _option_form(services, controller, model.value, loader.value)
    keep = gr.Checkbox(value=True, label="Keep the other loaded models (each runs on its own engine, within the "
                                          "memory budget); off: this model replaces them", elem_id="model-keep")
    with gr.Row():
        load = gr.Button("Load", variant="primary", elem_id="model-load")
        unload = gr.Button("Unload the model in use", elem_id="model-unload")
        reload = gr.Button("Reload it", elem_id="model-reload")
    estimate = gr.Markdown(controller.estimate_text(model.value, loader.value, "auto", "auto", None, {}),
                           elem_id="model-estimate")
    message = gr.Markdown("", elem_id="model-message")
    return dict(model=model, refresh=refresh, loader=loader, device=device, dtype=dtype, threads=threads,
                keep=keep, load=load, unload=unload, reload=reload, option_groups=groups, option_fields=fields,
                estimate=estimate, message=message)


def option_control(spec: LoadOption, value: Any, elem_id: str) -> OptionControl:
    """The control for one load option, built from its declaration (class load-option: at least as wide as a
    dropdown, so on a narrow window the row wraps instead of squeezing a checkbox until its text is cut off)."""
    common = _OptionLabels(label=spec.title, info=spec.help, elem_id=elem_id, elem_classes=["load-option"])
    if spec.kind is bool:
        return gr.Checkbox(value=value, **common)
    if spec.choices:
        return gr.Dropdown(choices=list(spec.choices), value=value, **common)
    if spec.kind in (int, float):
        return gr.Number(value=value, precision=0 if spec.kind is int else None, minimum=spec.minimum,
                         maximum=spec.maximum, **common)
    return gr.Textbox(value=value, **common)


def _option_form(services: Services, controller: ModelController, model: str | None, loader: str | None
                 ) -> tuple[dict[str, gr.Column], list[tuple[str, LoadOption, OptionControl]]]:
    """A group of controls per loader that has options; only the chosen model's loader's group is shown."""
    shown = controller.effective_loader(model, loader)
    groups: dict[str, gr.Column] = {}
    fields: list[tuple[str, LoadOption, OptionControl]] = []
    for name in services.registry.names():
        specs = options_of(services.registry.get(name))
        if not specs:
            continue
        values = controller.option_values(model if name == shown else None, name)
        with gr.Column(visible=name == shown, elem_id=f"load-options-{name}") as group:
            gr.Markdown(f"**{name} load options** (remembered for each model once it loads)")
            with gr.Row(equal_height=True):
                for spec in specs:
                    fields.append((name, spec, option_control(spec, values[spec.name],
                                                               f"load-{name}-{spec.name}")))
        groups[name] = group
    return groups, fields


def _remote_and_lora_rows(controller: ModelController) -> dict:
    with gr.Accordion("Remote server (any OpenAI-compatible API: vLLM, llama.cpp server, TGI, another workbench)",
                      open=False):
        with gr.Row():
            remote_url = gr.Textbox(label="Base URL", placeholder="http://gpu-box:8000/v1", elem_id="remote-url",
                                    scale=3)
            remote_key = gr.Textbox(label="API key (kept in memory only)", type="password", elem_id="remote-key",
                                    scale=2)
            remote_model = gr.Textbox(label="Model (empty: the server's first)", elem_id="remote-model", scale=2)
        connect = gr.Button("Connect", elem_id="remote-connect")
    with gr.Accordion("LoRA adapters", open=True):
        with gr.Row():
            lora_pick = gr.Dropdown(choices=controller.lora_choices(), label="Adapter (from the loras dir)",
                                    elem_id="lora-pick", scale=3)
            lora_weight = gr.Number(value=1.0, minimum=-10, maximum=10, step=0.1, label="Weight",
                                    elem_id="lora-weight", scale=1)
        with gr.Row():
            attach = gr.Button("Attach", elem_id="lora-attach")
            detach = gr.Button("Detach", elem_id="lora-detach")
        lora_active = gr.Markdown(controller.active_text(), elem_id="lora-active")
    return dict(remote_url=remote_url, remote_key=remote_key, remote_model=remote_model, connect=connect,
                lora_pick=lora_pick, lora_weight=lora_weight, attach=attach, detach=detach, lora_active=lora_active)


def create_model_tab(services: Services, picker: gr.Dropdown, opened: gr.Tab | None = None,
                     channel: PageChannel | None = None) -> ModelTab:
    """The Model tab (inside ``opened``, its gr.Tab: opening it shows what is loaded now, whoever loaded it;
    ``channel`` keeps its prefix cache line up to date)."""
    controller = ModelController(services)
    top = _model_rows(services, controller)
    loaded = gr.Markdown(controller.loaded_table(), elem_id="model-loaded")
    middle = _remote_and_lora_rows(controller)
    info = controller.info()
    info_box = gr.Markdown(info.text, elem_id="model-info")
    with gr.Row(equal_height=True):
        # kept up to date by the page script from GET /page-lines (webui.ui.page_channel), not a Gradio timer
        cache_info = gr.HTML(line_value(controller.prefix_cache_text()), elem_id="prefix-cache-info")
        if channel is not None:
            channel.shows("prefix-cache-info", controller.prefix_cache_text)
        cache_clear = gr.Button("Clear prefix cache", elem_id="prefix-cache-clear", size="sm", scale=0, min_width=160)
    with gr.Accordion("What each loader can do", open=False):
        capabilities = gr.Markdown(controller.capability_table(), elem_id="loader-capabilities")
    installed, quantized = create_backends_panel(services, controller.model_names)
    template = gr.Code(info.template, language="jinja2", label="Chat template", interactive=False,
                       elem_id="model-template")
    tab = ModelTab(**top, **middle, info=info_box, cache_info=cache_info, cache_clear=cache_clear,
                   capabilities=capabilities, template=template, loaded=loaded, picker=picker,
                   controller=controller)
    _wire(tab, installed, quantized, opened)
    return tab


def reports(fn: Callable[..., Updates], line: gr.Markdown) -> Callable[..., Updates]:
    """Wrap a load, unload, reload or connect: its outputs (by component) and an empty message ``line``; when it
    is refused or fails, the outputs stay and the line says why (a toast says it too, on any tab)."""
    @functools.wraps(fn)
    def call(*args, **kwargs):
        try:
            return {**fn(*args, **kwargs), line: ""}
        except UserError as exc:
            message = str(exc)
        except Exception as exc:  # a backend's own error (out of memory, a broken file): shown, and logged in full
            log.exception("a Model tab action failed")
            message = f"It failed: {type(exc).__name__}: {exc}"
        gr.Warning(message)
        return {line: f"⚠ {message}"}
    return call


def _wire(tab: ModelTab, installed: Dependency, quantized: Dependency, opened: gr.Tab | None) -> None:
    c = tab.controller

    def shown(info: ModelInfo) -> dict[gr.blocks.Block, str]:
        return {tab.info: info.text, tab.template: info.template}

    def extra(name: str | None, loader: str | None, values: Sequence[Any]) -> dict[str, Any]:
        """The shown loader's option values, by option name."""
        chosen = c.effective_loader(name, loader)
        return {spec.name: value for (owner, spec, _), value in zip(tab.option_fields, values) if owner == chosen}

    def load(name, loader, device, dtype, threads, keep, *values, progress=gr.Progress()):
        return shown(c.load(name, loader, device, dtype, threads, progress=lambda f, m: progress(f, desc=m),
                            keep_others=keep, extra=extra(name, loader, values)))

    def estimate(name, loader, device, dtype, threads, keep, *values):
        return c.estimate_text(name, loader, device, dtype, threads, extra(name, loader, values), keep)

    def reload(progress=gr.Progress()):
        return shown(c.reload(progress=lambda f, m: progress(f, desc=m)))

    def connect(url: str, key: str, name: str, keep: bool) -> dict[gr.blocks.Block, str]:
        return shown(c.connect(url, key, name, keep))

    def loaded(*sizing):  # after any change: the table, the header's picker, this model's adapters, the budget
        return (c.loaded_table(), gr.update(choices=c.loaded_names(), value=c.current_name()),
                gr.update(choices=c.lora_choices()), c.active_text(), estimate(*sizing))

    def lists():
        return gr.update(choices=c.model_names()), gr.update(choices=c.loader_choices())

    after = [tab.loaded, tab.picker, tab.lora_pick, tab.lora_active, tab.estimate]
    controls = [field for _, _, field in tab.option_fields]
    form_outputs = [*tab.option_groups.values(), *controls, tab.dtype]
    sizing = [tab.model, tab.loader, tab.device, tab.dtype, tab.threads, tab.keep, *controls]
    for changed in (tab.model, tab.loader):
        changed.change(functools.partial(option_form, tab), [tab.model, tab.loader], form_outputs,
                       show_progress="hidden").then(
            estimate, sizing, tab.estimate)
    for control in (tab.device, tab.dtype, tab.threads, tab.keep, *controls):
        control.change(estimate, sizing, tab.estimate)
    events: list[tuple[gr.Button, Callable[..., Any], Sequence[gr.components.Component] | None]] = [(tab.load, load, [tab.model, tab.loader, tab.device, tab.dtype, tab.threads, tab.keep, *controls]),
              (tab.unload, lambda: shown(c.unload()), None), (tab.reload, reload, None),
              (tab.connect, connect, [tab.remote_url, tab.remote_key, tab.remote_model, tab.keep])]
    done = [tab.info, tab.template, tab.message]
    for button, fn, inputs in events:  # the last message goes as the next action starts
        button.click(lambda: "", None, tab.message, show_progress="hidden").then(
            reports(fn, tab.message), inputs, done, concurrency_limit=1, concurrency_id="model").then(loaded, sizing, after)
    tab.picker.input(reports(lambda name: shown(c.use(name)), tab.message), [tab.picker], done,
                     concurrency_limit=1, concurrency_id="model").then(loaded, sizing, after)
    tab.picker.focus(lambda: gr.update(choices=c.loaded_names()), None, tab.picker)
    if opened is not None:  # a load or unload made elsewhere (another browser tab, the API) shows on opening it
        opened.select(loaded, sizing, after, show_progress="hidden")
    tab.refresh.click(lists, None, [tab.model, tab.loader])
    tab.cache_clear.click(lambda: c.clear_prefix_cache() and None, None, None).then(  # the line shows it at once
        None, js="() => window.workbenchPage && window.workbenchPage.read()")
    installed.then(lists, None, [tab.model, tab.loader]).then(c.capability_table, None, [tab.capabilities])
    quantized.then(lists, None, [tab.model, tab.loader])
    for button, fn, inputs in ((tab.attach, c.attach, [tab.lora_pick, tab.lora_weight]),
                               (tab.detach, c.detach, [tab.lora_pick])):
        button.click(shows_errors(fn), inputs, [tab.lora_active], concurrency_limit=1, concurrency_id="model")


def on_load(tab: ModelTab) -> tuple[list, object]:
    """(outputs, function): a page (re)load shows what is loaded now and the lists as they are."""
    c = tab.controller

    def load():
        info = c.info()
        name, loader = c.selected_model(), c.selected_loader()
        saved = c.services.settings.get().load_options
        chosen = c.effective_loader(name, loader)
        sizing = c.estimate_text(name, loader, saved.get("device", "auto"), saved.get("dtype", "auto"),
                                 saved.get("threads"), c.option_values(name, chosen))
        return (gr.update(choices=c.model_names(), value=name), info.text, info.template,
                gr.update(choices=c.lora_choices()), c.active_text(), c.loaded_table(),
                gr.update(choices=c.loaded_names(), value=c.current_name()), gr.update(value=loader),
                *option_form(tab, name, loader), sizing)
    return [tab.model, tab.info, tab.template, tab.lora_pick, tab.lora_active, tab.loaded, tab.picker, tab.loader,
            *tab.option_groups.values(), *(field for _, _, field in tab.option_fields), tab.dtype, tab.estimate], load


def option_form(tab: ModelTab, name: str | None, loader: str | None) -> list:
    """Updates that show the options of the loader ``name`` would load with, as it was last loaded with, and the
    dtype control only where that loader takes a dtype."""
    c = tab.controller
    chosen = c.effective_loader(name, loader)
    values = c.option_values(name, chosen)
    return ([gr.update(visible=owner == chosen) for owner in tab.option_groups]
            + [gr.update(value=values[spec.name]) if owner == chosen else gr.update()
               for owner, spec, _ in tab.option_fields]
            + [gr.update(visible=c.takes_dtype(name, loader))])
