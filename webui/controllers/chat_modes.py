"""How a chat's reply is written: the instruction template (the Chat tab's choice, the model's own by default) and
the chat mode (instruct, chat, chat-instruct with its command) with the chat's character, whose context opens the
prompt and whose greeting opens a new chat; for a stored reply, those its record names. The rules are
webui/chat's (ChatMode, TemplateStore); this reads the chat's and the settings' choices into them, with a UserError
that says what to do for one that cannot apply."""

from __future__ import annotations

from loaders.base import LoadedModel
from webui.chat.characters import CharacterError
from webui.chat.modes import CHAT_INSTRUCT, DEFAULT_COMMAND, ChatMode, ModeError
from webui.chat.reply import ReplyRecord
from webui.chat.templates import ChatTemplate, TemplateError, from_record
from webui.controllers.errors import UserError
from webui.services import Services


def greeting_turns(mode: ChatMode) -> list[dict[str, str]]:
    """A new chat's first message: the character's greeting (none without one, and none in instruct mode)."""
    return [{"role": "assistant", "content": greeting}] if (greeting := mode.greeting()) else []


class ChatModes:
    """The template and mode of the chats in ``services``' store, as the settings choose them now."""

    def __init__(self, services: Services) -> None:
        self.services = services

    def template(self, model: LoadedModel | None = None) -> ChatTemplate:
        """The instruction template chats use now (the Chat tab's choice; the model's own by default) for
        ``model`` (None: the one loaded)."""
        model = model or self.services.loaded
        choice = self.services.settings.get().chat_template
        if model is None or model.capabilities.renders_chats:
            if choice:
                raise UserError(f"the instruction template '{choice}' cannot apply: a remote server renders chats "
                                "with its own template; choose \"the model's own\" in Chat")
            return ChatTemplate("")
        try:
            return self.services.templates.resolve(choice, model.tokenizer)
        except TemplateError as exc:
            raise UserError(f"Instruction template: {exc}") from exc

    def reply_template(self, model: LoadedModel, made: ReplyRecord | None) -> ChatTemplate:
        """The template a stored reply was made with (to continue or branch it), else the current one."""
        if made is not None and made.model is not None:  # its record names its template (None: the model's own)
            try:
                return from_record(made.chat_template) or ChatTemplate("")
            except TemplateError as exc:
                raise UserError(str(exc)) from exc
        return self.template(model)

    def mode(self, chat_id: int | None) -> ChatMode:
        """Chat ``chat_id``'s mode now, its character as its file says now (None: instruct)."""
        if chat_id is None:
            return ChatMode()
        chat = self.services.chats.get(chat_id)
        try:
            return self.mode_of(chat.mode, chat.character)
        except UserError as exc:
            raise UserError(f"This chat's character: {exc}; choose another character (or none) for this chat, or "
                            "import it again") from exc

    def mode_of(self, mode: str, character: str | None) -> ChatMode:
        """``mode`` with the character named ``character`` (None: none) and, in chat-instruct, the command saved
        (``command``); UserError for a wrong one."""
        try:
            return ChatMode(mode, self.services.characters.get(character) if character else None,
                            **({"command": self.command()} if mode == CHAT_INSTRUCT else {}))
        except (ModeError, CharacterError) as exc:
            raise UserError(f"{exc}") from exc

    def command(self) -> str:
        """chat-instruct's command as last typed in the Chat tab (text-generation-webui's default until then)."""
        return self.services.settings.get().chat_instruct_command or DEFAULT_COMMAND

    def reply_mode(self, chat_id: int | None, made: ReplyRecord | None) -> ChatMode:
        """The mode a stored reply was written in, its character as it was then (to continue, branch or inspect
        it), else the chat's now."""
        if made is not None and made.model is not None:
            try:
                return ChatMode.from_record(made.chat_mode)
            except ModeError as exc:
                raise UserError(f"this reply's record: {exc}") from exc
        return self.mode(chat_id)
