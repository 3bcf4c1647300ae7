"""The browser UI: tabs stacked over the shared services. No logic here that the API would need.

Per-browser-tab state lives in gr.State (the open chat) or is keyed by
Gradio's session hash inside this Blocks instance (the running request), never
in module globals.
"""

from __future__ import annotations

import gradio as gr

from webui.services import Services
from webui.ui.ab_tab import create_ab_tab, side_choices
from webui.ui.batch_tab import create_batch_tab, wire_batch_tab
from webui.controllers.generation import ActiveRequests, status_text

from webui.ui.chat_tab import create_chat_tab, on_load as chat_on_load
from webui.ui.insight_tab import create_insight_tab, perplexity_table
from webui.ui.model_tab import active_text, create_model_tab, lora_choices, model_info
from webui.ui.notebook_tab import create_notebook_tab, on_load as notebook_on_load
from webui.ui.parameters_tab import create_parameters_tab, on_load as parameters_on_load

CSS = """
#status-line {font-family: ui-monospace, monospace; font-size: 0.9em}
#status-line p {margin: 0}
.reply-stats {font-size: 0.78em; opacity: 0.65; font-family: ui-monospace, monospace}
#notebook-text textarea {font-family: ui-monospace, monospace}
.batch-compare {width: 100%; border-collapse: collapse; font-size: 0.9em}
.batch-compare td, .batch-compare th {border: 1px solid var(--border-color-primary); padding: 4px; vertical-align: top}
.batch-compare tr.differs td:last-child {color: var(--color-accent); font-weight: 600}
mark.diff-del {background: #fdd; text-decoration: line-through}
mark.diff-add {background: #dfd}
"""


def build_ui(services: Services) -> gr.Blocks:
    active = ActiveRequests()
    with gr.Blocks(title="LLM Workbench", analytics_enabled=False) as demo:
        with gr.Row(equal_height=True):
            gr.Markdown("### LLM Workbench", elem_id="app-title")
            status = gr.Markdown(status_text(services), elem_id="status-line")
        with gr.Tabs(elem_id="tabs"):
            chat_tab = gr.Tab("Chat", id="chat", elem_id="tab-chat")
            notebook_tab = gr.Tab("Notebook", id="notebook", elem_id="tab-notebook")
            with gr.Tab("Batch", id="batch", elem_id="tab-batch"):
                batch = create_batch_tab(services)
            ab_tab = gr.Tab("A/B", id="ab", elem_id="tab-ab")
            insight_tab = gr.Tab("Insight", id="insight", elem_id="tab-insight")
            with gr.Tab("Parameters", id="parameters", elem_id="tab-parameters"):
                params = create_parameters_tab(services)
            with gr.Tab("Model", id="model", elem_id="tab-model"):
                model = create_model_tab(services)
            with chat_tab:
                chat = create_chat_tab(services, params, active)
            with notebook_tab:
                notebook = create_notebook_tab(services, params, active)
            wire_batch_tab(services, batch, params)
            with insight_tab:
                insight = create_insight_tab(services, params)
            with ab_tab:
                ab = create_ab_tab(services, params, active)
        gr.Timer(1.0).tick(lambda: status_text(services), None, status, show_progress="hidden")

        def on_page_load():
            info, template = model_info(services)
            loaded = services.models.loaded
            return (info, template,
                    gr.update(choices=[e.name for e in services.models.available()],
                              value=loaded.name if loaded else services.settings.get().last_model),
                    gr.update(choices=batch["run_choices"]()), gr.update(choices=services.presets.names()),
                    gr.update(choices=lora_choices(services)), active_text(services), perplexity_table(services),
                    *[gr.update(choices=side_choices(services)[0]) for _ in ab["presets"]],
                    *[gr.update(choices=side_choices(services)[1]) for _ in ab["adapters"]])

        demo.load(on_page_load, None, [model.info, model.template,
                                       model.model, batch["runs"], batch["presets"],
                                       model.lora_pick, model.lora_active, insight["ppl_table"],
                                       *ab["presets"], *ab["adapters"]])
        for outputs, load in (parameters_on_load(params), chat_on_load(chat), notebook_on_load(notebook)):
            demo.load(load, None, outputs)
    return demo
