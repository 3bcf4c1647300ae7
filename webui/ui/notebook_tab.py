"""Notebook tab: free-form completion on raw text (no chat template), named notebooks."""

from __future__ import annotations

import gradio as gr

from webui.names import InvalidName
from webui.services import Services
from webui.store import StoreError
from webui.token_view import VIEW_TOP, BranchError, branch_request, branched_row, token_rows
from webui.ui.generation import ActiveRequests, session_key, stats_text, stream_request, stream_text
from webui.ui.parameters_tab import ParametersTab
from webui.ui.token_view import branch_of, create_token_view, view_value

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
    with gr.Accordion("Tokens of the last generation", open=False, elem_id="notebook-tokens-panel"):
        token_view = create_token_view("notebook-tokens")
    undo = gr.State([])
    last = gr.State(None)  # the last generation: text before it, prompt ids, token ids, token rows

    def generate(data: dict, request: gr.Request):
        before, history = data[text], list(data[undo])
        if not before.strip():
            raise gr.Error("The notebook is empty; type some text for the model to continue.")
        model = services.models.loaded
        local = model is not None and not model.capabilities.text_only
        sampling = params.params(data)
        history = (history + [before])[-MAX_UNDO:]
        events = stream_text(services, active, session_key(request, PANEL), before, sampling, True,
                             logprobs=VIEW_TOP if local else None)
        prompt_ids = model.tokenizer.encode(before) if local else []
        yield from stream_into(data[name], before, "", (prompt_ids, [], []), events, history, local)

    def stream_into(notebook: str | None, before: str, prefix: str, record: tuple[list, list, list], events,
                    history: list[str], branchable: bool):
        """Stream generated text after ``before`` + ``prefix``; yields (text, stats, undo, last, token view)."""
        prompt_ids, ids, rows = record[0], list(record[1]), list(record[2])
        final = before + prefix
        for generated, event in events:
            ids += event.token_ids
            rows += token_rows(event.logprobs)
            final = before + prefix + generated
            if event.finish_reason is not None:
                state = {"before": before, "prompt_ids": prompt_ids, "token_ids": ids, "tokens": rows}
                yield final, stats_text(event), history, state, view_value(rows, branchable)
            elif event.text:
                yield final, "generating…", history, gr.skip(), gr.skip()
        if notebook:
            _save(notebook, final)

    def branch(data: dict, request: gr.Request):
        """Continue the last generation from a token position with the clicked alternative."""
        state, model = data[last], services.models.loaded
        try:
            pos, token_id = branch_of(data[token_view])
            if model is None or model.capabilities.text_only:
                raise BranchError("branching needs a local model: load one in the Model tab")
            if not state:
                raise BranchError("generate something first")
            ids, rows, sampling = state["token_ids"], state["tokens"], params.params(data)
            prefix_ids, prefix_rows = ids[:pos] + [token_id], rows[:pos] + [branched_row(rows[pos], token_id)]
            req = branch_request(state["prompt_ids"], ids, pos, token_id, sampling,
                                 loras=services.models.active_loras, logprobs=VIEW_TOP)
        except BranchError as exc:
            raise gr.Error(str(exc)) from exc
        before, history = state["before"], (list(data[undo]) + [data[text]])[-MAX_UNDO:]
        prefix = model.tokenizer.decode(prefix_ids)
        if req is None:
            state = {**state, "token_ids": prefix_ids, "tokens": prefix_rows}
            yield before + prefix, "finish: length (branched at the last token)", history, state, view_value(
                prefix_rows)
            return
        events = stream_request(services, active, session_key(request, PANEL), req)
        yield from stream_into(data[name], before, prefix, (state["prompt_ids"], prefix_ids, prefix_rows), events,
                               history, True)

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

    outputs = [text, stats, undo, last, token_view]
    generate_btn.click(generate, {text, undo, name, *params.inputs}, outputs, concurrency_limit=None)
    token_view.submit(branch, {text, undo, name, last, token_view, *params.inputs}, outputs, concurrency_limit=None)
    def stop(request: gr.Request) -> None:
        active.cancel(session_key(request, PANEL))

    stop_btn.click(stop, None, None, concurrency_limit=None)
    undo_btn.click(undo_last, [undo], [text, undo])
    save_btn.click(save, [name, text], [name, stats])
    name.input(open_notebook, [name], [text, undo])
    delete_btn.click(delete, [name], [name, stats])
    return {"name": name, "text": text, "stats": stats}
