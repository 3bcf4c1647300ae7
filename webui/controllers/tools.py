"""The MCP servers of ``<user data>/mcp_servers.json`` as the Chat tab's Tools panel lists and changes them (#44).

A server is a command the workbench runs, or a URL it sends headers to: adding one is running code on the server.
So the list is changed from the UI only by its operator: anyone on a workbench of one's own (no login, not
``--listen``), an admin user (``--ui-admin``) with a login, and nobody on a ``--listen`` server without one (edit
the file there). Everyone sees the list (header and env values are never shown: they may hold keys).
"""

from __future__ import annotations

import shlex

from webui.controllers.errors import UserError
from webui.owner import current as current_owner
from webui.services import Services
from webui.tools import McpConfigError, McpServer

NOT_YOURS = ("Only the server's operator changes its MCP servers: an admin user (--ui-admin), or anyone on a "
             "workbench without --listen; edit <user data>/mcp_servers.json on the server otherwise.")


class ToolsController:
    def __init__(self, services: Services) -> None:
        self.services = services
        self.store = services.tools.mcp_servers

    def may_change(self) -> bool:
        """Whether the caller may add and remove MCP servers here."""
        config = self.services.config
        if config.ui_users:
            return current_owner() in config.ui_admins
        return not config.listen

    def listing(self) -> str:
        """The configured servers as a Markdown table (what each runs or reaches; header and env names only)."""
        try:
            config = self.store.read()
        except McpConfigError as exc:
            return f"⚠ {exc}"
        if not config.servers:
            return "No MCP servers are configured."
        rows = ["| server | runs / reaches | with |", "| --- | --- | --- |"]
        for s in config.servers:
            what = " ".join(shlex.quote(a) for a in s.command) if s.command else s.url
            extra = ", ".join([*(f"header {k}" for k in s.headers), *(f"env {k}" for k in s.env)]) or "-"
            rows.append(f"| {s.name} | `{what.replace('|', '/')}` | {extra} |")
        return "\n".join(rows)

    def add(self, name: str, command: str, url: str, headers: str) -> str:
        """Add a server: ``command`` (a command line, split as a shell would) or ``url`` (with ``headers``, one
        ``Name: value`` a line); the listing after."""
        self._check()
        command, url = command.strip(), url.strip()
        if bool(command) == bool(url):
            raise UserError("Give the server a command (stdio) or a URL (streamable HTTP), not both.")
        try:
            argv = tuple(shlex.split(command)) if command else ()
        except ValueError as exc:
            raise UserError(f"The command cannot be read as a command line: {exc}") from exc
        if command and headers.strip():
            raise UserError("Headers go with a URL; a command's server gets no headers.")
        try:
            self.store.add(McpServer(name.strip(), command=argv, url=url, headers=_headers(headers)))
        except McpConfigError as exc:
            raise UserError(str(exc)) from exc
        return self.listing()

    def remove(self, name: str) -> str:
        self._check()
        try:
            self.store.remove(name.strip())
        except McpConfigError as exc:
            raise UserError(str(exc)) from exc
        return self.listing()

    def _check(self) -> None:
        if not self.may_change():
            raise UserError(NOT_YOURS)


def _headers(text: str) -> dict[str, str]:
    """``Name: value`` lines as headers; UserError names a line that is not one."""
    out: dict[str, str] = {}
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        name, sep, value = line.partition(":")
        if not sep or not name.strip():
            raise UserError(f"Header line {i} must be 'Name: value', got {line.strip()!r}")
        out[name.strip()] = value.strip()
    return out
