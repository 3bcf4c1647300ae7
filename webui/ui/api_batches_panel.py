"""The Batch tab's "API batches" tab (#45): the batch jobs apps made through ``/v1/batches``, beside the tab's own
runs, with their progress (refreshed every two seconds while one runs and the tab is open), one batch in words
when clicked, and Cancel."""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr
import pandas as pd

from webui.controllers.api_batches import COLUMNS, APIBatchesView, Listed
from webui.controllers.errors import UserError
from webui.services import Services
from webui.ui.feedback import shows_errors

REFRESH_SECONDS = 2.0


@dataclass
class APIBatchesPanel:
    tab: gr.Tab
    note: gr.Markdown
    table: gr.Dataframe
    refresh: gr.Button
    cancel: gr.Button
    message: gr.Markdown
    detail: gr.Markdown
    selected: gr.State
    timer: gr.Timer
    view: APIBatchesView


def _user(request: gr.Request | None) -> str | None:
    return getattr(request, "username", None)


def _frame(listed: Listed) -> pd.DataFrame:
    return pd.DataFrame(listed.rows, columns=COLUMNS)


def create_api_batches_tab(services: Services) -> APIBatchesPanel:
    with gr.Tab("API batches", elem_id="batch-api-tab") as tab:
        note = gr.Markdown("", elem_id="batch-api-note")
        table = gr.Dataframe(value=pd.DataFrame([], columns=COLUMNS), interactive=False, wrap=True,
                             elem_id="batch-api-batches")
        with gr.Row():
            refresh = gr.Button("Refresh", size="sm", elem_id="batch-api-refresh", scale=0, min_width=100)
            cancel = gr.Button("Cancel this batch", size="sm", variant="stop", elem_id="batch-api-cancel", scale=0,
                               min_width=160)
        message = gr.Markdown("", elem_id="batch-api-message")
        detail = gr.Markdown("", elem_id="batch-api-detail")
        timer = gr.Timer(REFRESH_SECONDS, active=False)  # on while a batch listed runs (wire_api_batches)
    return APIBatchesPanel(tab, note, table, refresh, cancel, message, detail, gr.State(None), timer,
                           APIBatchesView(services))


def wire_api_batches(panel: APIBatchesPanel) -> None:
    view = panel.view

    def listed(selected: str | None, request: gr.Request) -> tuple:
        """The table, its note, the clicked batch in words, and the timer: on while a batch listed is running."""
        user = _user(request)
        shown = view.table(user)
        try:
            detail = view.detail(selected, user)
        except Exception as exc:  # noqa: BLE001 - the batch went away: said where its words were
            detail = str(exc)
        return _frame(shown), shown.note, detail, gr.Timer(active=shown.running)

    outputs = [panel.table, panel.note, panel.detail, panel.timer]
    panel.tab.select(listed, [panel.selected], outputs, show_progress="hidden")
    panel.refresh.click(listed, [panel.selected], outputs, show_progress="hidden")
    panel.timer.tick(listed, [panel.selected], outputs, show_progress="hidden")

    @shows_errors
    def clicked(frame: pd.DataFrame, evt: gr.SelectData, request: gr.Request) -> tuple[str, str, str]:
        row = evt.index[0] if isinstance(evt.index, (list, tuple)) else evt.index
        batch_id = str(frame.iloc[row, 0])
        return batch_id, view.detail(batch_id, _user(request)), ""

    panel.table.select(clicked, [panel.table], [panel.selected, panel.detail, panel.message])

    def cancel(selected: str | None, request: gr.Request) -> tuple:
        try:  # said beside the button, where it stays
            said = view.cancel(selected, _user(request))
        except UserError as exc:
            said = f"**Not cancelled:** {exc}"
        return said, *listed(selected, request)

    panel.cancel.click(cancel, [panel.selected], [panel.message, *outputs])
