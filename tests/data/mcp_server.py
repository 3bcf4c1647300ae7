"""A small MCP server for tests/unit/test_tools_mcp.py, written with the official SDK (mcp 2.x's MCPServer, the
former FastMCP).

    python tests/data/mcp_server.py stdio
    python tests/data/mcp_server.py http PORT

Its tools: add, echo_header (the value of a request header, over HTTP), pid (the server's process id), crash (the
process exits mid-call), sleep (answers after the given seconds) and big (a long text).
"""

from __future__ import annotations

import os
import sys

import anyio
from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("workbench-test")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def echo_header(name: str, ctx: Context) -> str:
    """The value of the HTTP request header `name` ("" when absent or not over HTTP)."""
    headers = ctx.headers or {}
    return headers.get(name.lower(), "")


@server.tool()
def pid() -> int:
    """The server's process id."""
    return os.getpid()


@server.tool()
def crash() -> str:
    """Exit the server process in the middle of the call."""
    sys.stdout.flush()
    os._exit(3)


@server.tool()
async def sleep(seconds: float) -> str:
    """Wait, then answer."""
    await anyio.sleep(seconds)
    return f"slept {seconds}"


@server.tool()
def big(chars: int) -> str:
    """A text of `chars` characters."""
    return "x" * chars


if __name__ == "__main__":
    if sys.argv[1] == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
