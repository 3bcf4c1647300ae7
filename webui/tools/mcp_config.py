"""The MCP servers the operator configured: ``<user data>/mcp_servers.json``, the one place a command to run
as an MCP server can come from.

    {"servers": {
        "files": {"command": ["npx", "-y", "@modelcontextprotocol/server-filesystem", "/srv/shared"],
                  "env": {"NODE_OPTIONS": "--max-old-space-size=512"}},
        "search": {"url": "https://mcp.example.com/mcp", "headers": {"Authorization": "Bearer sk-..."}}
    }}

A server is either stdio (``command``: the program and its arguments, as a list; optional ``env`` and ``cwd``)
or streamable HTTP (``url``, optional ``headers``). The format of Claude Desktop, Cursor and
text-generation-webui's ``mcp.json`` is read too: a top-level ``mcpServers`` instead of ``servers``, a
``command`` string with ``args``, and ``"type": "stdio" | "http" | "streamable-http"``; ``"disabled": true``
leaves a server out. Adding or removing a server rewrites the file atomically and keeps whatever else is in
it; a file that cannot be read is never rewritten.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from webui.fsutil import atomic_write_text
from webui.safeload import load_json
from webui.tools.spec import ToolProblem

CONFIG_FILE_NAME = "mcp_servers.json"
SERVER_NAME = re.compile(r"^[A-Za-z0-9_-]{1,32}$")
KNOWN_KEYS = {"type", "command", "args", "env", "cwd", "url", "headers", "disabled"}
TYPES = {"stdio": "stdio", "http": "http", "streamable-http": "http", "streamable_http": "http",
         "streamableHttp": "http"}


class McpConfigError(ValueError):
    """The config file, or a server in it, is not what it should be; the message says where and what to do."""


@dataclass(frozen=True)
class McpServer:
    """One configured MCP server: ``command`` for stdio, ``url`` for streamable HTTP (one of them)."""

    name: str
    command: tuple[str, ...] = ()  # the program and its arguments
    env: dict[str, str] = field(default_factory=dict, repr=False, hash=False)  # over a minimal default env
    cwd: str | None = None
    url: str = ""
    headers: dict[str, str] = field(default_factory=dict, repr=False, hash=False)  # may hold credentials

    @property
    def transport(self) -> str:
        return "stdio" if self.command else "http"

    def to_json(self) -> dict[str, Any]:
        """The entry as written in the config file (our own format)."""
        if self.command:
            entry: dict[str, Any] = {"command": list(self.command)}
            if self.env:
                entry["env"] = dict(self.env)
            if self.cwd:
                entry["cwd"] = self.cwd
            return entry
        return {"url": self.url, "headers": dict(self.headers)} if self.headers else {"url": self.url}

    @classmethod
    def from_json(cls, name: str, entry: Any) -> McpServer:
        """A server from its config entry; McpConfigError names the server and the field that is wrong."""
        if not isinstance(name, str) or not SERVER_NAME.match(name):
            raise McpConfigError(f"the server name {name!r} must be 1 to 32 letters, digits, '_' or '-' (its tools "
                                 "may be called <server>__<tool>)")
        if not isinstance(entry, dict):
            raise McpConfigError(f"server {name!r}: the entry must be an object, got {type(entry).__name__}")
        unknown = sorted(set(entry) - KNOWN_KEYS)
        if unknown:
            raise McpConfigError(f"server {name!r}: unknown key {unknown[0]!r}; the keys are "
                                 f"{', '.join(sorted(KNOWN_KEYS))}")
        kind = _kind(name, entry)
        if kind == "stdio":
            return cls(name, command=_command(name, entry), env=_strings(name, entry, "env"),
                       cwd=_optional_string(name, entry, "cwd"))
        return cls(name, url=_url(name, entry), headers=_strings(name, entry, "headers"))


def _kind(name: str, entry: dict[str, Any]) -> str:
    if "command" in entry and "url" in entry:
        raise McpConfigError(f"server {name!r}: give either \"command\" (stdio) or \"url\" (streamable HTTP), "
                             "not both")
    declared = entry.get("type")
    if declared is not None and declared not in TYPES:
        hint = " (the older SSE transport is not supported; use the server's streamable HTTP URL)" \
            if declared == "sse" else ""
        raise McpConfigError(f"server {name!r}: unknown type {declared!r}; use \"stdio\" or \"http\"{hint}")
    kind = "stdio" if "command" in entry else "http" if "url" in entry else None
    if kind is None:
        raise McpConfigError(f"server {name!r}: give \"command\" (a list: the program and its arguments) for a "
                             "stdio server, or \"url\" for a streamable HTTP server")
    if declared is not None and TYPES[declared] != kind:
        raise McpConfigError(f"server {name!r}: type {declared!r} does not go with "
                             f"{'command' if kind == 'stdio' else 'url'}")
    misplaced = sorted(set(entry) & ({"url", "headers"} if kind == "stdio" else {"args", "env", "cwd"}))
    if misplaced:
        raise McpConfigError(f"server {name!r}: {misplaced[0]!r} does not apply to a {kind} server")
    return kind


def _command(name: str, entry: dict[str, Any]) -> tuple[str, ...]:
    command, args = entry["command"], entry.get("args", [])
    argv = [command] if isinstance(command, str) else command
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) and a for a in argv):
        raise McpConfigError(f"server {name!r}: \"command\" must be a list of strings, the program first "
                             "(e.g. [\"python\", \"-m\", \"my_server\"])")
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise McpConfigError(f"server {name!r}: \"args\" must be a list of strings")
    return tuple(argv + args)


def _url(name: str, entry: dict[str, Any]) -> str:
    url = entry["url"]
    if not isinstance(url, str) or not re.match(r"^https?://[^\s/]+", url):
        raise McpConfigError(f"server {name!r}: \"url\" must be an http:// or https:// address, got {url!r}")
    return url


def _strings(name: str, entry: dict[str, Any], key: str) -> dict[str, str]:
    value = entry.get(key, {})
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise McpConfigError(f"server {name!r}: {key!r} must be an object of strings, e.g. {{\"NAME\": \"value\"}}")
    return dict(value)


def _optional_string(name: str, entry: dict[str, Any], key: str) -> str | None:
    value = entry.get(key)
    if value is not None and not isinstance(value, str):
        raise McpConfigError(f"server {name!r}: {key!r} must be a string")
    return value


@dataclass(frozen=True)
class McpConfig:
    servers: tuple[McpServer, ...]
    problems: tuple[ToolProblem, ...]  # servers left out for an error in their entry


class McpServerStore:
    """Reads the config file and adds or removes servers in it (atomic writes, one writer at a time)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()

    def read(self) -> McpConfig:
        """The servers in the file (none when there is no file). A server whose entry is wrong is left out and
        named in ``problems``; McpConfigError when the file as a whole cannot be read."""
        data = self._load()
        if data is None:
            return McpConfig((), ())
        servers: list[McpServer] = []
        problems: list[ToolProblem] = []
        for name, entry in _servers_of(data, self.path).items():
            if isinstance(entry, dict) and entry.get("disabled") is True:
                continue
            try:
                servers.append(McpServer.from_json(name, entry))
            except McpConfigError as e:
                problems.append(ToolProblem("config", str(self.path), f"{e}; fix the entry in {self.path}"))
        return McpConfig(tuple(servers), tuple(problems))

    def add(self, server: McpServer, *, replace: bool = False) -> None:
        """Write ``server`` into the file (created if missing); McpConfigError if the name is taken (unless
        ``replace``) or the file cannot be read (it is then left as it is)."""
        entry = server.to_json()
        McpServer.from_json(server.name, entry)  # never write an entry that would not read back
        with self._lock:
            data = self._load() or {}
            if "servers" not in data and "mcpServers" not in data:
                data["servers"] = {}
            servers = _servers_of(data, self.path)
            if server.name in servers and not replace:
                raise McpConfigError(f"there is already a server named {server.name!r}; remove it first or "
                                     "choose another name")
            servers[server.name] = entry
            self._write(data)

    def remove(self, name: str) -> None:
        """Take the server ``name`` out of the file; McpConfigError if there is none of that name."""
        with self._lock:
            data = self._load()
            servers = _servers_of(data, self.path) if data is not None else {}
            if name not in servers:
                raise McpConfigError(f"there is no server named {name!r} in {self.path}")
            del servers[name]
            self._write(data)

    def _load(self) -> dict[str, Any] | None:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as e:
            raise McpConfigError(f"{self.path} cannot be read: {e}") from None
        try:
            data = load_json(text)
        except ValueError as e:
            raise McpConfigError(f"{self.path} is not valid JSON ({e}); fix it by hand, it was left as it is") \
                from None
        if not isinstance(data, dict):
            raise McpConfigError(f"{self.path} must hold an object: {{\"servers\": {{\"<name>\": {{...}}}}}}")
        return data

    def _write(self, data: Any) -> None:
        atomic_write_text(self.path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def _servers_of(data: dict[str, Any], path: Path) -> dict[str, Any]:
    """The file's mapping of servers, as it is in ``data`` (so edits to it land in ``data``)."""
    keys = [k for k in ("servers", "mcpServers") if k in data]
    if len(keys) == 2:
        raise McpConfigError(f"{path} has both \"servers\" and \"mcpServers\"; keep one")
    if not keys:
        raise McpConfigError(f"{path} must hold {{\"servers\": {{\"<name>\": {{...}}}}}} (or Claude Desktop's "
                             "\"mcpServers\")")
    servers = data[keys[0]]
    if not isinstance(servers, dict):
        raise McpConfigError(f"{path}: \"{keys[0]}\" must be an object of servers by name")
    return servers
