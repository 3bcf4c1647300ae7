"""The Chat tab's "Character and mode" panel: layout and wiring over CharactersController (which holds the behaviour).

The mode radio and the character dropdown show the open chat's mode and character (a new chat: the ones the next new
chat starts with) and change them; the editor shows the chosen character; the preview is the open chat's prompt in
the chosen mode, refreshed when the mode, the character, the command or the chat shown changes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gradio as gr

from webui.chat.modes import INSTRUCT, MODES
from webui.controllers import UserError
from webui.controllers.chat import ChatSession
from webui.controllers.characters import CharactersController, CharacterView, ModePreview
from webui.ui.feedback import shows_errors
from webui.ui.save_order import SaveOrder

NO_CHARACTER = "(no character)"


@dataclass
class CharactersPanel:
    mode: gr.Radio
    character: gr.Dropdown
    name: gr.Textbox
    greeting: gr.Textbox
    context: gr.Textbox
    user_name: gr.Textbox
    user_bio: gr.Textbox
    picture: gr.Image
    new: gr.Button
    save: gr.Button
    duplicate: gr.Button
    delete: gr.Button
    confirm: gr.State
    import_: gr.UploadButton
    export_yaml: gr.Button
    export_card: gr.Button
    export_file: gr.File
    start: gr.Button
    command: gr.Textbox
    command_note: gr.Markdown
    note: gr.Markdown
    preview: gr.Code
    stops: gr.Markdown
    controller: CharactersController

    @property
    def editor(self) -> list:
        """What :meth:`show` fills (a character shown disarms Delete)."""
        return [self.character, self.name, self.greeting, self.context, self.user_name, self.user_bio, self.picture,
                self.note, self.confirm, self.delete]

    def show(self, view: CharacterView) -> dict[gr.blocks.Block, Any]:
        """The ``editor``'s values, by component."""
        c = view.character
        choices = [NO_CHARACTER, *view.names]
        return {self.character: gr.update(choices=choices, value=c.name if c else NO_CHARACTER),
                self.name: c.name if c else "", self.greeting: c.greeting if c else "",
                self.context: c.context if c else "", self.user_name: c.user_name if c else "You",
                self.user_bio: c.user_bio if c else "", self.picture: str(view.picture) if view.picture else None,
                self.note: view.note, self.confirm: False, self.delete: gr.update(value="Delete")}


def chosen(character: str | None) -> str | None:
    """The dropdown's value as a character name (None: no character)."""
    return None if not character or character == NO_CHARACTER else character


