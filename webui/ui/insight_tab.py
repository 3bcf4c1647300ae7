"""Insight tab: layout and wiring over InsightController (webui.controllers.insight)."""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr
import pandas as pd

from webui.controllers.insight import PERPLEXITY_COLUMNS, InsightController
from webui.services import Services
from webui.ui.feedback import Update, shows_errors
from webui.ui.inspection import inspection_views
from webui.ui.parameters_tab import ParametersTab

NEXT_COLUMNS = ["token", "id", "probability", "after processors", "under these parameters"]
# Every status a next token can have, so a chart drawn without one (no constraint) still keeps its colour.
STATUS_COLORS = {"kept": "#4c78a8", "cut": "#f58518", "masked by the constraint": "#9d9d9d"}
CHART_HINT = ("Type a text and click **Next tokens**: the 20 most likely next tokens appear here, with what the "
              "current parameters keep or cut.")


@dataclass
class InsightTab:
    text: gr.Textbox
    chat: gr.Checkbox
    system: gr.Textbox
    inspect: gr.Button
    next: gr.Button
    summary: gr.Markdown
    chart_hint: gr.Markdown
    chart: gr.BarPlot
    tabs: gr.Tabs
    table: gr.Dataframe
    rendered: gr.Code
    token_table: gr.Dataframe
    record_in: gr.Code
    record_run: gr.Button
    record_out: gr.Textbox
    record_note: gr.Markdown
    ppl_text: gr.Textbox
    ppl_upload: gr.UploadButton
    ppl_window: gr.Number
    ppl_run: gr.Button
    ppl_note: gr.Markdown
    ppl_table: gr.Dataframe
    controller: InsightController


def _question_row() -> dict:
    with gr.Row():
        with gr.Column(scale=2):
            text = gr.Textbox(label="Text", lines=5, elem_id="insight-text", placeholder="The capital of France is")
            with gr.Row():
                chat = gr.Checkbox(label="As a chat message (apply the chat template)", value=False,
                                   elem_id="insight-chat")
                system = gr.Textbox(label="System prompt", lines=1, elem_id="insight-system")
            with gr.Row():
                inspect = gr.Button("Inspect prompt", elem_id="insight-inspect")
                next_ = gr.Button("Next tokens", variant="primary", elem_id="insight-next")
            summary = gr.Markdown("", elem_id="insight-summary")
        with gr.Column(scale=3):
            chart_hint = gr.Markdown(CHART_HINT, elem_id="insight-chart-hint")
            chart = gr.BarPlot(x="token", y="probability", color="under these parameters", sort="-y", visible=False,
                               color_map=STATUS_COLORS,
                               title="Top 20 next tokens (raw probability)", elem_id="insight-chart")
    return dict(text=text, chat=chat, system=system, inspect=inspect, next=next_, summary=summary,
                chart_hint=chart_hint, chart=chart)


def _sub_tabs(controller: InsightController) -> dict:
    with gr.Tabs(elem_id="insight-tabs") as tabs:
        with gr.Tab("Next tokens", id="next"):
            table = gr.Dataframe(headers=NEXT_COLUMNS, interactive=False, elem_id="insight-next-table")
        with gr.Tab("Tokens of the prompt", id="prompt"):
            rendered = gr.Code(label="Exactly what the model reads", language=None, interactive=False,
                               elem_id="insight-rendered")
            token_table = gr.Dataframe(headers=["#", "id", "token"], interactive=False, elem_id="insight-tokens")
        with gr.Tab("Re-run a record", id="record"):
            record_in = gr.Code(language="json", label="Paste a record (from a chat reply's Reproduce panel)",
                                interactive=True, elem_id="record-input")
            record_run = gr.Button("Re-run it", variant="primary", elem_id="record-run")
            record_out = gr.Textbox(label="Output", lines=6, interactive=False, elem_id="record-output")
            record_note = gr.Markdown("", elem_id="record-note")
        with gr.Tab("Perplexity", id="perplexity"):
            with gr.Row():
                ppl_text = gr.Textbox(label="Text to evaluate (or upload a .txt)", lines=4, elem_id="ppl-text", scale=4)
                with gr.Column(scale=1):
                    ppl_upload = gr.UploadButton("Upload .txt", file_types=[".txt"], size="sm", elem_id="ppl-upload")
                    ppl_window = gr.Number(value=512, precision=0, minimum=2, label="Window (tokens)",
                                           elem_id="ppl-window")
                    ppl_run = gr.Button("Evaluate", variant="primary", elem_id="ppl-run")
            ppl_note = gr.Markdown("", elem_id="ppl-note")
            ppl_table = gr.Dataframe(value=perplexity_frame(controller), interactive=False, elem_id="ppl-results")
    return dict(tabs=tabs, table=table, rendered=rendered, token_table=token_table, record_in=record_in,
                record_run=record_run, record_out=record_out, record_note=record_note, ppl_text=ppl_text,
                ppl_upload=ppl_upload, ppl_window=ppl_window, ppl_run=ppl_run, ppl_note=ppl_note, ppl_table=ppl_table)


