"""Turn a chat (system prompt + messages) into the exact text the model sees."""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from loaders.base import Tokenizer
from webui.chat.modes import ChatMode, ModeError
from webui.chat.templates import ChatTemplate, TemplateError, guess

ROLES = ("system", "user", "assistant")


class ChatPromptError(ValueError):
    pass


TOOL_KEYS = ("tool_calls", "tool_call_id")


def chat_messages(messages: Iterable[Mapping[str, Any]], system_prompt: str = "",
                  tools: bool = False) -> list[dict[str, Any]]:
    """The messages as sent: checked roles, the system prompt first unless the chat has its own. ``tools``: a
    chat whose replies called tools (webui.chat.tool_steps), whose calls and ``tool`` results stay as they are."""
    roles = (*ROLES, "tool") if tools else ROLES
    msgs = [{"role": m["role"], "content": m["content"],
             **({k: m[k] for k in TOOL_KEYS if k in m} if tools else {})} for m in messages]
    for i, m in enumerate(msgs):
        if m["role"] not in roles:
            raise ChatPromptError(f"messages[{i}].role must be one of {', '.join(roles)}, got {m['role']!r}")
    if system_prompt.strip() and not (msgs and msgs[0]["role"] == "system"):
        msgs.insert(0, {"role": "system", "content": system_prompt})
    return msgs


def render_chat_prompt(tokenizer: Tokenizer, messages: Iterable[Mapping[str, str]], system_prompt: str = "",
                       continue_last: bool = False, template: ChatTemplate | None = None,
                       tools: list[dict] | None = None, mode: ChatMode | None = None) -> str:
    """The chat rendered with ``template`` (None: the model's own), ready for the assistant's (next) reply.

    ``continue_last``: the last message is a partial assistant reply to be
    continued; it is appended after the generation prompt without its end token,
    so the model picks up mid-sentence. ChatPromptError says what is wrong (a
    model without a template of its own names the built-in that would fit). ``mode``: a chat mode (None:
    instruct) writes the chat as its transcript (webui.chat.modes).
    """
    template = template or ChatTemplate("")
    chat_mode = mode is not None and mode.chat_like
    if template.source is None and not tokenizer.chat_template and not (mode is not None and mode.name == "chat"):
        raise ChatPromptError(f"this model has no chat template of its own; choose an instruction template (the "
                              f"built-in '{guess(tokenizer)}' fits its special tokens) or send a raw prompt")
    msgs = chat_messages(messages, system_prompt)
    partial = ""
    if continue_last:
        if not msgs or msgs[-1]["role"] != "assistant":
            raise ChatPromptError("there is no assistant reply to continue; send a message first")
        partial = msgs.pop()["content"]
    elif not msgs:
        raise ChatPromptError("the chat has no messages; send at least one")
    # Like OpenAI and vLLM, a chat that ends with a system or assistant message still gets a new reply.
    try:
        if chat_mode and mode is not None:
            return mode.render(tokenizer, [*msgs, {"role": "assistant", "content": partial}] if continue_last
                               else msgs, template, continue_last)
        return template.render(tokenizer, msgs, add_generation_prompt=True, tools=tools) + partial
    except (TemplateError, ModeError) as exc:
        raise ChatPromptError(f"{exc} (template '{template.name or 'the model’s own'}')") from None
