"""The Chat tab's "Tools" panel (#44): the tools the open chat offers its model (a new chat: the ones new chats
start with), picked from what is installed (built-ins, tool files in ``<user data>/tools/``, the MCP servers of
``<user data>/mcp_servers.json``), the tool files and servers that give none (with why), and the step limit.

The UI switches on what the operator installed; it adds no code and no commands.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import gradio as gr

from webui.controllers import UserError
from webui.controllers.chat import ChatSession
from webui.controllers.tools import ToolsController
from webui.tools import ToolList
from webui.ui.feedback import shows_errors

MAX_STEPS = 20


@dataclass
class ToolsPanel:
    box: gr.CheckboxGroup
    problems: gr.Markdown
    refresh: gr.Button
    steps: gr.Number
    choice: gr.Radio
    servers: gr.Markdown
    editor: gr.Group
    server_name: gr.Textbox
    command: gr.Textbox
    url: gr.Textbox
    headers: gr.Textbox
    add: gr.Button
    remove: gr.Button
    controller: ToolsController

    @property
    def shown(self) -> list:
        """What ``panel_values`` fills."""
        return [self.box, self.problems, self.servers, self.editor]


def choices(listing: ToolList) -> list[tuple[str, str]]:
    """(label, name) of each tool: its name and where it comes from."""
    def origin(kind: str, origin: str) -> str:
        return {"builtin": "built-in", "file": f"tools/{Path(origin).name}"}.get(kind, f"MCP: {origin}")
    return [(f"{t.name} ({origin(t.kind, t.origin)})", t.name) for t in listing.tools]


def problems_text(listing: ToolList) -> str:
    """The tool files and MCP servers that give no tools, each with what is wrong and what to do."""
    if not listing.problems:
        return ""
    lines = [f"- ⚠ **{Path(p.origin).name if p.kind == 'file' else p.origin}**: {p.message}"
             for p in listing.problems]
    return "Not available:\n" + "\n".join(lines)


def panel_values(session: ChatSession, chat_id: int | None, controller: ToolsController) -> tuple:
    """Values for ``ToolsPanel.shown``: the installed tools, the chat's ticked (a tool it names that is gone stays
    listed, so unticking it is one click), what gives none, the MCP servers, and their editor for the operator."""
    listing = session.tools()
    picked = session.chat_tools(chat_id)
    listed = choices(listing)
    gone = [(f"{name} (not installed now)", name) for name in picked if listing.get(name) is None]
    return (gr.update(choices=listed + gone, value=picked), problems_text(listing), controller.listing(),
            gr.update(visible=controller.may_change()))


def create_tools_panel(session: ChatSession) -> ToolsPanel:
    with gr.Accordion("Tools", open=False, elem_id="chat-tools-panel"):
        box = gr.CheckboxGroup(choices=[], label="Tools this chat offers the model", elem_id="chat-tools",
                               info="Each call the reply makes shows as a block above it; edit a call's arguments "
                                    "or result to go on from there as a new version.")
        problems = gr.Markdown("", elem_id="chat-tools-problems")
        with gr.Row():
            choice = gr.Radio([("the model chooses", "auto"), ("a tool must be called", "required")],
                              value=session.services.settings.get().tool_choice, label="A reply's first turn",
                              elem_id="chat-tool-choice")
            steps = gr.Number(label="Step limit (turns that may call tools before the model answers)", precision=0,
                              minimum=0, maximum=MAX_STEPS, value=session.services.settings.get().max_tool_steps,
                              elem_id="chat-tool-steps")
            refresh = gr.Button("Look for tools again", size="sm", scale=0, min_width=180, elem_id="chat-tools-refresh")
        with gr.Accordion("MCP servers (<user data>/mcp_servers.json)", open=False, elem_id="chat-mcp-panel"):
            servers = gr.Markdown("", elem_id="chat-mcp-servers")
            with gr.Group(visible=False, elem_id="chat-mcp-editor") as editor:
                with gr.Row():
                    server_name = gr.Textbox(label="Name", placeholder="files", elem_id="chat-mcp-name", scale=1)
                    command = gr.Textbox(label="Command (stdio)", elem_id="chat-mcp-command", scale=3,
                                         placeholder="npx -y @modelcontextprotocol/server-filesystem /srv/shared")
                with gr.Row():
                    url = gr.Textbox(label="or URL (streamable HTTP)", placeholder="https://mcp.example.com/mcp",
                                     elem_id="chat-mcp-url", scale=2)
                    headers = gr.Textbox(label="Headers (one 'Name: value' a line)", lines=2, scale=2,
                                         elem_id="chat-mcp-headers")
                with gr.Row():
                    add = gr.Button("Add server", size="sm", elem_id="chat-mcp-add")
                    remove = gr.Button("Remove the server named above", size="sm", variant="stop",
                                       elem_id="chat-mcp-remove")
    return ToolsPanel(box, problems, refresh, steps, choice, servers, editor, server_name, command, url, headers, add,
                      remove, ToolsController(session.services))


def wire_tools_panel(panel: ToolsPanel, session: ChatSession, chat_id: gr.State) -> None:
    @shows_errors
    def pick(cid: int | None, names: list[str]) -> None:
        session.set_tools(cid, names or [])

    @shows_errors
    def set_steps(value: float | None) -> None:
        if value is None or value != int(value) or not 0 <= value <= MAX_STEPS:
            raise UserError(f"The step limit is a whole number from 0 to {MAX_STEPS}; it stays "
                            f"{session.services.settings.get().max_tool_steps}.")
        session.services.settings.update(max_tool_steps=int(value))

    @shows_errors
    def set_choice(value: str) -> None:
        session.services.settings.update(tool_choice=value)

    panel.choice.input(set_choice, [panel.choice], None, show_progress="hidden")
    panel.box.input(pick, [chat_id, panel.box], None, show_progress="hidden")
    panel.steps.input(set_steps, [panel.steps], None, show_progress="hidden")
    def values(cid: int | None) -> tuple:
        return panel_values(session, cid, panel.controller)

    chat_id.change(values, [chat_id], panel.shown, show_progress="hidden")  # another chat shown: its tools
    panel.refresh.click(values, [chat_id], panel.shown, show_progress="hidden")

    @shows_errors
    def add(name: str, command: str, url: str, headers: str) -> str:
        return panel.controller.add(name, command, url, headers)

    @shows_errors
    def remove(name: str) -> str:
        return panel.controller.remove(name)

    panel.add.click(add, [panel.server_name, panel.command, panel.url, panel.headers], [panel.servers]).then(
        values, [chat_id], panel.shown, show_progress="hidden")
    panel.remove.click(remove, [panel.server_name], [panel.servers]).then(values, [chat_id], panel.shown,
                                                                          show_progress="hidden")
