"""MCP servers' tools through the official SDK (``mcp``), for a threaded app.

The SDK is async; :class:`McpClients` runs it on an event loop in a thread of its own and offers blocking
calls with time limits. Each server keeps one session, opened on first use and held by a task of its own
(the SDK's transports must be entered and left by the same task). A server that crashes, closes the connection
or does not answer in time has its session dropped, and the next use starts a new one: a stdio server is
started again, an HTTP server gets a new session. Only webui/tools/toolbox.py makes an McpClients, from the
operator's config file (webui/tools/mcp_config.py): no other command is ever run.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import math
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, AsyncIterator, Coroutine, Sequence, TypeVar

import anyio

from webui.tools.mcp_config import McpServer
from webui.tools.spec import EMPTY_PARAMETERS, ToolProblem, ToolResult, failed, result_text

log = logging.getLogger(__name__)
T = TypeVar("T")
MAX_TOOL_PAGES = 100

if TYPE_CHECKING:  # the SDK itself is imported where a server is first used: it takes a second or two to import,
    from mcp import ClientSession  # and every start of the workbench (and of a batch run) would pay for it


@dataclass(frozen=True)
class McpTool:
    """A tool as its server lists it."""

    server: str
    name: str
    description: str
    parameters: dict[str, Any] = field(hash=False)


class McpClientsClosed(RuntimeError):
    pass


class McpClients:
    """Sessions with the given MCP servers, used from any thread; close() stops them (and stdio servers)."""

    def __init__(self, servers: Sequence[McpServer], *, connect_timeout: float = 60.0) -> None:
        names = [s.name for s in servers]
        if len(set(names)) != len(names):
            raise ValueError(f"MCP server names must be unique, got {names}")
        self.servers = tuple(servers)
        self._links = {s.name: _Link(s, connect_timeout) for s in servers}
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="mcp-clients", daemon=True)
        self._thread.start()
        self._state_lock = threading.Lock()
        self._closed = False

    def list_tools(self, wait: float = 10.0) -> tuple[list[McpTool], list[ToolProblem]]:
        """Every server's tools (listed once per session), and a problem for each server that gave none within
        ``wait`` seconds. A server still starting goes on starting and is asked again next time."""
        outcomes = self._submit(self._list_all(wait), wait)
        tools = [t for outcome in outcomes if isinstance(outcome, list) for t in outcome]
        return tools, [outcome for outcome in outcomes if isinstance(outcome, ToolProblem)]

    def call(self, server: str, tool: str, arguments: dict[str, Any], timeout: float = 30.0) -> ToolResult:
        """Call ``tool`` on ``server``; every failure comes back as a result whose text says what happened."""
        if server not in self._links:
            return failed(tool, "unknown_tool", f"there is no MCP server named {server!r}")
        return self._submit(self._links[server].call(tool, arguments, timeout), timeout)

    def close(self) -> None:
        """End every session (stdio servers are stopped) and the loop's thread. Calls after it raise."""
        with self._state_lock:
            if self._closed:
                return
            self._closed = True
        try:
            asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(timeout=30)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=30)
            if not self._thread.is_alive():
                self._loop.close()

    def __enter__(self) -> McpClients:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _submit(self, coroutine: Coroutine[Any, Any, T], wait: float) -> T:
        with self._state_lock:
            if self._closed:
                coroutine.close()
                raise McpClientsClosed("the MCP clients are closed")
            future = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        try:
            # the coroutine keeps its own time limit; this margin only guards against a stuck loop
            return future.result(wait + 10)
        except concurrent.futures.CancelledError:
            raise McpClientsClosed("the MCP clients were closed during the call") from None

    async def _list_all(self, wait: float) -> list[list[McpTool] | ToolProblem]:
        return list(await asyncio.gather(*(link.list_tools(wait) for link in self._links.values())))

    async def _shutdown(self) -> None:
        holders = [task for link in self._links.values() for task in link.stop()]
        if holders:
            _, pending = await asyncio.wait(holders, timeout=15)
            for task in pending:
                task.cancel()
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in others:
            task.cancel()
        await asyncio.gather(*others, return_exceptions=True)


