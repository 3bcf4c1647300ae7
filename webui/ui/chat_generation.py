"""The Chat tab's events that make replies (Impersonate, Send, Regenerate, Continue, an edit, a branch from a
token, Stop) and show them (a message picked in the log, its versions)."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterator

import gradio as gr

from webui.controllers import UserError
from webui.controllers.chat import ChatSession, ChatView
from webui.controllers.parameters import pipeline_text
from webui.ui.characters_panel import chosen
from webui.ui.feedback import Updates, Update, session_key, shows_errors
from webui.ui.live import LiveReplies, announced
from webui.ui.parameters_tab import ParametersTab
from webui.ui.token_view import branch_of
from webui.ui.chat_view import (PANEL, ChatTab, ReplyStream, panel_updates, plain_text, refresh_panels,
                                version_text, view_updates)


def wire_generation(tab: ChatTab, session: ChatSession, params: ParametersTab, live: LiveReplies) -> None:
    """Impersonate, Send, the actions that make a reply (Regenerate, Continue, an edit, a branch) and Stop; a
    message picked in the log, and its versions."""
    streamed = _reply_stream(tab, session, live)
    _wire_impersonate(tab, session, params, live)
    _wire_send(tab, session, params, streamed)
    _wire_reply_actions(tab, session, params, streamed)

    def stop(cid: int | None, request: gr.Request) -> None:
        session.stop(session_key(request, PANEL), cid)  # the reply of the chat shown (and an Impersonate)

    tab.stop.click(stop, [tab.chat_id], None, concurrency_limit=None)
    _wire_selection(tab, session, params)
    _wire_versions(tab, session)


def _reply_stream(tab: ChatTab, session: ChatSession, live: LiveReplies) -> ReplyStream:
    def on_screen(view: ChatView, request: gr.Request) -> bool:
        """Whether the browser tab shows the view's chat now (a reply goes on being written and stored in its chat
        while the tab shows another: only that chat's view gets its text)."""
        return session.shows(session_key(request, PANEL)[0], view.chat_id)

    def streamed(views: Iterator[ChatView], request: gr.Request) -> Iterator[Updates | Update]:
        """ChatViews as updates of the log, the stats and the live token, while their chat is on screen: the log and
        the stats when they change (the first view, a tool call's blocks, the finished reply); a reply's growing text
        on its own stream (webui.ui.live), so that a token costs the page no Gradio update."""
        shown = None
        for token, view in live.following(views):
            if not on_screen(view, request):
                live.put(token, "")
                if shown is not None or not view.replying:  # (Gradio sends the last update again at the end)
                    yield gr.skip()  # nothing changes (the page may follow another reply by now)
                shown = None  # back on screen: the log is sent again
            elif not view.replying:
                yield {tab.chatbot: view.messages, tab.stats: view.stats, tab.live: ""}
            else:
                live.put(token, view.messages[-1]["content"])
                if (view.messages[:-1], view.stats) != shown:
                    shown = (view.messages[:-1], view.stats)
                    yield {tab.chatbot: view.messages[:-1], tab.stats: view.stats, tab.live: token}
    return streamed


def _wire_impersonate(tab: ChatTab, session: ChatSession, params: ParametersTab, live: LiveReplies) -> None:
    """Impersonate writes the user's next message into the message box."""
    @shows_errors
    def impersonate(data: dict, request: gr.Request) -> Iterator[Updates]:
        """The message box and its live token: the text streams into the box on its own stream (webui.ui.live); the box
        ends with the whole text, kept as its draft. The page gets the stream's token before the model starts
        (``announced``), so it follows the stream from the first token even where the model is quicker than the
        page."""
        texts = session.impersonate(data[tab.chat_id], data[tab.system], params.params(data),
                                    session_key(request, PANEL))
        text = None
        for token, piece in live.following(announced(texts)):
            if piece is None:
                yield {impersonating: token}
                continue
            text = piece
            live.put(token, text)
        if text is not None:
            session.library.keep_draft(text)
        yield {impersonating: ""} if text is None else {tab.message: text, impersonating: ""}

    impersonating = gr.Textbox("", visible="hidden", elem_id="chat-impersonate-token", container=False)
    impersonating.change(None, [impersonating], None,
                         js="(token) => window.workbenchLive && window.workbenchLive(token, 'message')")
    tab.impersonate.click(impersonate, {tab.chat_id, tab.system, *params.inputs}, [tab.message, impersonating],
                          concurrency_limit=None)


def _wire_send(tab: ChatTab, session: ChatSession, params: ParametersTab, streamed: ReplyStream) -> None:
    """Send (or Enter in the message box): the message, its attachments and the reply."""
    @shows_errors
    def send(data: dict, request: gr.Request) -> Iterator[Updates | Update]:
        views = session.send(data[tab.chat_id], data[tab.message], data[tab.system], params.params(data),
                             session_key(request, PANEL), data[tab.start], data[tab.characters.mode],
                             chosen(data[tab.characters.character]),  # a new chat: in the panel's mode
                             images=[Path(f).read_bytes() for f in data[tab.images] or []],
                             tools=data[tab.tools.box] or [],
                             documents=[(Path(f).read_bytes(), Path(f).name) for f in data[tab.documents] or []])
        first = next(views)  # the message is stored: clear the box (and its kept draft) and the attachments
        session.library.keep_draft("")
        yield {**view_updates(tab, first, data[tab.search], request), tab.message: "", tab.images: None,
               tab.documents: None}
        yield from streamed(views, request)

    send_inputs: set[gr.blocks.Block] = {tab.message, tab.chat_id, tab.system, tab.search, tab.start, *params.inputs,
                                         tab.characters.mode, tab.characters.character, tab.images,
                                         tab.tools.box, tab.documents}
    for trigger in (tab.send.click, tab.message.submit):
        trigger(send, send_inputs, [*tab.view, tab.message, tab.images, tab.documents, tab.live],
                concurrency_limit=None,
                trigger_mode="multiple").then(**refresh_panels(tab))


