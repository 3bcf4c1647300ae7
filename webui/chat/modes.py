"""Chat modes, as text-generation-webui defines them: how a chat becomes the text the model reads.

- ``instruct``: the model's instruction template renders the messages (what chats always did); a character's
  context and greeting are left out.
- ``chat``: a plain transcript for base models, written by a Jinja *chat template* (text-generation-webui's by
  default): the character's context (then the user's bio) first, each turn as "Name: text", ending with "Char:".
- ``chat-instruct``: the instruction template wraps an editable *command* around that transcript (``<|character|>``
  is the character's name, ``<|prompt|>`` the transcript) as the user's message, and the assistant's turn begins
  with "Char:".

Both chat modes stop where the next "\\nYou:" or "\\nChar:" turn would begin. A ChatMode is data (the mode, the
character by content, names, the command and the chat template), so a reproduce record keeps it whole.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from webui.chat.characters import DEFAULT_USER, Character, CharacterError, fill_names
from webui.chat.templates import ChatTemplate, TemplateError, render_source

INSTRUCT, CHAT, CHAT_INSTRUCT = "instruct", "chat", "chat-instruct"
MODES = (INSTRUCT, CHAT, CHAT_INSTRUCT)
DEFAULT_COMMAND = ('Continue the chat dialogue below. Write a single reply for the character "<|character|>".\n\n'
                   "<|prompt|>")
DEFAULT_CHAR = "Assistant"
"""The model's name in a chat mode without a character."""
CHAT_TEMPLATE = (
    "{%- for message in messages %}\n"
    "    {%- if message['role'] == 'system' -%}\n"
    "        {%- if message['content'] -%}\n"
    "            {{- message['content'] + '\\n\\n' -}}\n"
    "        {%- endif -%}\n"
    "        {%- if user_bio -%}\n"
    "            {{- user_bio + '\\n\\n' -}}\n"
    "        {%- endif -%}\n"
    "    {%- else -%}\n"
    "        {%- if message['role'] == 'user' -%}\n"
    "            {{- name1 + ': ' + message['content'] + '\\n'-}}\n"
    "        {%- else -%}\n"
    "            {{- name2 + ': ' + message['content'] + '\\n' -}}\n"
    "        {%- endif -%}\n"
    "    {%- endif -%}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- name2 + ':' -}}\n"
    "{%- endif %}")
"""text-generation-webui's default chat template (``chat_template_str``): name1 is the user, name2 the character."""
_MARK = "\u2063REPLY-GOES-HERE\u2063"


class ModeError(ValueError):
    """A chat mode that cannot be used as given; the message names the field and what to do."""


