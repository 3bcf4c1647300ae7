"""What the Chat tab shows: its components (``ChatTab``) and the updates that show a chat, the panels of a
message and its versions; shared by the modules that wire the tab's events (chat_tab, chat_generation)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterator

import gradio as gr

from webui.controllers.chat import ChatSession, ChatView
from webui.ui.characters_panel import CharactersPanel
from webui.ui.feedback import Updates, Update, session_key
from webui.ui.inspection import InspectorPanel, inspection_views, record_views
from webui.ui.parameters_tab import ParametersTab
from webui.ui.template_panel import TemplatePanel
from webui.ui.token_view import view_value
from webui.ui.tools_panel import ToolsPanel


PANEL = "chat"
NO_SELECTION = "Click a message: its versions, a branch from it, and what the model read show here and below."


@dataclass
class ChatTab:
    chat_id: gr.State
    confirm: gr.State
    new: gr.Button
    search: gr.Textbox
    chat_list: gr.Radio
    title: gr.Textbox
    rename: gr.Button
    delete: gr.Button
    export: gr.Button
    export_tgwui: gr.Button
    import_: gr.UploadButton
    export_file: gr.File
    system: gr.Textbox
    chatbot: gr.Chatbot
    live: gr.Textbox
    selected: gr.State
    version: gr.Markdown
    previous: gr.Button
    next_: gr.Button
    branch_new: gr.Button
    message: gr.Textbox
    images: gr.File
    documents: gr.File
    start: gr.Textbox
    impersonate: gr.Button
    to_notebook: gr.Button
    use_params: gr.Button
    send: gr.Button
    stop: gr.Button
    regenerate: gr.Button
    continue_: gr.Button
    remove_last: gr.Button
    stats: gr.Markdown
    token_view: gr.HTML
    inspector: InspectorPanel
    template: TemplatePanel
    characters: CharactersPanel
    tools: ToolsPanel
    constraint_row: gr.Row
    constraint: gr.Markdown
    constraint_off: gr.Button
    session: ChatSession
    params: ParametersTab

    @property
    def view(self) -> list:
        """The components a ChatView fills (``view_updates``; a new view clears the selected message)."""
        return [self.chatbot, self.chat_id, self.title, self.system, self.chat_list, self.stats, self.selected,
                self.version]

    @property
    def panels(self) -> list:
        """What describes the open chat's last reply: the inspector and the token view."""
        return [*self.inspector.outputs, self.token_view]


def plain_text(content: Any) -> str:
    """Chatbot values may come back as a list of blocks in Gradio 6."""
    if isinstance(content, list):
        return "".join(b.get("text", "") if isinstance(b, dict) else str(b) for b in content)
    return str(content or "")


def view_updates(tab: ChatTab, view: ChatView, query: str, request: gr.Request | None) -> Updates:
    """``ChatTab.view``: the chat, and the past-chats list with it selected; the browser tab of ``request`` shows
    this chat from now on (a reply still streaming elsewhere stays off its view)."""
    session = tab.session
    session.show(session_key(request, PANEL)[0], view.chat_id)
    listed = gr.update(choices=session.library.listed(query), value=view.chat_id)
    return {tab.chatbot: view.messages, tab.chat_id: view.chat_id, tab.title: view.title,
            tab.system: view.system_prompt, tab.chat_list: listed, tab.stats: view.stats, tab.selected: None,
            tab.version: NO_SELECTION}


def panel_updates(tab: ChatTab, chat_id: int | None, index: int | None = None, step: int | None = None) -> Updates:
    """``ChatTab.panels`` for message ``index`` (None: the last reply; ``step``: the token view shows that tool
    step's turn, whose block was clicked)."""
    session, inspector = tab.session, tab.inspector
    seen = session.inspect(chat_id, index)
    rendered, tokens, note = inspection_views(seen.seen) if seen.seen else ("", None, seen.note)
    if seen.seen and seen.note:  # e.g. the oldest messages left out to fit the context
        note = f"{note} · {seen.note}"
    rows, branchable = session.last_tokens(chat_id, index, step)
    record = record_views(seen.record, session.services.config.api_port)
    return {inspector.note: f"{seen.which} · {note}" if seen.which else "", inspector.rendered: rendered,
            inspector.tokens: tokens, inspector.record_json: record[0], inspector.record_curl: record[1],
            inspector.record_py: record[2], tab.token_view: view_value(rows, branchable)}


ReplyStream = Callable[[Iterator[ChatView], gr.Request], Iterator[Updates | Update]]
"""ChatViews of a reply being made -> the updates of the log, the stats and the live token (``_reply_stream``)."""


def refresh_panels(tab: ChatTab) -> dict[str, Any]:
    """An event's ``.then(**...)`` that shows the panels of the chat's last reply."""
    return dict(fn=lambda cid: panel_updates(tab, cid), inputs=[tab.chat_id], outputs=tab.panels,
                show_progress="hidden")


def version_text(session: ChatSession, chat_id: int | None, index: int | None) -> str:
    return session.library.describe(chat_id, index) or NO_SELECTION


def shown_updates(tab: ChatTab, view: ChatView, query: str, request: gr.Request | None) -> Updates:
    """Another chat shown: Delete asks again (a new update each time: Gradio consumes it)."""
    return {**view_updates(tab, view, query, request), tab.confirm: False, tab.delete: gr.update(value="Delete")}


def shown_outputs(tab: ChatTab) -> list[gr.blocks.Block]:
    """The components ``shown_updates`` updates (and Delete's question)."""
    return [*tab.view, tab.confirm, tab.delete]
