"""Chat tab: layout and wiring over ChatSession (webui.controllers.chat), which holds the behaviour."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import gradio as gr

from webui.controllers import UserError
from webui.chat.modes import INSTRUCT
from webui.controllers.chat import ChatSession, ChatView
from webui.controllers.chat_library import IMAGE_FILES
from webui.controllers.parameters import constraint_note, pipeline_text, values_from_params
from webui.engine.params import specs
from webui.images import image_placeholder
from webui.controllers.generation import ActiveRequests
from webui.services import Services
from webui.ui.characters_panel import CharactersPanel, chat_values, chosen, create_characters_panel
from webui.ui.characters_panel import SHOW_LOG, new_chat_values, preview_values, start_values, wire_characters_panel
from webui.ui.feedback import Updates, Update, opens, session_key, shows_errors
from webui.ui.live import LiveReplies, announced
from webui.ui.page_channel import PageChannel, draft_js
from webui.ui.inspection import InspectorPanel, create_inspector_panel, inspection_views, record_views
from webui.ui.parameters_tab import ParametersTab
from webui.ui.save_order import SaveOrder
from webui.ui.template_panel import TemplatePanel, create_template_panel, wire_template_panel
from webui.ui.template_panel import on_load as template_on_load
from webui.ui.token_view import branch_of, create_token_view, view_value
from webui.ui.tools_panel import ToolsPanel, create_tools_panel, panel_values, wire_tools_panel

PANEL = "chat"
PASTE_IMAGES_JS = """() => document.addEventListener("paste", (event) => {
    const box = event.target.closest && event.target.closest("#chat-message");
    const input = document.querySelector("#chat-images input[type=file]");
    const files = [...((event.clipboardData && event.clipboardData.files) || [])]
        .filter((file) => file.type.startsWith("image/"));
    if (!box || !input || !files.length) return;
    event.preventDefault();  // an image pasted into the message box is attached to the message
    const attached = new DataTransfer();
    files.forEach((file) => attached.items.add(file));
    input.files = attached.files;
    input.dispatchEvent(new Event("change", {bubbles: true}));
})"""
"""Page script: images pasted into the message box go to its image input (Gradio's File takes no paste)."""
IMAGES_LABEL = "Images for the message (vision models)"
NO_SELECTION = "Click a message: its versions, a branch from it, and what the model read show here and below."

"""A handler's outputs by component: those left out keep what they show (Gradio skips them)."""


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


def _chat_list_column() -> dict:
    new = gr.Button("New chat", variant="primary", elem_id="chat-new")
    search = gr.Textbox(label="Search chats", placeholder="title or content", elem_id="chat-search")
    chat_list = gr.Radio(choices=[], label="Past chats", elem_id="chat-list")
    title = gr.Textbox(label="Title", elem_id="chat-title")
    with gr.Row():
        rename = gr.Button("Rename", size="sm", elem_id="chat-rename")
        delete = gr.Button("Delete", size="sm", variant="stop", elem_id="chat-delete")
    with gr.Row():
        export = gr.Button("Export JSON", size="sm", elem_id="chat-export")
        import_ = gr.UploadButton("Import JSON", file_types=[".json"], size="sm", elem_id="chat-import")
    export_tgwui = gr.Button("Export for text-generation-webui", size="sm", elem_id="chat-export-tgwui")
    export_file = gr.File(label="Exported chat", visible=False, elem_id="chat-export-file")
    return dict(new=new, search=search, chat_list=chat_list, title=title, rename=rename, delete=delete,
                export=export, export_tgwui=export_tgwui, import_=import_, export_file=export_file)


def _conversation_column(services: Services, session: ChatSession) -> dict:
    system = gr.Textbox(label="System prompt", lines=1, max_lines=8, elem_id="chat-system",
                        placeholder="(empty: the model's own default)",
                        info="This chat's own. Typed in a new chat, it is the one new chats start with.")
    template = create_template_panel(services)
    # the log leaves room for the message box and Send below it, even in a short or narrow window: what lies above
    # and below the log is of fixed height (about 520 px at 800 px wide; more where fallback fonts wrap the status
    # line), so the log takes the window's height less that much, not a share of it, between 240 and 460 px
    # ungrouped: a reply's tool calls are blocks of their own, each with its own Edit (its arguments, its result)
    chatbot = gr.Chatbot(elem_id="chat-log", height="min(460px, max(240px, calc(100vh - 600px)))", editable="all", buttons=["copy"],
                         sanitize_html=True, group_consecutive_messages=False)
    # the token of the reply being written: the page follows its text on a stream of its own (webui.ui.live)
    live = gr.Textbox("", visible="hidden", elem_id="chat-live-token", container=False)
    stats = gr.Markdown("", elem_id="chat-stats")
    with gr.Row(equal_height=False):
        # lines=1 (growing to max_lines): Gradio sends on Enter and keeps Shift+Enter for a new line
        message = gr.Textbox(label="Message", placeholder="Type a message; Enter sends, Shift+Enter adds a line",
                             lines=1, max_lines=10, elem_id="chat-message", scale=5)
        with gr.Column(scale=1, min_width=110):
            send = gr.Button("Send", variant="primary", elem_id="chat-send")
            stop = gr.Button("Stop", variant="stop", elem_id="chat-stop")
    with gr.Row():
        images = gr.File(label=IMAGES_LABEL, file_count="multiple", file_types=["image"], height=100,
                         elem_id="chat-images")
        documents = gr.File(label="Documents for the message: text, Markdown, code, CSV, PDF, .docx (the model "
                                  "reads their text)", file_count="multiple", height=150, elem_id="chat-documents")
    with gr.Row(visible=False, elem_id="chat-constraint-row") as constraint_row:
        constraint = gr.Markdown("", elem_id="chat-constraint")
        constraint_off = gr.Button("Turn the constraint off", size="sm", scale=0, min_width=200,
                                   elem_id="chat-constraint-off")
    with gr.Row():
        regenerate = gr.Button("Regenerate", size="sm", elem_id="chat-regenerate")
        continue_ = gr.Button("Continue", size="sm", elem_id="chat-continue")
        remove_last = gr.Button("Remove last", size="sm", elem_id="chat-remove-last")
    with gr.Row(equal_height=False):
        version = gr.Markdown(NO_SELECTION, elem_id="chat-version")
        previous = gr.Button("◀ previous version", size="sm", elem_id="chat-version-prev", scale=0, min_width=140)
        next_ = gr.Button("next version ▶", size="sm", elem_id="chat-version-next", scale=0, min_width=140)
        branch_new = gr.Button("Branch to a new chat", size="sm", elem_id="chat-branch-new", scale=0, min_width=170)
    with gr.Row():
        start = gr.Textbox(label="Start reply with", placeholder="(the model continues from this text)", lines=1,
                           scale=3, elem_id="chat-start")
        impersonate = gr.Button("Impersonate", size="sm", scale=1, elem_id="chat-impersonate")
        to_notebook = gr.Button("Send to Notebook", size="sm", scale=1, elem_id="chat-to-notebook")
        use_params = gr.Button("Use this chat's parameters", size="sm", scale=1, elem_id="chat-use-params")
    characters = create_characters_panel(session)  # below the box: the log and Send stay in view
    tools = create_tools_panel(session)
    with gr.Accordion("Tokens of the reply (the last, or the one clicked)", open=False, elem_id="chat-tokens-panel"):
        token_view = create_token_view("chat-tokens")
    with gr.Accordion("Prompt and reproduce record (click a message; default: the last reply)",
                      open=False, elem_id="chat-inspect-panel"):
        inspector = create_inspector_panel("chat", with_record=True)
    return dict(system=system, chatbot=chatbot, live=live, version=version, previous=previous, next_=next_,
                branch_new=branch_new, message=message, images=images, documents=documents, start=start,
                impersonate=impersonate,
                to_notebook=to_notebook, use_params=use_params, send=send, stop=stop, regenerate=regenerate,
                continue_=continue_, remove_last=remove_last, stats=stats, token_view=token_view,
                inspector=inspector, template=template, characters=characters, tools=tools,
                constraint_row=constraint_row,
                constraint=constraint, constraint_off=constraint_off)


def create_chat_tab(services: Services, params: ParametersTab, active: ActiveRequests,
                    live: LiveReplies, channel: PageChannel | None = None) -> ChatTab:
    session = ChatSession(services, active)
    # the log's images and documents are served where they are (named by their content, written once): not read,
    # hashed and copied into Gradio's cache again with each view of a streaming reply
    gr.set_static_paths([IMAGE_FILES])
    with gr.Row():
        with gr.Column(scale=1, min_width=240):
            left = _chat_list_column()
        with gr.Column(scale=4):
            right = _conversation_column(services, session)
    tab = ChatTab(chat_id=gr.State(None), confirm=gr.State(False), selected=gr.State(None), session=session,
                  params=params, **left, **right)
    _wire_generation(tab, session, params, live)
    tab.live.change(None, [tab.live], None, js="(token) => window.workbenchLive && window.workbenchLive(token)")
    _wire_constraint(tab)
    _wire_chat_list(tab, session)
    # the message box, typed and not sent, is kept as typed (a reload shows it; Send clears it): the page sends it
    # outside Gradio's events (webui.ui.page_channel), as a Gradio event per key made typing lag (#46)
    (channel or PageChannel()).saves("chat", lambda text, _name: session.library.keep_draft(text))
    tab.message.change(None, [tab.message], None, js=draft_js("chat", "text"))
    wire_template_panel(tab.template, tab.chat_id, tab.message, tab.system)
    wire_characters_panel(tab.characters, tab.chat_id, tab.message, tab.system)
    wire_tools_panel(tab.tools, session, tab.chat_id)
    return tab


def images_box(services: Services) -> Update:
    """The image box as the model in use takes images: a text-only model's says so and takes none."""
    model = services.loaded
    if model is not None and not image_placeholder(model):
        return gr.update(interactive=False, label=f"Images: {model.name} reads no images (a text-only model); "
                                                 "load a vision-language model to attach them")
    return gr.update(interactive=True, label=IMAGES_LABEL)


def wire_model_in_use(tab: ChatTab, picker: gr.Dropdown) -> None:
    """The model in use changed (picked, loaded or unloaded): the image box follows it."""
    picker.change(lambda: images_box(tab.session.services), None, [tab.images], show_progress="hidden")


def constraint_updates(tab: ChatTab, held: str) -> Updates:
    """The constraint row: shown, saying what replies are held to, while a constraint is on."""
    note = constraint_note(held or "")
    return {tab.constraint_row: gr.update(visible=bool(note)), tab.constraint: note}


def _wire_constraint(tab: ChatTab) -> None:
    """The Chat tab shows an output constraint that is on, and turns it off in one click (the Parameters tab's
    form then says none, and that is saved as any change there is)."""
    held = tab.params.controls["structured_outputs"]
    held.change(lambda value: constraint_updates(tab, value), [held], [tab.constraint_row, tab.constraint],
                show_progress="hidden")
    tab.constraint_off.click(lambda: ("", *tab.params.panel.show_constraint("")), None,
                             [held, tab.params.panel.form, tab.params.panel.text])


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


def _wire_generation(tab: ChatTab, session: ChatSession, params: ParametersTab, live: LiveReplies) -> None:
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
    tab.use_params.click(use_params, [tab.chat_id], [*params.panel.shown, params.preset, params.note, params.running])


def version_text(session: ChatSession, chat_id: int | None, index: int | None) -> str:
    return session.library.describe(chat_id, index) or NO_SELECTION


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


def _wire_chat_list(tab: ChatTab, session: ChatSession) -> None:
    """The past chats: opening, searching, renaming, deleting, exporting and importing one; a new chat; the
    last message removed and the system prompt saved."""
    _wire_past_chats(tab, session)
    _wire_new_chat(tab)
    _wire_chat_edits(tab, session)


def shown_updates(tab: ChatTab, view: ChatView, query: str, request: gr.Request | None) -> Updates:
    """Another chat shown: Delete asks again (a new update each time: Gradio consumes it)."""
    return {**view_updates(tab, view, query, request), tab.confirm: False, tab.delete: gr.update(value="Delete")}


def shown_outputs(tab: ChatTab) -> list[gr.blocks.Block]:
    """The components ``shown_updates`` updates (and Delete's question)."""
    return [*tab.view, tab.confirm, tab.delete]


def _wire_past_chats(tab: ChatTab, session: ChatSession) -> None:
    """The list of past chats and what is done to the chat shown: open, search, rename, delete, export, import."""
    @shows_errors
    def open_chat(cid: int | None, query: str, request: gr.Request) -> Updates:
        return shown_updates(tab, session.library.view(cid), query, request)

    @shows_errors
    def rename(cid: int | None, title: str, query: str, request: gr.Request) -> Updates:
        return shown_updates(tab, session.library.rename(cid, title), query, request)

    @shows_errors
    def delete(cid: int | None, confirmed: bool, query: str, request: gr.Request) -> Updates:
        if not confirmed:
            return {tab.stats: f"Click **Confirm delete** to delete '{session.library.title(cid)}' for good.",
                    tab.confirm: True, tab.delete: gr.update(value="Confirm delete")}
        return shown_updates(tab, session.library.delete(cid), query, request)

    def export(tgwui: bool) -> Callable[[int | None], Update]:
        return shows_errors(lambda cid: gr.update(value=str(session.library.export(cid, tgwui)), visible=True))

    @shows_errors
    def import_chat(file: Any, query: str, request: gr.Request) -> Updates:  # file: a path, or has .name
        path = file if isinstance(file, str) else file.name
        return shown_updates(tab, session.library.import_file(path), query, request)

    with_confirm = shown_outputs(tab)
    tab.chat_list.input(open_chat, [tab.chat_list, tab.search], with_confirm).then(**refresh_panels(tab))
    tab.search.change(lambda q: gr.update(choices=session.library.listed(q)), [tab.search], [tab.chat_list],
                      show_progress="hidden")
    tab.rename.click(rename, [tab.chat_id, tab.title, tab.search], with_confirm)
    tab.delete.click(delete, [tab.chat_id, tab.confirm, tab.search], with_confirm).then(**refresh_panels(tab))
    tab.export.click(export(False), [tab.chat_id], [tab.export_file])
    tab.export_tgwui.click(export(True), [tab.chat_id], [tab.export_file])
    tab.import_.upload(import_chat, [tab.import_, tab.search], with_confirm).then(**refresh_panels(tab))


def _wire_new_chat(tab: ChatTab) -> None:
    """New chat, and the characters panel's mode and character: a new chat, with the character's greeting first
    where the mode uses one."""
    chars = tab.characters

    @shows_errors
    def new_chat(mode: str, character: str | None, system: str, query: str, request: gr.Request) -> Updates:
        """In a mode that uses the panel's character, its greeting opens the new chat (shown and stored now)."""
        view = new_chat_values(chars, mode, character, system)
        return shown_updates(tab, view, query, request)

    def start_on_choice(cid: int | None, mode: str, character: str | None, system: str, query: str,
                        request: gr.Request) -> Updates | Update:
        """A mode or character chosen for a new chat (none open yet): where its greeting opens a chat, it does."""
        try:
            view = new_chat_values(chars, mode, character, system) if cid is None else None
        except UserError:  # (the panel says why)
            view = None
        if view is None or view.chat_id is None:
            return gr.skip()
        return shown_updates(tab, view, query, request)

    @shows_errors
    def start_with(mode: str, character: str | None, system: str, query: str, request: gr.Request) -> Updates:
        view = start_values(chars, mode, character, system)
        return shown_updates(tab, view, query, request)

    with_confirm = shown_outputs(tab)
    tab.new.click(new_chat, [chars.mode, chars.character, tab.system, tab.search], with_confirm).then(
        **refresh_panels(tab))
    for chosen_now in (chars.mode.input, chars.character.input):
        chosen_now(start_on_choice, [tab.chat_id, chars.mode, chars.character, tab.system, tab.search],
                   with_confirm).then(**refresh_panels(tab))
    chars.start.click(start_with, [chars.mode, chars.character, tab.system, tab.search], with_confirm).then(
        **refresh_panels(tab)).then(None, js=SHOW_LOG)  # the panel is below the log: its greeting comes into view


def _wire_chat_edits(tab: ChatTab, session: ChatSession) -> None:
    """Remove last (the message comes back into the box) and the system prompt, saved as typed."""
    # no .clear listener: the log's own trash icon (shown only with one) cleared the view and deleted nothing
    @shows_errors
    def remove_last(cid: int | None, typed: str) -> Updates:
        view, box = session.library.remove_last(cid, typed)
        return {tab.chatbot: view.messages, tab.stats: view.stats, **({tab.message: box} if box != typed else {})}

    tab.remove_last.click(remove_last, [tab.chat_id, tab.message], [tab.chatbot, tab.stats, tab.message]).then(
        **refresh_panels(tab))
    SaveOrder().wire(tab.system.change, lambda d: session.library.save_system(d[tab.chat_id], d[tab.system]),
                     {tab.chat_id, tab.system}, key=lambda d: d[tab.chat_id])  # as typed, for the chat it was in


def wire_notebook(tab: ChatTab, notebook_text: gr.Textbox, opener: gr.Textbox) -> None:
    """"Send to Notebook": the chat as the model reads it goes into the Notebook's text, and the Notebook opens."""
    def to_notebook(cid: int | None) -> Updates:
        return {notebook_text: tab.session.as_text(cid), opener: opens("notebook")}
    tab.to_notebook.click(shows_errors(to_notebook), [tab.chat_id], [notebook_text, opener])


def on_load(tab: ChatTab) -> tuple[list, Any]:
    """(outputs, function): a page (re)load opens the most recent chat, with its system prompt, mode and character
    (and that mode's prompt preview)."""
    template_outputs, template_values = template_on_load(tab.template)
    chars = tab.characters

    def load(request: gr.Request) -> Updates:
        view = tab.session.library.latest()
        held = dict(zip(specs(), values_from_params(tab.params.controller.saved()[0])))["structured_outputs"]
        command = chars.controller.command()
        mode, character = (view.mode, view.character) if view.chat_id is not None else (INSTRUCT, None)
        try:
            seen = preview_values(chars.controller.preview(view.chat_id, mode, character, command=command))
        except UserError as exc:
            seen = (f"(No preview: {exc})", "")
        return {**view_updates(tab, view, "", request), tab.message: tab.session.library.draft(),
                tab.images: images_box(tab.session.services), **constraint_updates(tab, held),
                **panel_updates(tab, view.chat_id), **dict(zip(template_outputs, template_values())),
                **chat_values(chars, view.chat_id),
                chars.preview: seen[0], chars.stops: seen[1], chars.command: command,
                **dict(zip(tab.tools.shown, panel_values(tab.session, view.chat_id, tab.tools.controller)))}
    return [*tab.view, tab.message, tab.images, tab.constraint_row, tab.constraint, *tab.panels, *template_outputs,
            chars.mode, *chars.editor, chars.preview, chars.stops, chars.command, *tab.tools.shown], load
