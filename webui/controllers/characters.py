"""CharactersController: characters and chat modes as the Chat tab edits and uses them, with no Gradio in it.

Characters (list, open, save, delete with confirmation, duplicate, import, export, picture) live in
``services.characters`` (webui/chat/characters.py); a chat's mode and character are stored with the chat and read by
:class:`webui.controllers.chat.ChatSession` for every reply. ``preview`` is the prompt the model would read in a
mode (the chat so far and the message being typed), with its tokens for the prompt inspector.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from webui.chat import ChatPromptError, chat_messages, render_chat_prompt
from webui.chat.characters import Character, CharacterError, check_picture_size, check_size, parse_character
from webui.chat.modes import CHAT_INSTRUCT, DEFAULT_COMMAND, INSTRUCT, MODES, ChatMode, ModeError
from webui.controllers.chat import ChatSession, turns_of
from webui.controllers.chat_modes import greeting_turns
from webui.controllers.chat_library import ChatView
from webui.controllers.errors import UserError
from webui.insight import InsightUnavailable, PromptInspection, inspect_rendered
from webui.fsutil import scratch_folder

EXPORTS = ("yaml", "card")


@dataclass(frozen=True)
class CharacterView:
    """What the character editor shows."""

    names: list[str] = field(default_factory=list)
    """Every character, sorted."""
    character: Character | None = None
    """The one open (None: a new one, not saved yet)."""
    picture: Path | None = None
    note: str = ""


@dataclass(frozen=True)
class ModePreview:
    """The prompt of a chat in a mode, as the model would read it."""

    mode: str
    prompt: str
    stops: tuple[str, ...]
    """The stop strings the mode adds to a reply."""
    seen: PromptInspection | None = None
    """Its tokens and share of the context (None where the model cannot tokenize here)."""
    note: str = ""


class CharactersController:
    """Characters and modes for any browser tab (``session``: the ChatSession whose chats they apply to)."""

    def __init__(self, session: ChatSession) -> None:
        self.session, self.services = session, session.services
        self.store = session.services.characters

    # -- the characters ----------------------------------------------------------------------------------
    def listed(self) -> list[str]:
        return self.store.names()

    def open(self, name: str | None) -> CharacterView:
        """The character named ``name`` in the editor (None or "": a new one)."""
        if not name:
            return CharacterView(self.listed())
        return self._view(self._get(name))

    def save(self, original: str | None, name: str, greeting: str, context: str, user_name: str = "You",
             user_bio: str = "") -> CharacterView:
        """Save the editor: a new character when ``original`` is None or "", else the one named ``original``
        (renamed to ``name`` when that changed)."""
        try:
            character = Character(name.strip(), greeting, context, user_name.strip(), user_bio)
            saved = self.store.update(original, character) if original else self.store.create(character)
        except CharacterError as exc:
            raise UserError(f"Could not save the character: {exc}") from exc
        return self._view(saved, f"Saved '{saved.name}'.")

    def delete(self, name: str | None, confirmed: bool) -> CharacterView:
        """Delete a character (and its picture) once confirmed; chats that had it keep their messages."""
        if not name:
            raise UserError("Choose a character to delete first.")
        if not confirmed:
            raise UserError(f"Delete '{name}' for good? Press Delete again to confirm.")
        try:
            self.store.delete(name)
        except CharacterError as exc:
            raise UserError(str(exc)) from exc
        return CharacterView(self.listed(), note=f"Deleted '{name}'.")

    def duplicate(self, name: str | None, new_name: str = "") -> CharacterView:
        if not name:
            raise UserError("Choose a character to duplicate first.")
        try:
            copy = self.store.duplicate(name, new_name.strip())
        except CharacterError as exc:
            raise UserError(str(exc)) from exc
        return self._view(copy, f"Duplicated '{name}' as '{copy.name}'.")

    def import_file(self, path: str | Path) -> CharacterView:
        """Import a text-generation-webui YAML/JSON character or a TavernAI/SillyTavern card (JSON or PNG); a
        file over the size an import reads is refused before it is read."""
        path = Path(path)
        try:
            check_size(path.stat().st_size, path.name)
            blob = path.read_bytes()
            read = parse_character(blob, path.name)
            character = self.store.add_imported(read, blob if path.suffix.lower() == ".png" else None,
                                                f"'{path.name}'")
        except (CharacterError, OSError) as exc:
            raise UserError(f"Could not import the character: {exc}") from exc
        renamed = f" as '{character.name}'" if character.name != read.name else ""
        return self._view(character, f"Imported '{read.name}' from {path.name}{renamed}.")

    def export(self, name: str | None, kind: str) -> Path:
        """The character as a file in a new temporary folder: text-generation-webui's YAML, or a v2 card (JSON)."""
        if kind not in EXPORTS:
            raise UserError(f"Export as one of {', '.join(EXPORTS)}, not {kind!r}.")
        character = self._get(name or "")
        text = character.to_yaml() if kind == "yaml" else self.store.export_card(character.name)
        suffix = ".yaml" if kind == "yaml" else ".json"
        path = scratch_folder("character-export-") / f"{character.name}{suffix}"
        path.write_text(text, encoding="utf-8")
        return path

    def set_picture(self, name: str | None, path: str | Path) -> CharacterView:
        character = self._get(name or "")
        try:
            check_picture_size(Path(path).stat().st_size)  # before it is read
            self.store.set_picture(character.name, Path(path).read_bytes(), Path(path).suffix or ".png")
        except (CharacterError, OSError) as exc:
            raise UserError(f"Could not set the picture: {exc}") from exc
        return self._view(character, "Picture saved.")

    # -- chats in a mode ---------------------------------------------------------------------------------
    def start_chat(self, mode: str, character: str | None, system_prompt: str = "") -> ChatView:
        """A new chat in ``mode`` with ``character``, stored now: in chat and chat-instruct its greeting is the first
        message (instruct mode leaves the character out)."""
        title = character or f"New {mode} chat"
        return self.session.library.view(self.session.new_chat(title, system_prompt, mode, character or None))

    def new_chat(self, mode: str, character: str | None, system_prompt: str = "") -> ChatView:
        """The New chat button with ``mode`` and ``character`` chosen: where the character's greeting opens a chat
        (chat and chat-instruct, as text-generation-webui), that chat, stored with its greeting before anything is
        typed; otherwise an empty new chat (stored when its first message is sent)."""
        if self.session.mode_of(mode, character or None).greeting():
            return self.start_chat(mode, character, system_prompt)
        return self.session.library.view(None)

    def uses(self, mode: str, character: str | None) -> str:
        """What ``mode`` does with ``character``, for the panel's note ("" where there is nothing to say)."""
        if character and mode == INSTRUCT:
            return (f"Instruct mode leaves {character}'s greeting and context out; choose chat or chat-instruct to "
                    "use them.")
        return ""

    def set_chat_mode(self, chat_id: int | None, mode: str, character: str | None) -> ChatView:
        """Write the open chat's next replies in ``mode`` as ``character`` (its messages stay as they are)."""
        if chat_id is None:
            raise UserError("Start a chat first (or choose the mode and character for the next new chat).")
        chat_mode = self.session.mode_of(mode, character or None)
        self.services.chats.set_mode(chat_id, chat_mode.name,
                                     chat_mode.character.name if chat_mode.character else None)
        return self.session.library.view(chat_id)

    def command(self) -> str:
        """chat-instruct's command as saved (text-generation-webui's default until one is typed)."""
        return self.session.command()

    def save_command(self, text: str) -> str:
        """Save chat-instruct's command exactly as typed ("": the default); chat-instruct replies use it. The
        answer: "", or what is wrong with it (a chat-instruct reply then says so and writes nothing)."""
        if self.services.settings.get().chat_instruct_command != text:
            self.services.settings.update(chat_instruct_command=text)
        try:
            ChatMode(CHAT_INSTRUCT, command=text or DEFAULT_COMMAND)
        except ModeError as exc:
            return f"Saved as typed, but chat-instruct replies cannot use it: {exc}."
        return ""

    def preview(self, chat_id: int | None, mode: str, character: str | None, draft: str = "",
                system_prompt: str = "", command: str = DEFAULT_COMMAND) -> ModePreview:
        """The prompt the model would read in ``mode`` (as ``character``, with chat-instruct's ``command``): the
        chat so far (a new chat: the character's greeting) and the message being typed, with its tokens."""
        if mode not in MODES:
            raise UserError(f"Choose a mode: {', '.join(MODES)} (got {mode!r}).")
        try:
            chat_mode = ChatMode(mode, self.session.mode_of(mode, character or None).character,
                                 command=command or DEFAULT_COMMAND)
        except ModeError as exc:
            raise UserError(str(exc)) from exc
        if chat_id is not None:
            turns, system_prompt = turns_of(self.services.chats.messages(chat_id)), \
                self.services.chats.get(chat_id).system_prompt
        else:  # a new chat: its greeting where the mode uses one, as ChatSession.send stores it
            turns = greeting_turns(chat_mode)
        if draft.strip():
            turns.append({"role": "user", "content": draft})
        model = self.services.loaded
        if model is None:
            raise UserError("No model is loaded; load one in the Model tab to see its prompt.")
        template = self.session.template(model)
        try:
            prompt = render_chat_prompt(model.tokenizer, chat_messages(turns, system_prompt), template=template,
                                        mode=chat_mode)
        except ChatPromptError as exc:
            raise UserError(f"The {mode} prompt cannot be written: {exc}") from exc
        try:
            seen, note = inspect_rendered(model, prompt, False), ""
        except InsightUnavailable as exc:
            seen, note = None, f"Tokens are not available ({exc})."
        return ModePreview(mode, prompt, chat_mode.stops(template), seen, note)

    # -- helpers -----------------------------------------------------------------------------------------
    def _get(self, name: str) -> Character:
        if not name:
            raise UserError("Choose a character first.")
        try:
            return self.store.get(name)
        except CharacterError as exc:
            raise UserError(str(exc)) from exc

    def _view(self, character: Character, note: str = "") -> CharacterView:
        try:
            picture = self.store.picture(character.name)
        except CharacterError as exc:  # a link to a file elsewhere
            raise UserError(str(exc)) from exc
        return CharacterView(self.listed(), character, picture, note)
