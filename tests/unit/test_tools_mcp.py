"""MCP tools (#44) with real MCP servers (tests/data/mcp_server.py, written with the official SDK): one over stdio,
started by our client, and one over streamable HTTP, started here on 127.0.0.1 and stopped by its pid. Also the
config file: its formats, its errors, and adding and removing servers."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT
from webui.tools import McpConfigError, McpServer, McpServerStore, ToolBox
from webui.tools.mcp_client import McpTool
from webui.tools.toolbox import _mcp_specs

SERVER = ROOT / "tests" / "data" / "mcp_server.py"
HEADER = "X-Workbench-Test"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_http_server(port: int) -> subprocess.Popen:
    """The test server over streamable HTTP on 127.0.0.1:``port``, once it accepts connections."""
    process = subprocess.Popen([sys.executable, str(SERVER), "http", str(port)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return process
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                pytest.fail(f"the HTTP MCP server did not start (exit code {process.poll()})")
            time.sleep(0.1)


def stop(process: subprocess.Popen) -> None:
    """Stop a server by its pid (SIGTERM, then SIGKILL after 10 s)."""
    if process.poll() is None:
        os.kill(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.kill(process.pid, signal.SIGKILL)
        process.wait()


@pytest.fixture(scope="module")
def http_server():
    """The test server over streamable HTTP; its URL."""
    port = free_port()
    process = start_http_server(port)
    yield f"http://127.0.0.1:{port}/mcp"
    stop(process)


def write_config(path: Path, servers: dict) -> Path:
    path.write_text(json.dumps({"servers": servers}))
    return path


@pytest.fixture(scope="module")
def box(http_server, tmp_path_factory):
    """A tool box with both servers: the stdio one as "local", the HTTP one as "web" (with a header)."""
    folder = tmp_path_factory.mktemp("mcp")
    config = write_config(folder / "mcp_servers.json", {
        "local": {"command": [sys.executable, str(SERVER), "stdio"]},
        "web": {"url": http_server, "headers": {HEADER: "secret-1"}},
    })
    with ToolBox(folder / "tools", config, max_output_chars=500, list_wait=30) as tool_box:
        yield tool_box


def test_both_servers_tools_are_listed_with_their_schemas(box):
    listing = box.list()
    assert listing.problems == ()
    mcp = {t.name: t for t in listing.tools if t.kind == "mcp"}
    # both servers have the same tools, so each is offered as <server>__<tool>
    assert set(mcp) == {f"{server}__{tool}" for server in ("local", "web")
                        for tool in ("add", "echo_header", "pid", "crash", "sleep", "big")}
    add = mcp["web__add"]
    assert (add.origin, add.remote_name, add.description) == ("web", "add", "Add two integers.")
    assert add.parameters["properties"] == {"a": {"title": "A", "type": "integer"},
                                            "b": {"title": "B", "type": "integer"}}
    assert add.parameters["required"] == ["a", "b"]
    assert {"calculate", "get_datetime", "roll_dice"} <= {t.name for t in listing.tools}


def test_calls_go_to_the_server_over_stdio_and_http(box):
    assert box.call("local__add", {"a": 2, "b": 3}).text == "5"
    web = box.call("web__add", '{"a": 40, "b": 2}')
    assert web.ok and web.text == "42" and web.tool == "web__add" and web.seconds < 10
    assert box.call("web__echo_header", {"name": HEADER}).text == "secret-1"  # the configured header arrived
    bad = box.call("web__add", {"a": "two", "b": 3})
    assert bad.error.kind == "bad_arguments" and "a" in bad.error.message


def test_a_server_that_crashes_mid_call_gives_an_error_and_is_restarted(box):
    before = box.call("local__pid", {}).text
    crashed = box.call("local__crash", {})
    assert crashed.error.kind == "crashed"
    assert crashed.text == ("error: the MCP server 'local' closed the connection during the call (it may have "
                            "crashed); it is restarted on the next call")
    after = box.call("local__pid", {}, timeout=30)
    assert after.ok and after.text != before
    assert box.call("local__add", {"a": 1, "b": 1}).text == "2"


@pytest.mark.parametrize("server, then", [("local", "it is restarted on the next call"),
                                          ("web", "the next call connects again")])
def test_a_server_that_does_not_answer_in_time_gives_a_timeout(box, server, then):
    start = time.monotonic()
    hung = box.call(f"{server}__sleep", {"seconds": 30}, timeout=1)
    assert time.monotonic() - start < 5
    assert hung.error.kind == "timeout"
    assert hung.text == f"error: the MCP server '{server}' did not answer within 1 s; {then}"
    assert box.call(f"{server}__add", {"a": 1, "b": 2}, timeout=30).text == "3"


def test_an_http_server_that_dies_mid_call_is_an_error_and_is_connected_again_once_back(tmp_path):
    port = free_port()
    process = start_http_server(port)
    config = write_config(tmp_path / "mcp_servers.json", {"web": {"url": f"http://127.0.0.1:{port}/mcp"}})
    with ToolBox(tmp_path / "tools", config, list_wait=30) as tool_box:
        assert tool_box.call("add", {"a": 1, "b": 2}).text == "3"
        crashed = tool_box.call("crash", {})
        assert crashed.error.kind == "crashed" and "the next call connects again" in crashed.text
        process.wait(timeout=10)
        gone = tool_box.call("add", {"a": 1, "b": 2})
        assert gone.error.kind == "unavailable"
        assert gone.text.startswith("error: the MCP server 'web' could not be reached: ConnectError")
        process = start_http_server(port)
        try:
            assert tool_box.call("add", {"a": 1, "b": 2}).text == "3"
        finally:
            stop(process)


def test_a_long_answer_is_cut(box):
    result = box.call("web__big", {"chars": 5000})
    assert result.truncated and result.text.startswith("x" * 500)
    assert result.text.endswith("[output truncated: 5000 characters, only the first 500 are shown]")


def test_servers_that_cannot_start_or_be_reached_are_problems(tmp_path):
    config = write_config(tmp_path / "mcp_servers.json", {
        "missing": {"command": [str(tmp_path / "no-such-program")]},
        "nobody": {"url": f"http://127.0.0.1:{free_port()}/mcp"},
        "broken": {"command": "python", "url": "http://x"},
    })
    with ToolBox(tmp_path / "tools", config, list_wait=15) as tool_box:
        listing = tool_box.list()
        assert {t.kind for t in listing.tools} == {"builtin"}
        problems = {p.origin: p.message for p in listing.problems}
        assert problems["missing"].startswith("the server could not be started: [Errno 2] No such file")
        assert problems["nobody"].startswith("the server could not be reached:")
        assert "give either \"command\" (stdio) or \"url\"" in problems[str(config)]


def test_a_malformed_config_is_a_problem_and_is_never_rewritten(tmp_path):
    config = tmp_path / "mcp_servers.json"
    config.write_text('{"servers": {"a": ')
    with ToolBox(tmp_path / "tools", config) as tool_box:
        [problem] = tool_box.list().problems
        assert problem.kind == "config" and "is not valid JSON" in problem.message
        with pytest.raises(McpConfigError, match="left as it is"):
            tool_box.mcp_servers.add(McpServer("b", url="http://127.0.0.1:1/mcp"))
    assert config.read_text() == '{"servers": {"a": '


def test_servers_are_added_and_removed_in_the_file_and_picked_up(tmp_path, http_server):
    config = tmp_path / "mcp_servers.json"
    config.write_text(json.dumps({"note": "kept", "mcpServers": {}}))
    with ToolBox(tmp_path / "tools", config, list_wait=30) as tool_box:
        assert {t.kind for t in tool_box.list().tools} == {"builtin"}
        tool_box.mcp_servers.add(McpServer("web", url=http_server, headers={HEADER: "k"}))
        with pytest.raises(McpConfigError, match="already a server named 'web'"):
            tool_box.mcp_servers.add(McpServer("web", url=http_server))
        assert json.loads(config.read_text()) == {"note": "kept", "mcpServers": {
            "web": {"url": http_server, "headers": {HEADER: "k"}}}}
        listing = tool_box.list()
        assert {t.name for t in listing.tools if t.kind == "mcp"} >= {"add", "echo_header"}  # no clash: plain
        assert tool_box.call("echo_header", {"name": HEADER}).text == "k"
        tool_box.mcp_servers.remove("web")
        assert {t.kind for t in tool_box.list().tools} == {"builtin"}
        assert tool_box.call("add", {"a": 1, "b": 1}).error.kind == "unknown_tool"
        with pytest.raises(McpConfigError, match="no server named 'web'"):
            tool_box.mcp_servers.remove("web")
    assert not list(tmp_path.glob(".mcp_servers.json.*"))  # no temp files left behind


def test_claude_desktop_entries_are_read_and_wrong_entries_named(tmp_path):
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {
        "fs": {"command": "npx", "args": ["-y", "server-filesystem", "/tmp"], "env": {"K": "v"}},
        "remote": {"type": "http", "url": "https://example.com/mcp", "headers": {"Authorization": "Bearer t"}},
        "off": {"command": "x", "disabled": True},
        "old": {"type": "sse", "url": "https://example.com/sse"},
        "typo": {"comand": ["x"]},
        "bad name!": {"command": ["x"]},
    }}))
    read = McpServerStore(config).read()
    assert read.servers == (McpServer("fs", command=("npx", "-y", "server-filesystem", "/tmp"), env={"K": "v"}),
                            McpServer("remote", url="https://example.com/mcp",
                                      headers={"Authorization": "Bearer t"}))
    assert "Bearer" not in repr(read.servers) and "'K'" not in repr(read.servers)  # secrets stay out of logs
    messages = " | ".join(p.message for p in read.problems)
    assert "SSE transport is not supported" in messages
    assert "unknown key 'comand'" in messages
    assert "'bad name!' must be 1 to 32 letters" in messages


def test_an_mcp_tool_named_like_a_local_tool_gets_its_servers_prefix():
    schema = {"type": "object", "properties": {}}
    tools = [McpTool("calc", "calculate", "", schema), McpTool("calc", "sum.all", "", schema),
             McpTool("calc", "weird", "", {"type": "object", "properties": 3})]
    specs, problems = _mcp_specs(tools, {"calculate", "roll_dice"})
    assert [(s.name, s.remote_name) for s in specs] == [("calc__calculate", "calculate"), ("sum_all", "sum.all")]
    [problem] = problems
    assert problem.origin == "calc"
    assert problem.message.startswith("its tool 'weird' is left out: the parameters are not a valid JSON schema: 3")
