"""Fitting a chat into the model's context: the oldest turns are left out (never the system prompt or the last
user message), or the chat is refused, as the user chooses."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

from webui.chat.modes import ChatMode
from webui.chat.prompt import ChatPromptError, chat_messages, render_chat_prompt
from webui.chat.templates import ChatTemplate
from webui.counts import counted

DROP_OLDEST, REFUSE = "drop oldest messages", "refuse"
POLICIES = (DROP_OLDEST, REFUSE)


@dataclass(frozen=True)
class FittedChat:
    prompt: str
    messages: list[dict[str, Any]]
    """What was sent: the system prompt and the messages kept."""
    dropped: int = 0
    """How many of the oldest messages were left out."""
    truncation_length: int = 0
    """The limit that left them out when it was truncation_length, not the model's context (0)."""

    @property
    def note(self) -> str:
        return left_out(self.dropped, self.truncation_length)


def left_out(dropped: int, truncation_length: int = 0) -> str:
    """What a reply says when the oldest messages were not sent ("" when none were left out), naming the limit:
    the model's context, or truncation_length when that was set below it."""
    if not dropped:
        return ""
    why = f"over truncation_length {truncation_length}" if truncation_length else "the context is full"
    return f"{dropped} oldest message{'s were' if dropped > 1 else ' was'} not sent ({why})"


def kept_messages(messages: list[dict[str, str]], dropped: int) -> list[dict[str, str]]:
    """``messages`` (the system prompt first, if any) without the ``dropped`` oldest ones after it."""
    head = 1 if messages and messages[0]["role"] == "system" else 0
    return messages[:head] + messages[head + dropped:]


def fit_chat(tokenizer: Any, turns: Iterable[Mapping[str, str]], system_prompt: str, budget: int,
             template: ChatTemplate | None = None, continue_last: bool = False,
             policy: str = DROP_OLDEST, mode: ChatMode | None = None, extra: Sequence[int] = (),
             render: Callable[[list[dict[str, Any]]], str] | None = None) -> FittedChat:
    """The chat rendered within ``budget`` prompt tokens. With DROP_OLDEST the oldest turns go first (a turn: a
    message and the replies after it, so the chat still starts with a user message); ChatPromptError when even
    the system prompt and the last user message (and what follows it) do not fit, or when the policy is REFUSE.
    ``mode``: the chat mode that writes the prompt (None: instruct). ``extra``: tokens each turn takes beyond
    its text (its images' tokens), which leave with it. ``render``: writes the kept messages as the prompt in
    place of the template (a chat with tools: the tools offered and the replies' calls and results, which then
    stay in the messages and leave with their turn)."""
    messages = chat_messages(turns, system_prompt, tools=render is not None)
    head = 1 if messages and messages[0]["role"] == "system" else 0
    last_user = max((i for i, m in enumerate(messages) if m["role"] == "user"), default=len(messages) - 1)
    dropped = 0
    while True:
        kept = kept_messages(messages, dropped)
        prompt = render(kept) if render is not None else \
            render_chat_prompt(tokenizer, kept, continue_last=continue_last, template=template, mode=mode)
        size = len(tokenizer.encode(prompt, add_special_tokens=False)) + sum(extra[dropped:])
        if size <= budget:
            return FittedChat(prompt, kept, dropped)
        if policy == REFUSE:
            raise ChatPromptError(f"the chat is {counted(size)} and the context leaves {budget} for it (after "
                                  f"max_new_tokens); start a new chat, lower max_new_tokens, or let the oldest "
                                  f"messages be left out")
        following = head + dropped + 1
        while following < last_user and messages[following]["role"] != "user":
            following += 1
        if following > last_user:
            raise ChatPromptError(f"the last message (with the system prompt) is {counted(size)} and the context "
                                  f"leaves {budget} for it (after max_new_tokens); shorten it or lower "
                                  f"max_new_tokens")
        dropped = following - head