class _Link:
    """One server's session. Used only on the loop's thread, so it needs no lock."""

    def __init__(self, server: McpServer, connect_timeout: float) -> None:
        self.server = server
        self.connect_timeout = connect_timeout
        self.tools: list[McpTool] | None = None
        self._ready: asyncio.Future[ClientSession] | None = None
        self._stop: asyncio.Event | None = None
        self._holders: set[asyncio.Task[None]] = set()

    @property
    def started(self) -> str:
        return "started" if self.server.transport == "stdio" else "reached"

    @property
    def next_time(self) -> str:
        """What the next call does after this session is dropped."""
        return "it is restarted on the next call" if self.server.transport == "stdio" else \
            "the next call connects again"

    async def list_tools(self, wait: float) -> list[McpTool] | ToolProblem:
        if self.tools is not None:
            return self.tools
        name = self.server.name
        try:
            session = await self.session(wait)
        except asyncio.TimeoutError:
            return ToolProblem("mcp", name, f"the server is not ready after {wait:g} s; it goes on starting (for "
                               f"up to {self.connect_timeout:g} s) and its tools are listed once it is")
        except Exception as e:  # noqa: BLE001 - the reason goes into the problem the user sees
            return ToolProblem("mcp", name, f"the server could not be {self.started}: {reason(e)}; check its "
                               "entry in mcp_servers.json")
        try:
            tools = await asyncio.wait_for(_all_tools(name, session), wait)
        except (asyncio.TimeoutError, Exception) as e:  # noqa: BLE001 - as above
            self.drop()
            why = f"did not list its tools within {wait:g} s" if isinstance(e, asyncio.TimeoutError) \
                else f"could not list its tools: {reason(e)}"
            return ToolProblem("mcp", name, f"the server {why}")
        self.tools = tools
        return tools

    async def call(self, tool: str, arguments: dict[str, Any], timeout: float) -> ToolResult:
        name, start = self.server.name, time.monotonic()
        try:
            session = await self.session(timeout)
        except asyncio.TimeoutError:
            return failed(tool, "unavailable", f"the MCP server {name!r} is not ready after {timeout:g} s", timeout)
        except Exception as e:  # noqa: BLE001 - the reason goes back to the model and the caller
            return failed(tool, "unavailable", f"the MCP server {name!r} could not be {self.started}: {reason(e)}",
                          time.monotonic() - start)
        from mcp.shared.exceptions import MCPError
        from mcp_types.jsonrpc import CONNECTION_CLOSED

        try:
            result = await asyncio.wait_for(session.call_tool(tool, arguments),
                                            max(0.01, timeout - (time.monotonic() - start)))
        except asyncio.TimeoutError:
            self.drop()
            return failed(tool, "timeout", f"the MCP server {name!r} did not answer within {timeout:g} s; "
                          f"{self.next_time}", time.monotonic() - start)
        except MCPError as e:
            if e.code != CONNECTION_CLOSED:  # the server answered, with a protocol error
                return failed(tool, "failed", f"the MCP server {name!r} refused the call: {e.message}",
                              time.monotonic() - start)
            self.drop()
            return failed(tool, "crashed", f"the MCP server {name!r} closed the connection during the call (it "
                          f"may have crashed); {self.next_time}", time.monotonic() - start)
        except Exception as e:  # noqa: BLE001 - a broken transport: said to the model, the session restarted
            self.drop()
            return failed(tool, "crashed", f"the call to the MCP server {name!r} failed: {reason(e)}; "
                          f"{self.next_time}", time.monotonic() - start)
        return _result(tool, result, time.monotonic() - start)

    async def session(self, wait: float) -> ClientSession:
        """The open session, started if need be; TimeoutError after ``wait`` s (the start goes on)."""
        if self._ready is None:
            ready: asyncio.Future[ClientSession] = asyncio.get_running_loop().create_future()
            ready.add_done_callback(_mark_retrieved)
            stop = asyncio.Event()
            task = asyncio.create_task(self._hold(ready, stop), name=f"mcp-server-{self.server.name}")
            self._holders.add(task)
            task.add_done_callback(self._holders.discard)
            self._ready, self._stop = ready, stop
        return await asyncio.wait_for(asyncio.shield(self._ready), wait)

    def drop(self) -> None:
        """Let the session go (it ends in the background); the next use starts a new one."""
        if self._stop is not None:
            self._stop.set()
        self._ready = self._stop = None
        self.tools = None

    def stop(self) -> list[asyncio.Task[None]]:
        self.drop()
        return list(self._holders)

    async def _hold(self, ready: asyncio.Future[ClientSession], stop: asyncio.Event) -> None:
        """Open the session, hand it over through ``ready``, and keep it until ``stop`` is set."""
        from mcp import ClientSession

        try:
            with anyio.CancelScope(deadline=anyio.current_time() + self.connect_timeout) as scope:
                async with _transport(self.server) as (read, write), ClientSession(read, write) as session:
                    await session.initialize()
                    scope.deadline = math.inf
                    ready.set_result(session)
                    await stop.wait()
            if not ready.done():
                raise TimeoutError(f"it was not ready within {self.connect_timeout:g} s")
        except Exception as e:  # noqa: BLE001 - handed to whoever waits for the session, or logged
            if not ready.done():
                ready.set_exception(e)
            else:
                log.warning("MCP server %r: the session ended with an error: %s", self.server.name, reason(e))
        finally:
            if not ready.done():
                ready.set_exception(ConnectionError("the session was closed before it was ready"))
            if self._ready is ready:  # still the current session: the next use starts a new one
                self.drop()