def create_characters_panel(session: ChatSession) -> CharactersPanel:
    controller = CharactersController(session)
    with gr.Accordion("Character and mode", open=False, elem_id="chat-character-panel"):
        with gr.Row():
            mode = gr.Radio(choices=list(MODES), value=INSTRUCT, label="Mode", elem_id="chat-mode", scale=2,
                            info="instruct: the model's template · chat: a 'Name: text' transcript (base models) · "
                                 "chat-instruct: the template wraps a command around the transcript. The open chat's "
                                 "(a new chat: the next one's).")
            character = gr.Dropdown(choices=[NO_CHARACTER, *controller.listed()], value=NO_CHARACTER, scale=2,
                                    label="Character", elem_id="chat-character",
                                    info="The open chat's (a new chat: the next one's); its fields are below.")
        with gr.Row(equal_height=False):
            with gr.Column(scale=3):
                name = gr.Textbox(label="Name", elem_id="chat-character-name")
                greeting = gr.Textbox(label="Greeting (the first message of a new chat)", lines=2, max_lines=8,
                                      elem_id="chat-character-greeting")
                context = gr.Textbox(label="Context (description and example dialogue; {{char}} and {{user}} are "
                                           "filled)", lines=3, max_lines=12, elem_id="chat-character-context")
                with gr.Row():
                    user_name = gr.Textbox(label="Your name", value="You", elem_id="chat-character-user-name")
                    user_bio = gr.Textbox(label="Your description", elem_id="chat-character-user-bio")
            with gr.Column(scale=1, min_width=160):
                picture = gr.Image(label="Picture", type="filepath", height=180, elem_id="chat-character-picture",
                                   sources=["upload"])
        with gr.Row():
            new = gr.Button("New character", size="sm", elem_id="chat-character-new")
            save = gr.Button("Save character", size="sm", variant="primary", elem_id="chat-character-save")
            duplicate = gr.Button("Duplicate", size="sm", elem_id="chat-character-duplicate")
            delete = gr.Button("Delete", size="sm", variant="stop", elem_id="chat-character-delete")
        with gr.Row():
            import_ = gr.UploadButton("Import (YAML, JSON or PNG card)", file_types=[".yaml", ".yml", ".json", ".png"],
                                      size="sm", elem_id="chat-character-import")
            export_yaml = gr.Button("Export YAML", size="sm", elem_id="chat-character-export-yaml")
            export_card = gr.Button("Export card", size="sm", elem_id="chat-character-export-card")
        export_file = gr.File(label="Exported character", visible=False, elem_id="chat-character-export-file")
        note = gr.Markdown("", elem_id="chat-character-note")
        start = gr.Button("New chat with this character", variant="primary", elem_id="chat-character-start")
        command = gr.Textbox(value=controller.command(), lines=3, max_lines=10, elem_id="chat-instruct-command",
                             label="chat-instruct command (<|character|>: the character's name, <|prompt|>: the chat)",
                             info="Saved as typed; chat-instruct replies use it (empty: text-generation-webui's "
                                  "default).")
        command_note = gr.Markdown("", elem_id="chat-instruct-command-note")
        preview = gr.Code(language=None, interactive=False, elem_id="chat-mode-preview",
                          label="What the model would read in this mode (the open chat, your message)")
        stops = gr.Markdown("", elem_id="chat-mode-stops")
    return CharactersPanel(mode, character, name, greeting, context, user_name, user_bio, picture, new, save,
                           duplicate, delete, gr.State(False), import_, export_yaml, export_card, export_file, start,
                           command, command_note, note, preview, stops, controller)


def preview_values(seen: ModePreview) -> tuple[str, str]:
    stops = ", ".join(repr(s) for s in seen.stops) or "none"
    return seen.prompt, f"Stops in this mode: {stops}" + (f" · {seen.note}" if seen.note else "")