def _wire_reply_actions(tab: ChatTab, session: ChatSession, params: ParametersTab, streamed: ReplyStream) -> None:
    """Regenerate, Continue, an edit in the log and a branch from a token: each makes a new version of a reply."""
    @shows_errors
    def regenerate(data: dict, request: gr.Request) -> Iterator[Updates | Update]:
        yield from streamed(session.regenerate(data[tab.chat_id], params.params(data), session_key(request, PANEL),
                                               data[tab.start]), request)

    @shows_errors
    def continue_reply(data: dict, request: gr.Request) -> Iterator[Updates | Update]:
        yield from streamed(session.continue_reply(data[tab.chat_id], params.params(data),
                                                   session_key(request, PANEL)), request)

    def edit(data: dict, edited: gr.EditData, request: gr.Request) -> Iterator[Updates | Update]:
        index = edited.index if isinstance(edited.index, int) else edited.index[0]
        try:
            yield from streamed(session.edit_shown(data[tab.chat_id], index, plain_text(edited.value),
                                             params.params(data), session_key(request, PANEL)), request)
        except UserError as exc:  # the box shows the edit; put back what is stored
            gr.Warning(str(exc))
            yield {tab.chatbot: session.library.view(data[tab.chat_id]).messages
                   if data[tab.chat_id] is not None else []}

    @shows_errors
    def branch(data: dict, request: gr.Request) -> Iterator[Updates | Update]:
        pos, token_id = branch_of(data[tab.token_view])
        yield from streamed(session.branch(data[tab.chat_id], pos, token_id, params.params(data),
                                           session_key(request, PANEL)), request)

    def edited_message(cid: int | None, edited: gr.EditData) -> int | None:
        """The message an edit makes a new version of (a call's block: its reply): the one the line describes."""
        try:
            return session.library.entry(cid, edited.index if isinstance(edited.index, int) else edited.index[0]).index
        except UserError:
            return None

    inputs: set[gr.blocks.Block] = {tab.chat_id, tab.start, tab.token_view, *params.inputs}
    short = [tab.chatbot, tab.stats, tab.live]
    for trigger, handler in ((tab.regenerate.click, regenerate), (tab.continue_.click, continue_reply),
                             (tab.chatbot.edit, edit), (tab.token_view.submit, branch)):
        trigger(handler, inputs, short, concurrency_limit=None, trigger_mode="multiple").then(
            **refresh_panels(tab)).then(
            lambda cid, index: version_text(session, cid, index), [tab.chat_id, tab.selected], [tab.version],
            show_progress="hidden")  # the version it added (the message selected: the one edited)
    tab.chatbot.edit(edited_message, [tab.chat_id], [tab.selected], show_progress="hidden")


def _wire_selection(tab: ChatTab, session: ChatSession, params: ParametersTab) -> None:
    """A message picked in the history (its panels and versions), and Use these parameters."""
    def select_message(cid: int | None, selected: gr.SelectData) -> Updates:
        shown = selected.index if isinstance(selected.index, int) else selected.index[0]
        try:  # a call's block: the reply it belongs to, and the tokens of the turn that wrote the call
            entry = session.library.entry(cid, shown) if cid is not None else None
        except UserError:
            entry = None
        index, step = (entry.index, entry.step if entry.part else None) if entry else (shown, None)
        return {**panel_updates(tab, cid, index, step), tab.selected: index,
                tab.version: version_text(session, cid, index)}

    @shows_errors
    def use_params(cid: int | None) -> Updates:
        used = params.controller.use(session.library.chat_params(cid))
        gr.Info("The Parameters tab now holds this chat's parameters.")
        return {**dict(zip(params.panel.shown, params.panel.show(used))),
                params.preset: gr.update(value=None, info=params.controller.preset_line(None)),
                params.note: "Parameters taken from a chat's last reply.", params.running: pipeline_text(used)}

    tab.chatbot.select(select_message, [tab.chat_id], [*tab.panels, tab.selected, tab.version])
    tab.use_params.click(use_params, [tab.chat_id], [*params.panel.shown, params.preset, params.note, params.running],
                         show_progress="hidden")  # every field of the Parameters tab (feedback.confine_progress)


def _wire_versions(tab: ChatTab, session: ChatSession) -> None:
    """◀ ▶ move between the selected message's versions (the conversation after it follows); a branch copies
    the chat up to it into a new chat."""
    refresh = refresh_panels(tab)

    def step(by: int) -> Callable[[int | None, int | None], Updates]:
        @shows_errors
        def move(cid: int | None, index: int | None) -> Updates:
            if index is None:
                raise UserError("Click a message first to move between its versions.")
            view = session.library.switch_version(cid, index, by)
            return {tab.chatbot: view.messages, tab.stats: view.stats,
                    tab.version: version_text(session, cid, index)}
        return move

    @shows_errors
    def branch(cid: int | None, index: int | None, query: str, request: gr.Request) -> Updates:
        if index is None:
            raise UserError("Click the message to branch from first.")
        return view_updates(tab, session.library.branch_chat(cid, index), query, request)

    for button, by in ((tab.previous, -1), (tab.next_, +1)):
        button.click(step(by), [tab.chat_id, tab.selected], [tab.chatbot, tab.stats, tab.version]).then(**refresh)
    tab.branch_new.click(branch, [tab.chat_id, tab.selected, tab.search], tab.view).then(**refresh)