@dataclass(frozen=True)
class ChatMode:
    """How a chat is written for the model: the mode, and for the chat modes who speaks and how."""

    name: str = INSTRUCT
    """One of MODES."""
    character: Character | None = None
    """Who the model plays (by content); None: no character (the model is "Assistant")."""
    user_name: str = ""
    """The user's name; "": the character's user_name ("You" without a character)."""
    user_bio: str | None = None
    """The user's persona; None: the character's."""
    command: str = DEFAULT_COMMAND
    """chat-instruct's command around the transcript (<|character|>, <|prompt|>)."""
    chat_template: str = CHAT_TEMPLATE
    """The Jinja that writes the transcript (variables name1, name2, user_bio)."""

    def __post_init__(self) -> None:
        if self.name not in MODES:
            raise ModeError(f"mode must be one of {', '.join(MODES)}, got {self.name!r}")
        texts = (self.user_name, self.command, self.chat_template, "" if self.user_bio is None else self.user_bio)
        if not all(isinstance(t, str) for t in texts):
            raise ModeError("user_name, user_bio, command and chat_template must be text")
        if self.name == CHAT_INSTRUCT and "<|prompt|>" not in self.command:
            raise ModeError("the chat-instruct command must contain <|prompt|> (where the chat goes)")
        if not self.chat_template.strip():
            raise ModeError("the chat template is empty; leave it out for text-generation-webui's default")

    @property
    def chat_like(self) -> bool:
        return self.name != INSTRUCT

    @property
    def names(self) -> tuple[str, str]:
        """(the user's name, the character's name)."""
        user = self.user_name.strip() or (self.character.user_name if self.character else DEFAULT_USER)
        return user, self.character.name if self.character else DEFAULT_CHAR

    @property
    def bio(self) -> str:
        bio = self.user_bio if self.user_bio is not None else (self.character.user_bio if self.character else "")
        return fill_names(bio, *self.names)

    def greeting(self) -> str:
        """The greeting that opens a new chat: the character's, with the names filled ("" without a character, and
        in instruct mode, which leaves the character out, as text-generation-webui does)."""
        return fill_names(self.character.greeting, *self.names) if self.character and self.chat_like else ""

    def stops(self, template: ChatTemplate) -> tuple[str, ...]:
        """Stop strings for a reply: the template's where it wraps the turn, and in the chat modes the start of the
        next "Name:" turn."""
        user, char = self.names
        own = () if self.name == CHAT else template.stops
        return tuple(dict.fromkeys((*own, *((f"\n{user}:", f"\n{char}:") if self.chat_like else ()))))

    def render(self, tokenizer: Any, messages: list[dict[str, str]], template: ChatTemplate,
               continue_last: bool = False) -> str:
        """The prompt of a chat mode (``messages``: the system prompt, if any, first; the last one a partial reply
        when ``continue_last``). TemplateError says what cannot be rendered."""
        turns = [m for m in messages if m["role"] != "system"]
        partial = turns.pop()["content"] if continue_last else None
        return self._render(tokenizer, messages, turns, template, partial, "assistant")

    def user_turn_prompt(self, tokenizer: Any, messages: list[dict[str, str]], template: ChatTemplate) -> str:
        """The prompt for the model to write the user's next message (Impersonate): it ends with "You:"."""
        return self._render(tokenizer, messages, [m for m in messages if m["role"] != "system"], template, None,
                            "user")

    def _render(self, tokenizer: Any, messages: list[dict[str, str]], turns: list[dict[str, str]],
                template: ChatTemplate, partial: str | None, role: str) -> str:
        if not self.chat_like:
            raise ModeError("instruct prompts are rendered by render_chat_prompt")
        user, char = self.names
        system = messages[0]["content"] if messages and messages[0]["role"] == "system" else ""
        context = self.character.context if self.character else ""
        if self.name == CHAT:  # the chat's own system prompt follows the character's context
            context = "\n\n".join(p for p in (context.strip(), system.strip()) if p)
        head = [{"role": "system", "content": fill_names(context, user, char)}] \
            if context.strip() or self.bio.strip() else []
        transcript = self._transcript([*head, *turns])
        if partial is None and role == "assistant":  # the chat template's own generation prompt: "Char:"
            opening = self._transcript([*head, *turns], True)[len(transcript):].rstrip(" ")
        else:  # the start of the turn as the template writes it, and the reply so far
            opening = self._transcript([*head, *turns, {"role": role, "content": _MARK}])[len(transcript):]
            opening = opening.split(_MARK)[0] + partial if partial is not None else opening.split(_MARK)[0].rstrip(" ")
        if self.name == CHAT:
            return transcript + opening
        speaker = user if role == "user" else char
        command = fill_names(self.command.replace("<|character|>", speaker).replace("<|prompt|>", transcript),
                             user, char)
        outer = [{"role": "system", "content": system}] if system.strip() else []
        outer += [{"role": "user", "content": command}, {"role": "assistant", "content": opening + _MARK}]
        rendered = template.render(tokenizer, outer, add_generation_prompt=False)
        if _MARK not in rendered:
            raise TemplateError("the instruction template does not write the assistant's content, so chat-instruct "
                                "cannot begin the reply; choose another template")
        return rendered[:rendered.index(_MARK)]

    def _transcript(self, messages: list[dict[str, str]], add_generation_prompt: bool = False) -> str:
        user, char = self.names
        return render_source(self.chat_template, messages, add_generation_prompt,
                             {"name1": user, "name2": char, "user_bio": self.bio})

    def to_record(self) -> dict[str, Any] | None:
        """What a reproduce record keeps (None: plain instruct, as records always were): the character by
        content, and only the fields that differ from the defaults."""
        if self == ChatMode():
            return None
        out: dict[str, Any] = {"mode": self.name}
        if self.character is not None:
            out["character"] = self.character.to_record()
        if self.user_name:
            out["user_name"] = self.user_name
        if self.user_bio is not None:
            out["user_bio"] = self.user_bio
        if self.command != DEFAULT_COMMAND:
            out["command"] = self.command
        if self.chat_template != CHAT_TEMPLATE:
            out["chat_template"] = self.chat_template
        return out

    @classmethod
    def from_record(cls, data: Any) -> ChatMode:
        """A record's chat_mode back (None: instruct); ModeError names what is wrong."""
        if data is None:
            return cls()
        if not isinstance(data, dict):
            raise ModeError('chat_mode must be an object such as {"mode": "chat", "character": {...}}')
        unknown = sorted(set(data) - {"mode", "character", "user_name", "user_bio", "command", "chat_template"})
        if unknown:
            raise ModeError(f"chat_mode has unknown keys: {', '.join(unknown)}")
        try:
            character = Character.from_record(data["character"]) if data.get("character") is not None else None
        except CharacterError as exc:
            raise ModeError(f"chat_mode.character: {exc}") from None
        mode = cls(data.get("mode", INSTRUCT), character, data.get("user_name", ""), data.get("user_bio"))
        return replace(mode, command=data.get("command", DEFAULT_COMMAND),
                       chat_template=data.get("chat_template", CHAT_TEMPLATE))
