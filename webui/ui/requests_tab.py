"""Requests tab: the API's traffic as apps send it (#33), layout and wiring over RequestsController.

A live table (newest first, refreshed every second without losing the request shown), filters, the request shown as
sent and as the model saw it, Replay (as sent, or with changes) beside the original, Delete, and the switch that
keeps every request.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import gradio as gr
import pandas as pd

from webui.controllers.requests import COLUMNS, ENDPOINTS, STATUSES, RequestsController
from webui.services import Services
from webui.ui.batch_tab import BatchTab
from webui.ui.chat_view import ChatTab, view_updates
from webui.ui.insight_tab import InsightTab
from webui.ui.feedback import Update, opens, shows_errors

REFRESH_SECONDS = 1.0


@dataclass
class RequestsTab:
    note: gr.Markdown
    capture: gr.Checkbox
    text: gr.Textbox
    status: gr.Dropdown
    model: gr.Textbox
    endpoint: gr.Dropdown
    client: gr.Textbox
    table: gr.Dataframe
    selected: gr.State
    shown: gr.State  # what the table and note last showed (see refresh)
    timer: gr.Timer
    summary: gr.Markdown
    sent: gr.Code
    prompt: gr.Textbox
    params: gr.Code
    sources: gr.Markdown
    reply: gr.Textbox
    changes: gr.Textbox
    replay: gr.Button
    replayed: gr.Textbox
    replay_summary: gr.Markdown
    delete: gr.Button
    to_chat: gr.Button
    to_notebook: gr.Button
    to_insight: gr.Button
    to_batch: gr.Button
    to_promptfoo: gr.Button
    suite_file: gr.File
    show_tokens: gr.Button
    tokens: gr.HTML
    controller: RequestsController


def _frame(rows: list[list]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=COLUMNS)


def _user(request: gr.Request | None) -> str | None:
    return getattr(request, "username", None)


def create_requests_tab(services: Services) -> RequestsTab:
    controller = RequestsController(services)
    note = gr.Markdown("", elem_id="requests-note")
    with gr.Row():
        capture = gr.Checkbox(label="Keep every API request (not only those that ask store: true)",
                              value=services.requests.capture_all, elem_id="requests-capture", scale=2,
                              interactive=not services.config.ui_users)  # with a login: an admin's, on load
        text = gr.Textbox(label="Text in the request", elem_id="requests-text", scale=2)
        status = gr.Dropdown(STATUSES, value=STATUSES[0], label="Status", elem_id="requests-status", scale=1)
        model = gr.Textbox(label="Model", elem_id="requests-model", scale=1)
        endpoint = gr.Dropdown(ENDPOINTS, value=ENDPOINTS[0], label="Endpoint", elem_id="requests-endpoint", scale=1)
        client = gr.Textbox(label="Client (key 1, admin 1…)", elem_id="requests-client", scale=1)
    table = gr.Dataframe(_frame([]), interactive=False, wrap=False, elem_id="requests-table",
                         max_height=360, label="Requests, newest first (click one to show it)")
    selected, shown = gr.State(None), gr.State("")
    timer = gr.Timer(REFRESH_SECONDS, active=False)  # ticks while the tab is open (wire_refresh)
    summary = gr.Markdown("", elem_id="requests-summary")
    with gr.Row():
        sent = gr.Code(label="As the app sent it", language="json", elem_id="requests-sent", interactive=False,
                       max_lines=24)
        prompt = gr.Textbox(label="The prompt as the model saw it (after the chat template)", lines=8, max_lines=24,
                            elem_id="requests-prompt", interactive=False)
    with gr.Row():
        reply = gr.Textbox(label="Reply", lines=5, elem_id="requests-reply", interactive=False)
        replayed = gr.Textbox(label="Replay's reply", lines=5, interactive=False, elem_id="requests-replayed")
    replay_summary = gr.Markdown("", elem_id="requests-replay-summary")
    with gr.Row():
        changes = gr.Textbox(label='Replay with changes: request fields as JSON, e.g. {"temperature": 0.9} '
                                   '(empty: replay as sent)', elem_id="requests-changes", scale=3)
        replay = gr.Button("Replay", variant="primary", elem_id="requests-replay", scale=1)
        delete = gr.Button("Delete", variant="stop", elem_id="requests-delete", scale=1)
    with gr.Row():
        to_chat = gr.Button("Open in Chat", size="sm", elem_id="requests-to-chat")
        to_notebook = gr.Button("Open in Notebook", size="sm", elem_id="requests-to-notebook")
        to_insight = gr.Button("Open in Insight", size="sm", elem_id="requests-to-insight")
        to_batch = gr.Button("Test the requests listed in the Batch tab", size="sm", elem_id="requests-to-batch")
        to_promptfoo = gr.Button("Export the requests listed as a promptfoo suite", size="sm",
                                 elem_id="requests-to-promptfoo")
    suite_file = gr.File(label="promptfoo suite", visible=False, interactive=False, elem_id="requests-suite-file")
    with gr.Accordion("Tokens of the reply (the model's probabilities and those after the request's samplers, "
                      "recomputed on the model that answered)", open=False):
        show_tokens = gr.Button("Show the reply's tokens", size="sm", elem_id="requests-show-tokens")
        tokens = gr.HTML("", elem_id="requests-tokens")
    params = gr.Code(label="Parameters as resolved (those not at their neutral value)", language="json",
                     elem_id="requests-params", interactive=False, max_lines=24)
    sources = gr.Markdown("", elem_id="requests-sources")
    tab = RequestsTab(note, capture, text, status, model, endpoint, client, table, selected, shown, timer, summary,
                      sent, prompt, params, sources, reply, changes, replay, replayed, replay_summary, delete, to_chat, to_notebook, to_insight, to_batch,
                      to_promptfoo, suite_file, show_tokens, tokens, controller)
    _wire(tab)
    return tab


def _wire(tab: RequestsTab) -> None:
    c = tab.controller
    filters = _filters(tab)

    def refresh(text: str, status: str, model: str, endpoint: str, client: str, shown: str, request: gr.Request
                ) -> tuple[Update | pd.DataFrame | str, ...]:
        """The table and the note, each sent only when it changed: a table redrawn every second for nothing
        would move under the pointer of someone clicking a row."""
        user = _user(request)
        rows, note = c.table(user, text, status, model, endpoint, client), c.note(user)
        digest = json.dumps([rows, note], default=str)
        if digest == shown:
            return gr.skip()  # nothing changes
        return _frame(rows), note, digest

    def show(selected: str | None, evt: gr.SelectData, request: gr.Request) -> tuple[str | None, ...]:
        row = evt.row_value if isinstance(evt.row_value, list) else None
        chosen = row[0] if row else selected
        shown = c.show(chosen, _user(request))
        return chosen, shown.summary, shown.sent, shown.prompt, shown.params, shown.sources, shown.reply, "", "", ""

    def replay(selected: str | None, changes: str, request: gr.Request) -> tuple[str, str]:
        again = c.replay(selected, changes, _user(request))
        return c.replay_said(selected, again, _user(request)), c.show(again.id, _user(request)).reply

    def delete(selected: str | None, text: str, status: str, model: str, endpoint: str, client: str,
               request: gr.Request) -> tuple[str | pd.DataFrame | None, ...]:
        gr.Info(c.delete(selected, _user(request)))
        return None, "", "", "", "", "", "", _frame(c.table(_user(request), text, status, model, endpoint, client))

    def capture(on: bool, request: gr.Request) -> str:
        c.set_capture(on, _user(request))
        return c.note(_user(request))

    listed = [*filters, tab.shown]
    tab.timer.tick(refresh, listed, [tab.table, tab.note, tab.shown], show_progress="hidden")
    for control in filters:
        control.change(refresh, listed, [tab.table, tab.note, tab.shown], show_progress="hidden")
    details = [tab.selected, tab.summary, tab.sent, tab.prompt, tab.params, tab.sources, tab.reply,
               tab.replay_summary, tab.replayed, tab.tokens]
    tab.table.select(shows_errors(show), [tab.selected], details)
    tab.replay.click(shows_errors(replay), [tab.selected, tab.changes], [tab.replay_summary, tab.replayed])
    tab.delete.click(shows_errors(delete), [tab.selected, *filters], [*details[:7], tab.table])
    tab.capture.input(shows_errors(capture), [tab.capture], [tab.note])
    def tokens(selected: str | None, request: gr.Request) -> str:
        return c.tokens(selected, _user(request))

    tab.show_tokens.click(shows_errors(tokens), [tab.selected], [tab.tokens])


def wire_open(tab: RequestsTab, chat: ChatTab, notebook_text: gr.Textbox, insight: InsightTab, batch: BatchTab,
              opener: gr.Textbox) -> None:
    """Open in Chat (a new chat with the request's messages and its reply), Notebook (the prompt as the model saw
    it, to continue) or Insight (that prompt, raw, to inspect the next token); the requests listed to the Batch tab
    (each prompt as the model saw it, run raw)."""
    c = tab.controller

    def to_batch(text: str, status: str, model: str, endpoint: str, client: str, request: gr.Request
                 ) -> tuple[object, ...]:
        ids = [row[0] for row in c.table(_user(request), text, status, model, endpoint, client)][::-1]  # oldest 1st
        prompts, note = c.as_batch(ids, _user(request))
        gr.Info(note)
        return prompts, True, "", "API requests", opens("batch")

    def to_promptfoo(text: str, status: str, model: str, endpoint: str, client: str, request: gr.Request
                     ) -> dict[str, object]:
        ids = [row[0] for row in c.table(_user(request), text, status, model, endpoint, client)][::-1]  # oldest 1st
        path, note = c.as_promptfoo(ids, _user(request))
        gr.Info(note)
        return gr.update(value=str(path), visible=True)

    def to_chat(selected: str | None, request: gr.Request) -> dict[gr.blocks.Block, object]:
        chat_id = c.as_chat(selected, _user(request))
        return {**view_updates(chat, chat.session.library.view(chat_id), "", request), opener: opens("chat")}

    def to_notebook(selected: str | None, request: gr.Request) -> tuple[str, str]:
        return c.as_text(selected, _user(request)), opens("notebook")

    def to_insight(selected: str | None, request: gr.Request) -> tuple[str, bool, str]:
        return c.as_text(selected, _user(request)), False, opens("insight")

    tab.to_chat.click(shows_errors(to_chat), [tab.selected], [*chat.view, opener])
    tab.to_notebook.click(shows_errors(to_notebook), [tab.selected], [notebook_text, opener])
    tab.to_insight.click(shows_errors(to_insight), [tab.selected], [insight.text, insight.chat, opener])
    form = batch.form
    tab.to_batch.click(shows_errors(to_batch), _filters(tab),
                       [form.prompts, form.raw, form.template, form.name, opener])
    tab.to_promptfoo.click(shows_errors(to_promptfoo), _filters(tab), [tab.suite_file])


def _filters(tab: RequestsTab) -> list[gr.Textbox | gr.Dropdown]:
    """The table's filters, in the order RequestsController.table takes them."""
    return [tab.text, tab.status, tab.model, tab.endpoint, tab.client]


def wire_refresh(tab: RequestsTab, tabs: gr.Tabs) -> None:
    """The table refreshes every second while the Requests tab is open, and not at all otherwise."""
    def opened(evt: gr.SelectData) -> gr.Timer:
        return gr.Timer(active=evt.value == "Requests")

    tabs.select(opened, None, tab.timer, show_progress="hidden")


def on_load(tab: RequestsTab) -> tuple[list, object]:
    """(outputs, function): a page (re)load fills the table and the note for the user who opened it."""
    def load(request: gr.Request) -> tuple[pd.DataFrame, str, dict]:
        user = _user(request)
        return _frame(tab.controller.table(user)), tab.controller.note(user), gr.update(
            **tab.controller.capture_switch(user))
    return [tab.table, tab.note, tab.capture], load
