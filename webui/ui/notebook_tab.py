"""Notebook tab: free-form completion on raw text (no chat template), named notebooks."""

from __future__ import annotations

import gradio as gr

from webui.names import InvalidName
from webui.services import Services
from webui.store import StoreError
from webui.ui.generation import ActiveRequests, session_key, stats_text, stream_text
from webui.ui.parameters_tab import ParametersTab

PANEL = "notebook"
MAX_UNDO = 20


def create_notebook_tab(services: Services, params: ParametersTab, active: ActiveRequests) -> dict:
    with gr.Row():
        name = gr.Dropdown(choices=services.notebooks.list(), value=None, allow_custom_value=True,
                           label="Notebook (choose one, or type a new name)", elem_id="notebook-name", scale=4)
        save_btn = gr.Button("Save", elem_id="notebook-save", scale=1)
        delete_btn = gr.Button("Delete", variant="stop", elem_id="notebook-delete", scale=1)
    text = gr.Textbox(lines=18, max_lines=40, label="Text (the model continues it)", elem_id="notebook-text",
                      placeholder="Once upon a time,")
    with gr.Row():
        generate_btn = gr.Button("Generate", variant="primary", elem_id="notebook-generate")
        stop_btn = gr.Button("Stop", variant="stop", elem_id="notebook-stop")
        undo_btn = gr.Button("Undo last generation", elem_id="notebook-undo")
    stats = gr.Markdown("", elem_id="notebook-stats")
    undo = gr.State([])

    def generate(data: dict, request: gr.Request):
        before, history = data[text], list(data[undo])
        if not before.strip():
            raise gr.Error("The notebook is empty; type some text for the model to continue.")
        sampling = params.params(data)
        history = (history + [before])[-MAX_UNDO:]
        final = before
        for generated, event in stream_text(services, active, session_key(request, PANEL), before, sampling, True):
            final = before + generated
            if event.finish_reason is not None:
                yield final, stats_text(event), history
            elif event.text:
                yield final, "generating…", history
        if data[name]:
            _save(data[name], final)

    def _save(notebook: str, content: str) -> None:
        try:
            services.notebooks.save(notebook, content)
        except (InvalidName, StoreError, OSError) as exc:
            raise gr.Error(f"Could not save the notebook: {exc}") from exc

    def save(notebook: str | None, content: str):
        if not notebook:
            raise gr.Error("Type a name for the notebook first.")
        _save(notebook, content)
        return gr.update(choices=services.notebooks.list(), value=notebook.strip()), f"Saved '{notebook.strip()}'."

    def open_notebook(notebook: str | None):
        if not notebook or notebook not in services.notebooks.list():
            return gr.skip(), []
        return services.notebooks.get(notebook), []

    def delete(notebook: str | None):
        if not notebook:
            raise gr.Error("Choose a notebook to delete first.")
        try:
            services.notebooks.delete(notebook)
        except (InvalidName, StoreError) as exc:
            raise gr.Error(str(exc)) from exc
        return gr.update(choices=services.notebooks.list(), value=None), f"Deleted '{notebook}'."

    def undo_last(history: list[str]):
        if not history:
            raise gr.Error("Nothing to undo.")
        return history[-1], history[:-1]

    generate_btn.click(generate, {text, undo, name, *params.inputs}, [text, stats, undo], concurrency_limit=None)
    def stop(request: gr.Request) -> None:
        active.cancel(session_key(request, PANEL))

    stop_btn.click(stop, None, None, concurrency_limit=None)
    undo_btn.click(undo_last, [undo], [text, undo])
    save_btn.click(save, [name, text], [name, stats])
    name.input(open_notebook, [name], [text, undo])
    delete_btn.click(delete, [name], [name, stats])
    return {"name": name, "text": text, "stats": stats}
