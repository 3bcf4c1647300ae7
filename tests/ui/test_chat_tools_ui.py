"""Tools in the Chat tab (#44), with the default model: tick text-generation-webui's roll_dice (its own file) and an
MCP server's tool (a real server written with the mcp SDK, started over stdio and over HTTP), ask, and the model's
call shows as a block with its result, which goes back to the model before it answers; edit the call's arguments
and a new version answers from the new result; a reload and an export keep the blocks; a broken tool file is listed
with its error."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.e2e.server import running_server, user_data_with_default_model
from tests.ui.pages import (export_file, ready_page, reload, reply_when, rows, screenshot, send, set_number,
                            wait_reply_done, wait_text)
from tests.unit.test_tools_mcp import SERVER, free_port, start_http_server, stop

pytestmark = pytest.mark.browser
TOOLS = Path(__file__).parents[1] / "data" / "tools"


@pytest.fixture(scope="module")
def tool_server(tmp_path_factory, default_model_dir):
    import sys

    user_data = user_data_with_default_model(tmp_path_factory.mktemp("chat-tools") / "data", default_model_dir)
    (user_data / "tools").mkdir()
    shutil.copy(TOOLS / "roll_dice.py", user_data / "tools")
    (user_data / "tools" / "broken.py").write_text("tool = {'type': 'function'\n")  # a syntax error
    http = start_http_server(port := free_port())
    (user_data / "mcp_servers.json").write_text(json.dumps({"servers": {
        "local": {"command": [sys.executable, str(SERVER), "stdio"]},
        "web": {"url": f"http://127.0.0.1:{port}/mcp"}}}))
    try:
        with running_server(user_data) as srv:
            srv.user_data = user_data
            yield srv
    finally:
        stop(http)


def stored_steps(user_data: Path, question: str) -> list[dict]:
    """The tool steps of the last reply in the chat where ``question`` was asked."""
    (stats,) = rows(user_data, "SELECT stats FROM messages WHERE role = 'assistant' AND chat_id = (SELECT chat_id "
                               "FROM messages WHERE content = ? ORDER BY id DESC LIMIT 1) ORDER BY id DESC LIMIT 1",
                    question)[0]
    return json.loads(stats).get("tool_steps", [])


def pick_tools(page, *names: str) -> None:
    """Tick exactly ``names`` in the Tools panel (opening it where it is closed)."""
    if not page.locator("#chat-tools").is_visible():
        page.locator("#chat-tools-panel").get_by_text("Tools", exact=True).first.click()
    page.locator("#chat-tools").wait_for(timeout=30_000)
    for label in page.locator("#chat-tools label").all():
        text, box = label.inner_text(), label.locator("input")
        if (text.split(" (")[0] in names) != box.is_checked():
            label.click()


def test_a_tool_call_shows_as_a_block_its_result_goes_back_and_an_edit_makes_a_new_version(tool_server, browser,
                                                                                          tmp_path):
    page = ready_page(browser, tool_server.url, max_new_tokens=40)
    pick_tools(page, "roll_dice")
    wait_text(page, "#chat-tools-problems", "broken.py")  # a broken tool file is listed with its error
    assert "SyntaxError" in page.locator("#chat-tools-problems").inner_text() or \
        "syntax" in page.locator("#chat-tools-problems").inner_text().lower()
    page.locator("#chat-mcp-panel").get_by_text("MCP servers").first.click()  # the operator's list, editable here
    wait_text(page, "#chat-mcp-servers", "web")
    assert page.locator("#chat-mcp-add").is_visible()  # (a workbench of one's own: no login, not --listen)
    page.locator("#chat-tool-choice label", has_text="a tool must be called").click()
    set_number(page, "chat-tool-steps", 1)
    question = "Roll a die for me."
    send(page, question)
    wait_reply_done(page)
    wait_text(page, "#chat-log", "roll_dice · arguments")
    [step] = stored_steps(tool_server.user_data, question)
    [call] = step["calls"]
    assert call["name"] == "roll_dice" and call["error"] is None and call["result"]
    assert "1 tool call" in page.locator("#chat-stats").inner_text()
    screenshot(page, "chat-tool-call")
    # edit the call's arguments: the tool runs again, and a new version answers after it
    page.locator("#chat-log [data-testid='bot']").first.hover()
    page.locator("#chat-log button[aria-label='Edit']").nth(1).click()  # your message's, then the call's arguments
    page.locator("#chat-log textarea.edit-textarea").fill('{"count": 3, "sides": 2}')
    page.locator("#chat-log button[aria-label='Submit']").click()
    def edited(reply) -> bool:  # the new version, finished
        stats = json.loads(reply[2] or "{}")
        steps = stats.get("tool_steps") or [{"calls": [{"arguments": "{}"}]}]
        return bool(stats.get("finish_reason")) and \
            json.loads(steps[0]["calls"][0]["arguments"]) == {"count": 3, "sides": 2}
    assert edited(reply_when(tool_server.user_data, question, edited))
    wait_reply_done(page)
    [step] = stored_steps(tool_server.user_data, question)
    rolls = json.loads(step["calls"][0]["result"])["rolls"]  # the tool ran again, with the arguments as edited
    assert len(rolls) == 3 and set(rolls) <= {1, 2}
    versions = rows(tool_server.user_data, "SELECT COUNT(*) FROM messages WHERE role = 'assistant' AND chat_id = "
                                           "(SELECT chat_id FROM messages WHERE content = ?)", question)
    assert versions == [(2,)]
    reload(page)
    wait_text(page, "#chat-log", "roll_dice · arguments")  # the blocks are stored with the reply
    saved = export_file(page, "chat-export", "chat-export-file", tmp_path / "chat.json")
    exported = json.loads(saved.read_text())
    assert exported["tools"] == ["roll_dice"]
    assert [m["stats"]["tool_steps"][0]["calls"][0]["name"] for m in exported["messages"]
            if m["role"] == "assistant"] == ["roll_dice", "roll_dice"]
    page.close()


@pytest.mark.parametrize("tool", ["local__add", "web__add"])  # the same server over stdio, then over HTTP
def test_an_mcp_servers_tool_is_called_and_its_result_reaches_the_model(tool_server, browser, tool):
    page = ready_page(browser, tool_server.url, max_new_tokens=30)
    pick_tools(page, tool)
    page.locator("#chat-tool-choice label", has_text="a tool must be called").click()
    set_number(page, "chat-tool-steps", 1)
    question = f"What is 2 plus 3? ({tool})"
    send(page, question)
    wait_reply_done(page)
    wait_text(page, "#chat-log", f"{tool} · arguments")
    [step] = stored_steps(tool_server.user_data, question)
    [call] = step["calls"]
    arguments = json.loads(call["arguments"])
    assert call["name"] == tool and call["error"] is None
    assert call["result"].strip() == str(arguments["a"] + arguments["b"])  # the server added them
    page.close()
