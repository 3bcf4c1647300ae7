"""Notebook tab: layout and wiring over NotebookSession (webui.controllers.notebook)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import gradio as gr
from gradio.blocks import Block

from webui.controllers.generation import ActiveRequests
from webui.controllers.notebook import PANEL, NotebookSession, NotebookView
from webui.services import Services
from webui.ui.feedback import Updates, Update, session_key, shows_errors
from webui.ui.live import LiveReplies
from webui.ui.page_channel import PageChannel, draft_js
from webui.ui.parameters_tab import ParametersTab
from webui.ui.token_view import branch_of, create_token_view, view_value


@dataclass
class NotebookTab:
    name: gr.Dropdown
    save: gr.Button
    delete: gr.Button
    text: gr.Textbox
    generate: gr.Button
    stop: gr.Button
    undo_button: gr.Button
    stats: gr.Markdown
    token_view: gr.HTML
    undo: gr.State
    last: gr.State
    confirm: gr.State
    live: gr.Textbox
    session: NotebookSession

    @property
    def outputs(self) -> list:
        """What a NotebookView fills (``view_updates``)."""
        return [self.text, self.stats, self.undo, self.last, self.token_view, self.live]


def create_notebook_tab(services: Services, params: ParametersTab, active: ActiveRequests,
                        live: LiveReplies, channel: PageChannel | None = None) -> NotebookTab:
    session = NotebookSession(services, active)
    with gr.Row():
        name = gr.Dropdown(choices=session.names(), value=None, allow_custom_value=True,
                           label="Notebook (choose one, or type a new name)", elem_id="notebook-name", scale=4)
        save = gr.Button("Save", elem_id="notebook-save", scale=1)
        delete = gr.Button("Delete", variant="stop", elem_id="notebook-delete", scale=1)
    text = gr.Textbox(lines=18, max_lines=40, label="Text (the model continues it)", elem_id="notebook-text",
                      placeholder="Once upon a time,")
    with gr.Row():
        generate = gr.Button("Generate", variant="primary", elem_id="notebook-generate")
        stop = gr.Button("Stop", variant="stop", elem_id="notebook-stop")
        undo_button = gr.Button("Undo last generation", elem_id="notebook-undo")
    stats = gr.Markdown("", elem_id="notebook-stats")
    with gr.Accordion("Tokens of the last generation", open=False, elem_id="notebook-tokens-panel"):
        token_view = create_token_view("notebook-tokens")
    # the token of the generation streaming now: the page follows its text on a stream of its own (webui.ui.live)
    following = gr.Textbox("", visible="hidden", elem_id="notebook-live-token", container=False)
    tab = NotebookTab(name, save, delete, text, generate, stop, undo_button, stats, token_view, gr.State([]),
                      gr.State(None), gr.State(False), following, session)
    _wire_generation(tab, params, live)
    following.change(None, [following], None, js="(token) => window.workbenchLive && window.workbenchLive(token, "
                                                  "'notebook')")
    _wire_files(tab, channel or PageChannel())
    return tab


def view_updates(tab: NotebookTab, view: NotebookView, live: str = "") -> Updates:
    """``NotebookTab.outputs`` by component; the token view and the branch record change only at the end."""
    shown = {tab.text: view.text, tab.stats: view.stats, tab.undo: view.undo, tab.live: live}
    if view.last is None:
        return shown
    return {**shown, tab.last: view.last, tab.token_view: view_value(view.last.tokens, view.branchable)}


def _wire_generation(tab: NotebookTab, params: ParametersTab, live: LiveReplies) -> None:
    session = tab.session

    def followed(views: Iterator[NotebookView]) -> Iterator[Updates]:
        """The first and the last view through the event; the text between on its own stream (webui.ui.live), so
        that a token costs the page no Gradio update."""
        started = False
        for token, view in live.following(views):
            if view.last is not None:  # the end
                yield view_updates(tab, view)
                continue
            live.put(token, view.text)
            if not started:
                started = True
                yield view_updates(tab, view, token)

    @shows_errors
    def generate(data: dict, request: gr.Request) -> Iterator[Updates]:
        yield from followed(session.generate(data[tab.name], data[tab.text], list(data[tab.undo]),
                                             params.params(data), session_key(request, PANEL)))

    @shows_errors
    def branch(data: dict, request: gr.Request) -> Iterator[Updates]:
        pos, token_id = branch_of(data[tab.token_view])
        yield from followed(session.branch(data[tab.name], data[tab.text], list(data[tab.undo]), data[tab.last], pos,
                                           token_id, params.params(data), session_key(request, PANEL)))

    inputs: set[Block] = {tab.text, tab.undo, tab.name, tab.last, tab.token_view, *params.inputs}
    tab.generate.click(generate, inputs, tab.outputs, concurrency_limit=None, trigger_mode="multiple")
    tab.token_view.submit(branch, inputs, tab.outputs, concurrency_limit=None, trigger_mode="multiple")
    def stop(request: gr.Request) -> None:
        session.stop(session_key(request, PANEL))

    tab.stop.click(stop, None, None, concurrency_limit=None)
    tab.undo_button.click(shows_errors(session.undo), [tab.undo], [tab.text, tab.undo])


def _wire_files(tab: NotebookTab, channel: PageChannel) -> None:
    session = tab.session

    @shows_errors
    def save(name: str | None, text: str) -> tuple[Update, str, bool]:
        saved = session.save(name, text)
        return gr.update(choices=session.names(), value=saved), f"Saved '{saved}'.", False

    def open_notebook(name: str | None) -> Updates:
        text = session.open(name)
        opened = {tab.undo: [], tab.confirm: False, tab.delete: gr.update(value="Delete")}
        return opened if text is None else {tab.text: text, **opened}

    @shows_errors
    def delete(name: str | None, confirmed: bool) -> Updates:
        if not confirmed:
            if not name:
                session.delete(name)  # says what to do
            return {tab.stats: f"Click **Confirm delete** to delete '{name}' for good.", tab.confirm: True,
                    tab.delete: gr.update(value="Confirm delete")}
        session.delete(name)
        return {tab.name: gr.update(choices=session.names(), value=None), tab.stats: f"Deleted '{name}'.",
                tab.confirm: False, tab.delete: gr.update(value="Delete")}

    # typed, pasted, deleted or generated: kept for the next page load, sent by the page outside Gradio's events
    # (webui.ui.page_channel), as a Gradio event per key made typing lag (#46)
    channel.saves("notebook", lambda text, name: session.keep_draft(name, text))
    for box in (tab.text, tab.name):
        box.change(None, [tab.name, tab.text], None, js=draft_js("notebook", "name", "text"))
    tab.save.click(save, [tab.name, tab.text], [tab.name, tab.stats, tab.confirm])
    tab.name.input(open_notebook, [tab.name], [tab.text, tab.undo, tab.confirm, tab.delete])
    tab.delete.click(delete, [tab.name, tab.confirm], [tab.name, tab.stats, tab.confirm, tab.delete])


def on_load(tab: NotebookTab) -> tuple[list, object]:
    """(outputs, function): a page (re)load lists the saved notebooks and shows the text and name last there."""
    def load():
        name, text = tab.session.draft()
        return gr.update(choices=tab.session.names(), value=name or None), text
    return [tab.name, tab.text], load
