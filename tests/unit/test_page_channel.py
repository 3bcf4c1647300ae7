"""The page's drafts and lines outside Gradio's events (webui.ui.page_channel): saved only with a page's own token,
as that page's user, in the order the page made them; unknown tokens and oversized bodies refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from webui.owner import as_owner, current
from webui.settings import SettingsStore
from webui.ui.page_channel import MAX_DRAFT_BYTES, PageChannel


@pytest.fixture
def setup(tmp_path: Path):
    """(client, channel, settings): the channel saves the Chat draft into a real settings file, per user, as the
    Chat tab's save does."""
    settings = SettingsStore(tmp_path / "settings.json")
    channel = PageChannel()
    channel.saves("chat", lambda text, _name: settings.update(chat_draft=text))
    channel.saves("notebook", lambda text, name: settings.update(notebook_text=text, notebook_name=name or ""))
    channel.shows("status-line", lambda: f"**{current() or 'nobody'}** · idle")
    app = FastAPI()
    channel.mount(app)
    return TestClient(app), channel, settings


def draft(client: TestClient, token: str, box: str, seq: int, text: str, name: str | None = None):
    return client.post(f"/drafts/{token}/{box}", content=json.dumps({"seq": seq, "text": text, "name": name}))


def test_a_draft_is_saved_as_sent_in_the_order_the_page_made_it(setup):
    client, channel, settings = setup
    token = channel.open()
    assert draft(client, token, "chat", 1, "Hello, wor").status_code == 204
    assert settings.get().chat_draft == "Hello, wor"
    assert draft(client, token, "chat", 3, "Hello, world").status_code == 204
    assert draft(client, token, "chat", 2, "Hello, worl").status_code == 204  # crossed on the way: not saved
    assert settings.get().chat_draft == "Hello, world"
    assert draft(client, token, "chat", 4, "").status_code == 204  # deleted: saved too
    assert settings.get().chat_draft == ""
    assert draft(client, token, "notebook", 5, "Once upon", "story").status_code == 204
    assert (settings.get().notebook_name, settings.get().notebook_text) == ("story", "Once upon")


def test_an_unknown_token_or_box_is_refused_and_nothing_saved(setup):
    client, channel, settings = setup
    assert draft(client, "no-such-token", "chat", 1, "x").status_code == 404
    assert draft(client, channel.open(), "system", 1, "x").status_code == 404
    assert client.get("/page-lines/no-such-token").status_code == 404
    assert settings.get().chat_draft == ""


def test_an_oversized_or_malformed_draft_is_refused(setup):
    client, channel, settings = setup
    token = channel.open()
    assert draft(client, token, "chat", 1, "x" * MAX_DRAFT_BYTES).status_code == 413
    # without a declared length (sent in chunks), cut off as it arrives
    chunks = (b"x" * 2**20 for _ in range(MAX_DRAFT_BYTES // 2**20 + 2))
    assert client.post(f"/drafts/{token}/chat", content=chunks).status_code == 413
    assert client.post(f"/drafts/{token}/chat", content=b"not json").status_code == 400
    assert client.post(f"/drafts/{token}/chat", content=b"[" * 20_000 + b"]" * 20_000).status_code == 400  # no 500
    assert client.post(f"/drafts/{token}/chat", content=b'{"seq": 1, "text": 5}').status_code == 400
    assert settings.get().chat_draft == ""
    assert draft(client, token, "chat", 2, "still works").status_code == 204
    assert settings.get().chat_draft == "still works"


def test_a_token_saves_only_its_own_users_draft(setup):
    """With a login: alice's page token writes alice's draft, never bob's, whoever sends it."""
    client, channel, settings = setup
    with as_owner("alice"):
        alice = channel.open()
    with as_owner("bob"):
        bob = channel.open()
        settings.update(chat_draft="bob's own")
    assert draft(client, alice, "chat", 1, "alice typed this").status_code == 204
    with as_owner("alice"):
        assert settings.get().chat_draft == "alice typed this"
    with as_owner("bob"):
        assert settings.get().chat_draft == "bob's own"
    assert settings.get().chat_draft == ""  # nor the shared workspace's
    assert client.get(f"/page-lines/{bob}").json() == {"status-line": "<strong>bob</strong> · idle"}


def test_the_lines_are_html_with_the_text_escaped(setup):
    client, channel, _ = setup
    channel.shows("prefix-cache-info", lambda: "**Prefix cache**: <b>1</b> & more")
    got = client.get(f"/page-lines/{channel.open()}").json()
    assert got["prefix-cache-info"] == "<strong>Prefix cache</strong>: &lt;b&gt;1&lt;/b&gt; &amp; more"
