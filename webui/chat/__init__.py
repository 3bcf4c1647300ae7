"""Chat prompts: the model's own chat template, system prompts, continuing a reply."""

from webui.chat.prompt import ChatPromptError, render_chat_prompt

__all__ = ["ChatPromptError", "render_chat_prompt"]
