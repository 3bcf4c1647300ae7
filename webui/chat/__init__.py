"""Chat prompts: the model's own chat template, system prompts, continuing a reply."""

from webui.chat.prompt import ChatPromptError, chat_messages, render_chat_prompt

__all__ = ["ChatPromptError", "chat_messages", "render_chat_prompt"]
