"""TemplatesController: the Chat tab's instruction template: choose one, edit and save your own, preview a chat
rendered with it before sending."""

from __future__ import annotations

from dataclasses import dataclass

from webui.chat import ChatPromptError, render_chat_prompt
from webui.chat.context import POLICIES
from webui.chat.templates import BUILTIN, MODEL_OWN, ChatTemplate, TemplateError
from webui.controllers.errors import UserError
from webui.services import Services

MODEL_OWN_LABEL = "the model's own"


@dataclass(frozen=True)
class TemplateView:
    """What the template panel shows for the current choice."""

    choice: str  # a dropdown label: MODEL_OWN_LABEL or a template's name
    source: str  # the Jinja the chat is rendered with ("" when the model's own is not known here)
    note: str  # which template applies and why
    editable: bool  # a user template (saving under its name replaces it)


def label(choice: str) -> str:
    return choice or MODEL_OWN_LABEL


def choice_of(label_: str | None) -> str:
    return "" if label_ in (None, "", MODEL_OWN_LABEL) else label_


class TemplatesController:
    def __init__(self, services: Services) -> None:
        self.services, self.store = services, services.templates

    def choices(self) -> list[str]:
        return [MODEL_OWN_LABEL, *self.store.names()]

    def current(self) -> TemplateView:
        """The template chats use now, as the panel shows it."""
        return self._view(self.services.settings.get().chat_template)

    def choose(self, label_: str | None) -> TemplateView:
        """Use this template for chats (and batch runs) from now on."""
        choice = choice_of(label_)
        if choice:
            try:
                self.store.source(choice)
            except TemplateError as exc:
                raise UserError(str(exc)) from exc
        self.services.settings.update(chat_template=choice)
        return self._view(choice)

    def save(self, name: str, source: str) -> TemplateView:
        """Save the editor's text as a user template and use it."""
        try:
            saved = self.store.save(name or "", source or "")
        except TemplateError as exc:
            raise UserError(f"The template was not saved: {exc}") from exc
        return self.choose(saved)

    def delete(self, label_: str | None) -> TemplateView:
        """Delete a user template; chats go back to the model's own."""
        choice = choice_of(label_)
        if not choice:
            raise UserError("Choose one of your own templates to delete.")
        try:
            self.store.delete(choice)
        except TemplateError as exc:
            raise UserError(str(exc)) from exc
        return self.choose(None) if self.services.settings.get().chat_template == choice else self.current()

    def context_policy(self, policy: str | None = None) -> str:
        """What a chat longer than the context does (set it when ``policy`` is given)."""
        if policy is not None:
            if policy not in POLICIES:
                raise UserError(f"the context policy must be one of: {', '.join(POLICIES)}")
            self.services.settings.update(context_policy=policy)
        return self.services.settings.get().context_policy

    def preview(self, chat_id: int | None, draft: str, system_prompt: str, source: str) -> str:
        """The chat so far, plus the message being typed, rendered with the editor's text (not yet saved)."""
        model = self.services.loaded
        if model is None or model.capabilities.renders_chats:
            raise UserError("Preview needs a local model: load one in the Model tab.")
        messages = [{"role": m.role, "content": m.content} for m in self.services.chats.messages(chat_id)] \
            if chat_id is not None else []
        if draft.strip():
            messages.append({"role": "user", "content": draft})
        if not messages:
            messages = [{"role": "user", "content": "(your message)"}]
        own = (source or "").strip() == (model.tokenizer.chat_template or "").strip()
        template = ChatTemplate("") if own else ChatTemplate("editor", source)
        try:
            return render_chat_prompt(model.tokenizer, messages, system_prompt, template=template)
        except ChatPromptError as exc:
            raise UserError(f"Preview: {exc}") from exc

    def _view(self, choice: str) -> TemplateView:
        model = self.services.loaded
        own = model.tokenizer.chat_template if model is not None else None
        if choice:
            try:
                source = self.store.source(choice)
            except TemplateError as exc:
                return TemplateView(label(choice), "", f"⚠ {exc}", False)
            return TemplateView(choice, source, f"Chats use the template '{choice}'.", choice not in BUILTIN)
        if model is None or model.capabilities.renders_chats:
            return TemplateView(MODEL_OWN_LABEL, "", "Chats use the model's own template (load a local model to "
                                                     "see it).", False)
        if own:
            return TemplateView(MODEL_OWN_LABEL, own, f"Chats use {model.name}'s own template.", False)
        resolved = self.store.resolve(MODEL_OWN, model.tokenizer)
        return TemplateView(MODEL_OWN_LABEL, resolved.source or "", f"⚠ {resolved.note}.", False)
