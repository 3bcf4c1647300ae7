"""The MCP servers list as the Tools panel changes it (#44): the operator adds a stdio or HTTP server and removes
it (the file keeps what else it holds), a wrong entry is a message that changes nothing, header and env values are
never shown, and on a shared server only an admin user changes it (nobody, on --listen without a login)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from webui.controllers import UserError
from webui.controllers.tools import ToolsController
from webui.owner import as_owner


@pytest.fixture
def tools(services):
    return ToolsController(services)


def test_the_operator_adds_and_removes_servers_and_header_values_stay_hidden(services, tools):
    listing = tools.add("files", "python -m my_server --root '/srv/a b'", "", "")
    assert "| files | `python -m my_server --root '/srv/a b'` | - |" in listing
    listing = tools.add("search", "", "https://mcp.example.com/mcp", "Authorization: Bearer sk-secret\nX-Team: a")
    assert "header Authorization, header X-Team" in listing and "sk-secret" not in listing
    saved = json.loads((services.config.user_data_dir / "mcp_servers.json").read_text())
    assert saved["servers"]["files"]["command"] == ["python", "-m", "my_server", "--root", "/srv/a b"]
    assert saved["servers"]["search"]["headers"] == {"Authorization": "Bearer sk-secret", "X-Team": "a"}
    assert "files" not in tools.remove("files") and "search" in tools.listing()


@pytest.mark.parametrize(("name", "command", "url", "headers", "message"), [
    ("a", "", "", "", "a command .* or a URL"),
    ("a", "run", "http://x/mcp", "", "not both"),
    ("a", "run 'unclosed", "", "", "cannot be read as a command line"),
    ("a", "run", "", "X: 1", "Headers go with a URL"),
    ("a", "", "http://x/mcp", "no colon here", "Header line 1 must be 'Name: value'"),
    ("bad name!", "run", "", "", "must be 1 to 32 letters"),
    ("a", "", "ftp://x/mcp", "", "url"),
])
def test_a_wrong_entry_is_a_message_and_changes_nothing(services, tools, name, command, url, headers, message):
    tools.add("kept", "run-me", "", "")
    before = (services.config.user_data_dir / "mcp_servers.json").read_text()
    with pytest.raises(UserError, match=message):
        tools.add(name, command, url, headers)
    assert (services.config.user_data_dir / "mcp_servers.json").read_text() == before
    with pytest.raises(UserError, match="no server named"):
        tools.remove("nope")


def test_only_the_operator_changes_the_list_on_a_shared_server(services):
    services.config = dataclasses.replace(services.config, listen=True)
    tools = ToolsController(services)
    assert not tools.may_change()
    with pytest.raises(UserError, match="Only the server's operator"):
        tools.add("files", "run", "", "")
    services.config = dataclasses.replace(services.config, ui_users=(("alice", "pw"), ("bob", "pw")),
                                          ui_admins=("alice",))
    with as_owner("bob"):
        assert not tools.may_change()
        with pytest.raises(UserError, match="Only the server's operator"):
            tools.remove("files")
        assert tools.listing() == "No MCP servers are configured."  # everyone sees the list
    with as_owner("alice"):
        assert "files" in tools.add("files", "run", "", "")
