"""ToolBox: every tool the model can be offered, from one place, and the one way to call them.

The tools are the built-ins (webui/tools/builtin.py), the tool files in ``<user data>/tools/``
(webui/tools/files.py) and the tools of the MCP servers in ``<user data>/mcp_servers.json``
(webui/tools/mcp_config.py, webui/tools/mcp_client.py).

Names: a tool file replaces the built-in of the same name; two tool files with one name keep the first (by
file name) and list the other as a problem. An MCP tool keeps its own name unless a local tool (built-in or
file) or another server's tool has it too: then it is offered as ``<server>__<tool>`` (e.g. ``files__read``),
so local tools keep their names whatever servers are added (as in text-generation-webui, where local tools
win). Characters OpenAI does not allow in a function name become ``_``.

Every call has a time limit and its text an output limit (cut with a marker saying so).
"""

from __future__ import annotations

import builtins
import json
import re
import threading
import time
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from webui.tools.builtin import BUILTIN_TOOLS, BuiltinTool
from webui.tools.calculator import CalculatorError
from webui.tools.files import ToolFiles, call_file_tool
from webui.tools.mcp_client import McpClients, McpTool
from webui.tools.mcp_config import CONFIG_FILE_NAME, McpConfigError, McpServer, McpServerStore
from webui.tools.spec import (NAME_PATTERN, ToolProblem, ToolResult, ToolSpec, arguments_problem, failed,
                              parameters_problem, result_text, truncate)


@dataclass(frozen=True)
class ToolList:
    """What list() found: the tools to offer, and the files, servers and entries that gave none."""

    tools: tuple[ToolSpec, ...]
    problems: tuple[ToolProblem, ...]

    def get(self, name: str) -> ToolSpec | None:
        return next((t for t in self.tools if t.name == name), None)

    def openai(self) -> list[dict[str, Any]]:
        """The tools in OpenAI's ``tools`` format (what webui/chat/tools.py's plan_tools takes)."""
        return [t.openai() for t in self.tools]