@contextlib.asynccontextmanager
async def _transport(server: McpServer) -> AsyncIterator[Any]:
    if server.transport == "stdio":
        from mcp import StdioServerParameters, stdio_client

        params = StdioServerParameters(command=server.command[0], args=list(server.command[1:]),
                                       env=dict(server.env) or None, cwd=server.cwd)
        async with stdio_client(params, errlog=sys.stderr) as streams:  # the server's log goes to ours
            yield streams
    else:
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        timeout = httpx2.Timeout(30.0, read=300.0)  # the SDK's defaults: a response stream may stay open long
        async with httpx2.AsyncClient(headers=server.headers, timeout=timeout) as http, \
                streamable_http_client(server.url, http_client=http) as streams:
            yield streams


async def _all_tools(server: str, session: ClientSession) -> list[McpTool]:
    from mcp_types import PaginatedRequestParams

    tools: list[McpTool] = []
    cursor: str | None = None
    for _ in range(MAX_TOOL_PAGES):
        page = await session.list_tools(params=PaginatedRequestParams(cursor=cursor) if cursor else None)
        tools += [McpTool(server, t.name, t.description or "", t.input_schema or dict(EMPTY_PARAMETERS))
                  for t in page.tools]
        cursor = page.next_cursor
        if not cursor:
            break
    return tools


def _result(tool: str, result: Any, seconds: float) -> ToolResult:
    from mcp_types import CallToolResult

    if not isinstance(result, CallToolResult):
        return failed(tool, "failed", f"the MCP server answered with a {type(result).__name__}, not a tool "
                      "result", seconds)
    parts = [_content_text(block) for block in result.content]
    if not parts and result.structured_content is not None:
        parts = [result_text(result.structured_content)]
    text = "\n".join(parts)
    if result.is_error:
        return failed(tool, "failed", text or "the tool reported an error without saying which", seconds)
    return ToolResult(tool, text, None, seconds)


def _content_text(block: Any) -> str:
    """What the model reads for one content block (a text model: media are named, not shown)."""
    from mcp_types import AudioContent, EmbeddedResource, ImageContent, ResourceLink, TextContent

    if isinstance(block, TextContent):
        return block.text
    if isinstance(block, (ImageContent, AudioContent)):
        kind = "image" if isinstance(block, ImageContent) else "audio"
        return f"[{kind}: {block.mime_type}, {len(block.data) * 3 // 4} bytes]"
    if isinstance(block, ResourceLink):
        return f"[resource: {block.uri}]"
    if isinstance(block, EmbeddedResource):
        text = getattr(block.resource, "text", None)
        return text if isinstance(text, str) else f"[resource: {block.resource.uri}]"
    return str(block)


def reason(error: BaseException) -> str:
    """An error as one line, the first leaf of an exception group (anyio's task groups wrap what they raise)."""
    while getattr(error, "exceptions", None):
        error = error.exceptions[0]  # type: ignore[attr-defined]
    text = str(error) or type(error).__name__
    return text if isinstance(error, (OSError, TimeoutError)) else f"{type(error).__name__}: {text}"


def _mark_retrieved(future: asyncio.Future[Any]) -> None:
    """A start nobody waits for any more must not end as 'exception was never retrieved'."""
    if not future.cancelled():
        future.exception()
