"""Chat tab: layout and wiring over ChatSession (webui.controllers.chat), which holds the behaviour."""

from __future__ import annotations

from typing import Any, Callable

import gradio as gr

from webui.controllers import UserError
from webui.chat.modes import INSTRUCT
from webui.controllers.chat import ChatSession
from webui.controllers.chat_library import IMAGE_FILES
from webui.controllers.parameters import constraint_note, values_from_params
from webui.engine.params import specs
from webui.images import image_placeholder
from webui.controllers.generation import ActiveRequests
from webui.services import Services
from webui.ui.characters_panel import chat_values, create_characters_panel
from webui.ui.characters_panel import SHOW_LOG, new_chat_values, preview_values, start_values, wire_characters_panel
from webui.ui.feedback import Updates, Update, opens, shows_errors
from webui.ui.live import LiveReplies
from webui.ui.page_channel import PageChannel, draft_js
from webui.ui.inspection import create_inspector_panel
from webui.ui.parameters_tab import ParametersTab
from webui.ui.save_order import SaveOrder
from webui.ui.template_panel import create_template_panel, wire_template_panel
from webui.ui.template_panel import on_load as template_on_load
from webui.ui.token_view import create_token_view
from webui.ui.tools_panel import create_tools_panel, panel_values, wire_tools_panel
from webui.ui.chat_generation import wire_generation
from webui.ui.chat_view import (NO_SELECTION, ChatTab, panel_updates, refresh_panels, shown_outputs, shown_updates,
                                view_updates)

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
    wire_generation(tab, session, params, live)
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


def _wire_chat_list(tab: ChatTab, session: ChatSession) -> None:
    """The past chats: opening, searching, renaming, deleting, exporting and importing one; a new chat; the
    last message removed and the system prompt saved."""
    _wire_past_chats(tab, session)
    _wire_new_chat(tab)
    _wire_chat_edits(tab, session)


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
