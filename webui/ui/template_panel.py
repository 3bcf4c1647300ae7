"""The Chat tab's instruction template panel: choose, edit, preview, save your own (over TemplatesController)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gradio as gr

from webui.chat.context import POLICIES
from webui.controllers import UserError
from webui.controllers.templates import TemplatesController, TemplateView
from webui.services import Services
from webui.ui.feedback import Update, shows_errors


@dataclass
class TemplatePanel:
    choice: gr.Dropdown
    note: gr.Markdown
    source: gr.Code
    name: gr.Textbox
    save: gr.Button
    delete: gr.Button
    preview: gr.Button
    rendered: gr.Code
    policy: gr.Radio
    controller: TemplatesController
    accordion: gr.Accordion
    previewing: gr.State
    """Whether the panel is open: its preview then follows what it shows (rendered only while it can be seen)."""
    typed: gr.Textbox
    """The message box's text, copied in the page while the panel is open (so typing with it closed costs the
    server nothing); its changes re-render the preview."""

    @property
    def outputs(self) -> list:
        """What :meth:`show` fills."""
        return [self.choice, self.source, self.note]

    def show(self, view: TemplateView) -> tuple:
        return gr.update(choices=self.controller.choices(), value=view.choice), view.source, view.note


def create_template_panel(services: Services) -> TemplatePanel:
    controller = TemplatesController(services)
    with gr.Accordion("Instruction template and context", open=False, elem_id="chat-template-panel") as accordion:
        choice = gr.Dropdown(choices=controller.choices(), label="Template", elem_id="chat-template",
                             info="The model's own by default; a built-in for a model without one (or with a wrong "
                                  "one), or your own. Also used by Batch runs.")
        note = gr.Markdown("", elem_id="chat-template-note")
        source = gr.Code(language="jinja2", label="Jinja (edit it, preview it, save it as your own)",
                         interactive=True, lines=6, max_lines=20, elem_id="chat-template-source")
        with gr.Row():
            name = gr.Textbox(label="Save as", placeholder="template name", scale=3, elem_id="chat-template-name")
            save = gr.Button("Save template", scale=1, elem_id="chat-template-save")
            delete = gr.Button("Delete template", variant="stop", scale=1, elem_id="chat-template-delete")
        preview = gr.Button("Preview the prompt", elem_id="chat-template-preview-button")
        rendered = gr.Code(language=None, label="What the model would read (this chat, your message, the editor's "
                                                "template)", interactive=False, elem_id="chat-template-preview")
        policy = gr.Radio(choices=list(POLICIES), value=controller.context_policy(), elem_id="chat-context-policy",
                          label="When the chat is longer than the context",
                          info="Leave out the oldest messages (never the system prompt or your last message; the "
                               "reply says how many), or refuse and say so. Parameters' truncation_length lowers "
                               "the context used.")
        typed = gr.Textbox("", visible="hidden", container=False)  # rendered: a copy unchanged is no change
    return TemplatePanel(choice, note, source, name, save, delete, preview, rendered, policy, controller,
                         accordion, gr.State(False), typed)


def wire_template_panel(panel: TemplatePanel, chat_id: gr.State, message: gr.Textbox, system: gr.Textbox) -> None:
    c = panel.controller
    def refreshed(cid: int | None, typed: str, system_prompt: str, source: str, previewing: bool) -> str | Update:
        """The preview, while the panel is open, follows what it shows (the template, the chat, the system prompt,
        the message being typed): never the text of one that is no longer chosen."""
        if not previewing:
            return gr.skip()
        try:
            return c.preview(cid, typed, system_prompt, source)
        except UserError as exc:
            return f"(No preview: {exc})"

    follows = [chat_id, message, system, panel.source, panel.previewing]
    # opened: the preview shows at once (it was empty until Preview was clicked), and follows until closed
    panel.accordion.expand(lambda: True, None, panel.previewing, js="() => { window.wbPreviewing = true; }").then(
        refreshed, follows, [panel.rendered], show_progress="hidden")
    panel.accordion.collapse(lambda: False, None, panel.previewing, js="() => { window.wbPreviewing = false; }")
    # a message typed: copied in the page only while the panel is open, and its copy re-renders the preview
    message.change(None, [message, panel.typed], [panel.typed], js="(m, copy) => window.wbPreviewing ? m : copy")
    panel.typed.change(refreshed, follows, [panel.rendered], show_progress="hidden", trigger_mode="always_last")
    panel.choice.input(shows_errors(lambda chosen: panel.show(c.choose(chosen))), [panel.choice],
                       panel.outputs).then(refreshed, follows, [panel.rendered], show_progress="hidden")
    panel.save.click(shows_errors(lambda name, source: panel.show(c.save(name, source))), [panel.name, panel.source],
                     panel.outputs).then(refreshed, follows, [panel.rendered], show_progress="hidden")
    panel.delete.click(shows_errors(lambda chosen: panel.show(c.delete(chosen))), [panel.choice],
                       panel.outputs).then(refreshed, follows, [panel.rendered], show_progress="hidden")
    panel.source.input(refreshed, follows, [panel.rendered], show_progress="hidden",
                       trigger_mode="always_last")  # edited by hand
    for changed in (chat_id, system):  # another chat shown, or its system prompt edited
        changed.change(refreshed, follows, [panel.rendered], show_progress="hidden", trigger_mode="always_last")
    panel.preview.click(shows_errors(c.preview), [chat_id, message, system, panel.source], [panel.rendered])
    panel.policy.input(shows_errors(c.context_policy), [panel.policy], [panel.policy], show_progress="hidden")


def on_load(panel: TemplatePanel) -> tuple[list, Any]:
    """(outputs, function): a page (re)load shows the template chats use now and the context policy."""
    return [*panel.outputs, panel.policy], lambda: (*panel.show(panel.controller.current()),
                                                    panel.controller.context_policy())
