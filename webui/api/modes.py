"""text-generation-webui's chat extras on /v1/chat/completions: ``mode``, ``character``, ``user_name``,
``user_bio``, ``instruction_template``, ``chat_template_str`` (and ``chat_instruct_command``), checked into a
ChatMode and an instruction template, with a 400 naming the field (a 404 for a character that is not there)."""

from __future__ import annotations

from loaders.base import LoadedModel
from webui.api.errors import APIError
from webui.api.protocol import ChatCompletionRequest
from webui.chat.characters import Character, CharacterError, CharacterNotFound, CharacterStore
from webui.chat.modes import CHAT, CHAT_TEMPLATE, DEFAULT_COMMAND, INSTRUCT, MODES, ChatMode, ModeError
from webui.chat.templates import ChatTemplate, TemplateError, TemplateStore, render_source


def request_mode(body: ChatCompletionRequest, characters: CharacterStore, model: LoadedModel) -> ChatMode | None:
    """The request's chat mode (None: instruct without any extras, as every request was before)."""
    extras = (body.mode, body.character, body.user_name, body.user_bio, body.chat_template_str,
              body.chat_instruct_command)
    if all(x is None for x in extras):
        return None
    mode = body.mode if body.mode is not None else INSTRUCT
    if mode not in MODES:
        raise APIError(400, f"mode must be one of {', '.join(MODES)}, got {mode!r}", param="mode")
    if mode != INSTRUCT:
        if model.capabilities.renders_chats:
            raise APIError(400, f"mode '{mode}' cannot apply to '{model.name}': a remote server renders chats with "
                                "its own template; send mode 'instruct'", param="mode")
        if body.tools:
            raise APIError(400, f"tools are only taken in the instruct mode, not '{mode}'", param="mode")
    character = _character(body.character, characters)
    if body.chat_template_str is not None:
        try:
            render_source(body.chat_template_str, [{"role": "user", "content": "Hi"}], True,
                          {"name1": "You", "name2": "Assistant", "user_bio": ""})
        except TemplateError as exc:
            raise APIError(400, f"chat_template_str: {exc}", param="chat_template_str") from exc
    try:
        return ChatMode(mode, character, body.user_name or "", body.user_bio,
                        body.chat_instruct_command if body.chat_instruct_command is not None else DEFAULT_COMMAND,
                        body.chat_template_str if body.chat_template_str is not None else CHAT_TEMPLATE)
    except ModeError as exc:
        param = "chat_instruct_command" if "command" in str(exc) else "chat_template_str" \
            if "chat template" in str(exc) else "mode"
        raise APIError(400, str(exc), param=param) from exc


def _character(given: str | dict | None, characters: CharacterStore) -> Character | None:
    if given is None or given == "":
        return None
    if isinstance(given, dict):  # by content, as a reproduce record sends it
        try:
            return Character.from_record(given)
        except CharacterError as exc:
            raise APIError(400, f"character: {exc}", param="character") from exc
    try:
        return characters.get(given)
    except CharacterNotFound as exc:
        raise APIError(404, str(exc), type="not_found_error", param="character", code="character_not_found") from exc
    except CharacterError as exc:
        raise APIError(400, f"character: {exc}", param="character") from exc


def instruction_template(body: ChatCompletionRequest, templates: TemplateStore,
                         model: LoadedModel) -> ChatTemplate | None:
    """text-generation-webui's ``instruction_template`` (a template's name) as the request's template (None: not
    given); it cannot be combined with vLLM's ``chat_template``."""
    name = body.instruction_template
    if name is None:
        return None
    if body.chat_template is not None:
        raise APIError(400, "send chat_template or instruction_template, not both", param="instruction_template")
    if model.capabilities.renders_chats:
        raise APIError(400, f"instruction_template cannot apply to '{model.name}': a remote server renders chats "
                            "itself", param="instruction_template")
    try:
        return ChatTemplate(name, templates.source(name))
    except TemplateError as exc:
        raise APIError(400, f"instruction_template: {exc}", param="instruction_template") from exc


def needs_template(mode: ChatMode | None) -> bool:
    """Whether the prompt is written by an instruction template (the chat mode writes a plain transcript)."""
    return mode is None or mode.name != CHAT