def perplexity_frame(controller: InsightController) -> pd.DataFrame:
    return pd.DataFrame(controller.perplexity_rows(), columns=PERPLEXITY_COLUMNS)


def create_insight_tab(services: Services, params: ParametersTab) -> InsightTab:
    controller = InsightController(services)
    tab = InsightTab(**_question_row(), **_sub_tabs(controller), controller=controller)
    _wire(tab, params)
    return tab


def _wire(tab: InsightTab, params: ParametersTab) -> None:
    c = tab.controller

    @shows_errors
    def inspect(text: str, chat: bool, system: str) -> tuple[str, pd.DataFrame, str, gr.Tabs]:
        rendered, tokens, note = inspection_views(c.inspect(text, chat, system))
        return rendered, tokens, note, gr.Tabs(selected="prompt")  # open the sub-tab that shows it

    @shows_errors
    def explore(data: dict) -> tuple[Update, Update, pd.DataFrame, str, gr.Tabs]:
        found = c.next_tokens(data[tab.text], data[tab.chat], data[tab.system], params.params(data))
        frame = pd.DataFrame(found.rows(), columns=NEXT_COLUMNS)
        # hidden here and shown by the next step: a plot updated in place keeps the colours of its first data
        # (a status it had not shown, "masked", would not be drawn), a plot shown anew takes them from its data
        return gr.update(value=frame, visible=False), gr.update(visible=False), frame, found.summary, gr.Tabs(
            selected="next")

    @shows_errors
    def evaluate(text: str, window: float | None, progress: gr.Progress = gr.Progress()) -> tuple[str, pd.DataFrame]:
        note = c.perplexity(text, window, progress=lambda f, m: progress(f, desc=m))
        return note, perplexity_frame(c)

    tab.inspect.click(inspect, [tab.text, tab.chat, tab.system],
                      [tab.rendered, tab.token_table, tab.summary, tab.tabs])
    tab.next.click(explore, {tab.text, tab.chat, tab.system, *params.inputs},
                   [tab.chart, tab.chart_hint, tab.table, tab.summary, tab.tabs], concurrency_limit=None).success(
        lambda: gr.update(visible=True), None, tab.chart, show_progress="hidden")
    tab.record_run.click(shows_errors(c.rerun), [tab.record_in], [tab.record_out, tab.record_note],
                         concurrency_limit=None)
    tab.ppl_run.click(evaluate, [tab.ppl_text, tab.ppl_window], [tab.ppl_note, tab.ppl_table], concurrency_limit=None)
    tab.ppl_upload.upload(lambda f: c.read_text(f if isinstance(f, str) else f.name), [tab.ppl_upload],
                          [tab.ppl_text])


def on_load(tab: InsightTab) -> tuple[list, object]:
    """(outputs, function): a page (re)load lists the stored perplexity evaluations."""
    return [tab.ppl_table], lambda: perplexity_frame(tab.controller)