def wire_characters_panel(panel: CharactersPanel, chat_id: gr.State, message: gr.Textbox, system: gr.Textbox) -> None:
    c = panel.controller

    def refreshed(cid: int | None, mode: str, character: str | None, typed: str, system_prompt: str,
                  command: str) -> tuple:
        """The preview follows the mode, the character, the command and the chat shown (never an older one)."""
        try:
            return preview_values(c.preview(cid, mode, chosen(character), typed, system_prompt, command))
        except UserError as exc:
            return f"(No preview: {exc})", ""

    follows: dict[str, Any] = dict(
        fn=refreshed, inputs=[chat_id, panel.mode, panel.character, message, system, panel.command],
        outputs=[panel.preview, panel.stops], show_progress="hidden", trigger_mode="always_last")

    def apply(cid: int | None, mode: str, character: str | None) -> tuple[str, str, str]:
        """(mode, character, note): the open chat's next replies in ``mode`` as ``character`` (a new chat: the next
        one starts so); one that cannot be used leaves the chat as it was, and the panel shows that."""
        if cid is None:  # (where the character's greeting opens a chat, the Chat tab opens it: start_on_choice)
            name = chosen(character)
            opens = "A new chat opens" if c.session.mode_of(mode, name).greeting() else "The next new chat starts"
            return mode, character or NO_CHARACTER, " ".join(filter(None, (
                f"{opens} in **{mode}** mode" + (f" with **{name}**." if name else "."), c.uses(mode, name))))
        try:
            view, note = c.set_chat_mode(cid, mode, chosen(character)), "This chat is now in"
        except UserError as exc:
            gr.Warning(str(exc))
            view, note = c.session.library.view(cid), f"Not changed ({exc}); this chat stays in"
        with_character = f" with **{view.character}**." if view.character else "."
        return view.mode, view.character or NO_CHARACTER, " ".join(filter(None, (
            f"{note} **{view.mode}** mode{with_character}", c.uses(view.mode, view.character))))

    @shows_errors
    def pick(cid: int | None, mode: str, character: str | None) -> dict[gr.blocks.Block, Any]:
        c.open(chosen(character))  # one that is gone: said, and nothing changes
        mode, character, note = apply(cid, mode, character)
        return {**panel.show(c.open(chosen(character))), panel.mode: mode, panel.note: note}

    @shows_errors
    def delete(character: str | None, confirmed: bool) -> dict[gr.blocks.Block, Any]:
        name = chosen(character)
        if name and not confirmed:
            return {panel.note: f"Click **Confirm delete** to delete '{name}' for good.", panel.confirm: True,
                    panel.delete: gr.update(value="Confirm delete")}
        return panel.show(c.delete(name, True))

    def export(kind: str) -> Any:
        return shows_errors(lambda character: gr.update(value=str(c.export(chosen(character), kind)), visible=True))

    @shows_errors
    def import_file(file: Any) -> dict[gr.blocks.Block, Any]:  # file: a path, or has .name
        return panel.show(c.import_file(file if isinstance(file, str) else file.name))

    fields = [panel.name, panel.greeting, panel.context, panel.user_name, panel.user_bio]
    choice = [chat_id, panel.mode, panel.character]
    panel.mode.input(apply, choice, [panel.mode, panel.character, panel.note]).then(**follows)
    panel.character.input(pick, choice, [panel.mode, *panel.editor]).then(**follows)
    panel.new.click(lambda: panel.show(c.open(None)), None, panel.editor).then(**follows)
    panel.save.click(shows_errors(lambda original, *typed: panel.show(c.save(chosen(original), *typed))),
                     [panel.character, *fields], panel.editor).then(**follows)
    panel.duplicate.click(shows_errors(lambda character: panel.show(c.duplicate(chosen(character)))),
                          [panel.character], panel.editor).then(**follows)
    panel.delete.click(delete, [panel.character, panel.confirm], panel.editor).then(**follows)
    panel.import_.upload(import_file, [panel.import_], panel.editor).then(**follows)
    panel.export_yaml.click(export("yaml"), [panel.character], [panel.export_file])
    panel.export_card.click(export("card"), [panel.character], [panel.export_file])
    panel.picture.upload(shows_errors(lambda character, path: panel.show(c.set_picture(chosen(character), path))),
                         [panel.character, panel.picture], panel.editor)
    panel.command.input(**follows)
    SaveOrder().wire(panel.command.input, lambda d: c.save_command(d[panel.command]), {panel.command},
                     [panel.command_note])  # as typed: the last change made is the one kept
    chat_id.change(lambda cid: chat_values(panel, cid) or gr.skip(), [chat_id], [panel.mode, *panel.editor]).then(
        **follows)


def chat_values(panel: CharactersPanel, chat_id: int | None) -> dict[gr.blocks.Block, Any]:
    """``[mode, *editor]`` by component: the chat's mode and character (a new chat: none, what the panel holds
    stays)."""
    if chat_id is None:
        return {}
    view = panel.controller.session.library.view(chat_id)
    try:  # instruct: the note says the character is not used
        shown = {**panel.show(panel.controller.open(view.character)),
                 panel.note: panel.controller.uses(view.mode, view.character)}
    except UserError as exc:  # its character was deleted: say so, show none
        shown = {**panel.show(panel.controller.open(None)), panel.note: f"This chat's character: {exc}"}
    return {panel.mode: view.mode, **shown}


def start_values(panel: CharactersPanel, mode: str, character: str | None, system_prompt: str) -> Any:
    """A new chat in ``mode`` with ``character`` (in chat and chat-instruct, its greeting first): the ChatView to
    show."""
    return panel.controller.start_chat(mode, chosen(character), system_prompt)


def new_chat_values(panel: CharactersPanel, mode: str, character: str | None, system_prompt: str) -> Any:
    """New chat with the panel's ``mode`` and ``character``: the ChatView to show (one opened by the character's
    greeting where the mode uses it, else an empty one)."""
    return panel.controller.new_chat(mode, chosen(character), system_prompt)


SHOW_LOG = "() => document.getElementById('chat-log')?.scrollIntoView({block: 'nearest'})"
"""Brings the chat log into view (a chat started from the panel, below it, opens with its greeting there)."""