class ToolBox:
    """Built-in, file and MCP tools behind one list() and one call(), safe to use from several threads."""

    def __init__(self, tools_dir: Path, mcp_config: Path, *, call_timeout: float = 30.0,
                 max_output_chars: int = 20_000, list_wait: float = 10.0, import_timeout: float = 10.0,
                 mcp_connect_timeout: float = 60.0) -> None:
        self.call_timeout = call_timeout
        self.max_output_chars = max_output_chars
        self.list_wait = list_wait
        self.mcp_connect_timeout = mcp_connect_timeout
        self.files = ToolFiles(tools_dir, import_timeout=import_timeout)
        self.mcp_servers = McpServerStore(mcp_config)  # the UI's add/remove go through this
        self._builtins = {b.spec.name: b for b in BUILTIN_TOOLS}
        self._lock = threading.Lock()
        self._mcp: McpClients | None = None
        self._closed = False
        self._listing: ToolList | None = None

    @classmethod
    def for_user_data(cls, user_data_dir: Path, **options: Any) -> ToolBox:
        """The tool box of ``<user data>/tools/`` and ``<user data>/mcp_servers.json``."""
        return cls(Path(user_data_dir) / "tools", Path(user_data_dir) / CONFIG_FILE_NAME, **options)

    def list(self) -> ToolList:
        """The tools now: tool files read again where they changed, the MCP config read again (servers
        restarted when it changed), MCP servers asked for their tools (at most ``list_wait`` s)."""
        file_specs, problems = self.files.scan()
        local = {s.name: s for s in (b.spec for b in BUILTIN_TOOLS)}
        local.update((s.name, s) for s in file_specs)
        mcp_tools, mcp_problems = self._mcp_tools()
        mcp_specs, naming_problems = _mcp_specs(mcp_tools, set(local))
        listing = ToolList(tuple(local.values()) + tuple(mcp_specs),
                           tuple(problems) + tuple(mcp_problems) + tuple(naming_problems))
        with self._lock:
            self._listing = listing
        return listing

    def call(self, name: str, arguments: dict[str, Any] | str, timeout: float | None = None) -> ToolResult:
        """Run the tool ``name`` (as list() named it) with ``arguments`` (an object, or its JSON text as a
        model wrote it). Never raises for the tool's sake: a failure is a result whose ``error`` says what
        happened and whose ``text`` tells the model (``error: ...``)."""
        timeout = self.call_timeout if timeout is None else timeout
        with self._lock:
            listing = self._listing
        spec = (listing or self.list()).get(name)
        if spec is None:
            spec = self.list().get(name)  # a tool added since the last list()
        if spec is None:
            known = ", ".join(t.name for t in (self._listing or ToolList((), ())).tools)
            return failed(name, "unknown_tool", f"there is no tool named {name!r}; the tools are: {known}")
        parsed = _arguments(arguments)
        if isinstance(parsed, str):
            return failed(name, "bad_arguments", parsed)
        problem = arguments_problem(spec.parameters, parsed)
        if problem:
            return failed(name, "bad_arguments", problem)
        if spec.kind == "file":
            return call_file_tool(spec, parsed, timeout, self.max_output_chars)
        if spec.kind == "builtin":
            result = _call_builtin(self._builtins[spec.name], parsed)
        else:
            result = self._call_mcp(spec, parsed, timeout)
        text, cut = truncate(result.text, self.max_output_chars)
        return replace(result, text=text, truncated=cut)

    def close(self) -> None:
        """Stop the MCP servers' sessions (and stdio servers). Idempotent."""
        with self._lock:
            self._closed = True
            clients, self._mcp = self._mcp, None
        if clients is not None:
            clients.close()

    def __enter__(self) -> ToolBox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _mcp_tools(self) -> tuple[builtins.list[McpTool], builtins.list[ToolProblem]]:  # list: our method
        try:
            config = self.mcp_servers.read()
        except McpConfigError as e:  # the file as a whole is unreadable: no servers until it is fixed
            return [], [ToolProblem("config", str(self.mcp_servers.path), str(e))]
        clients = self._use_servers(config.servers)
        tools, problems = clients.list_tools(self.list_wait) if clients is not None else ([], [])
        return tools, list(config.problems) + problems

    def _use_servers(self, servers: tuple[McpServer, ...]) -> McpClients | None:
        """The MCP clients for ``servers``, made anew when the configured servers change (every server then
        restarts: simple, and config changes are rare); None when there are no servers."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the tool box is closed")
            old = self._mcp
            if old is not None and old.servers == servers:
                return old
            self._mcp = McpClients(servers, connect_timeout=self.mcp_connect_timeout) if servers else None
            new = self._mcp
        if old is not None:
            old.close()
        return new

    def _call_mcp(self, spec: ToolSpec, arguments: dict[str, Any], timeout: float) -> ToolResult:
        with self._lock:
            clients = self._mcp
        if clients is None or spec.origin not in {s.name for s in clients.servers}:
            return failed(spec.name, "unavailable", f"the MCP server {spec.origin!r} is no longer configured")
        return replace(clients.call(spec.origin, spec.remote_name, arguments, timeout), tool=spec.name)


def _mcp_specs(tools: list[McpTool], local_names: set[str]) -> tuple[list[ToolSpec], list[ToolProblem]]:
    """The MCP tools as offered: plain names where unique, ``<server>__<tool>`` where not (see the top)."""
    plain = [_safe_name(t.name) for t in tools]
    counts = Counter(plain)
    specs: list[ToolSpec] = []
    problems: list[ToolProblem] = []
    taken = set(local_names)
    for tool, name in zip(tools, plain):
        if name in local_names or counts[name] > 1:
            name = f"{tool.server}__{name}"
        problem = parameters_problem(tool.parameters)
        if problem is None and (name in taken or not NAME_PATTERN.match(name)):
            problem = f"it cannot be offered as {name!r} (too long, or taken)"
        if problem:
            problems.append(ToolProblem("mcp", tool.server, f"its tool {tool.name!r} is left out: {problem}"))
            continue
        taken.add(name)
        specs.append(ToolSpec(name, tool.description, tool.parameters, kind="mcp", origin=tool.server,
                              remote_name=tool.name))
    return specs, problems


def _safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", name)[:64] or "_"


def _arguments(arguments: dict[str, Any] | str) -> dict[str, Any] | str:
    """The arguments as an object, or what is wrong with them (a message for the model)."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except ValueError as e:
            return f"the arguments are not valid JSON ({e}); send a JSON object such as {{\"name\": \"value\"}}"
    if not isinstance(arguments, dict):
        return f"the arguments must be a JSON object, got {type(arguments).__name__}"
    return arguments


def _call_builtin(tool: BuiltinTool, arguments: dict[str, Any]) -> ToolResult:
    """Built-ins run here, without a process or time limit: each one is bounded by its own limits."""
    start = time.monotonic()
    try:
        value = tool.run(arguments)
    except CalculatorError as e:
        return failed(tool.spec.name, "failed", str(e), time.monotonic() - start)
    return ToolResult(tool.spec.name, result_text(value), None, time.monotonic() - start)
