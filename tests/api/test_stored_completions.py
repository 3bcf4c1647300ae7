"""OpenAI's stored chat completions (#33), with the official client against a real server: `store: true` keeps a
completion (streamed or not), which is listed with filters and cursor pages, retrieved with its messages, tagged
and deleted; each API key sees its own; with --capture-requests every request is kept, refused ones too, with what
the model saw, and never a key; the store keeps to its retention budget."""

from __future__ import annotations

import json
import sqlite3
import urllib.request

import openai
import pytest

from tests.api.conftest import APIServer, start_api

pytestmark = pytest.mark.real_model

MODEL = "SmolLM2-135M-Instruct"
OTHER_KEY = "second-key-456"
ADMIN_KEY = "admin-key-789"


@pytest.fixture(scope="module")
def api(tmp_path_factory, default_model_dir):
    ctx, base, key = start_api(tmp_path_factory, default_model_dir, "--api-key", OTHER_KEY, "--admin-key",
                               ADMIN_KEY, "--capture-requests", "--capture-max-requests", "12")
    with ctx as server:
        yield APIServer(base, key, server)


def client(api, key: str | None = None) -> openai.OpenAI:
    return openai.OpenAI(base_url=api.base_url, api_key=key or api.key, max_retries=0, timeout=120)


def ask(c: openai.OpenAI, text: str, **extra):
    return c.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": text}], temperature=0,
                                     max_tokens=4, **extra)


def kept(api) -> list[sqlite3.Row]:
    with sqlite3.connect(api.server.log.parent / "workbench.sqlite3") as db:
        db.row_factory = sqlite3.Row
        return db.execute("SELECT * FROM api_requests ORDER BY seq").fetchall()


def test_a_stored_completion_is_listed_retrieved_tagged_and_deleted(api):
    c = client(api)
    made = ask(c, "Name a colour.", store=True, metadata={"topic": "colours", "run": "1"})
    got = c.chat.completions.retrieve(made.id)
    assert got.id == made.id and got.choices[0].message.content == made.choices[0].message.content
    assert got.metadata == {"topic": "colours", "run": "1"} and got.model == MODEL and got.usage == made.usage
    messages = c.chat.completions.messages.list(made.id)
    assert [(m.role, m.content) for m in messages.data] == [("user", "Name a colour.")]
    assert messages.data[0].id == f"{made.id}-0"
    updated = c.chat.completions.update(made.id, metadata={"topic": "paint"})
    assert updated.metadata == {"topic": "paint"} and c.chat.completions.retrieve(made.id).metadata == {
        "topic": "paint"}
    listed = [x.id for x in c.chat.completions.list(metadata={"topic": "paint"})]
    assert listed == [made.id]
    deleted = c.chat.completions.delete(made.id)
    assert deleted.deleted and deleted.id == made.id and deleted.object == "chat.completion.deleted"
    with pytest.raises(openai.NotFoundError, match="no stored chat completion has the id"):
        c.chat.completions.retrieve(made.id)
    with pytest.raises(openai.NotFoundError):
        c.chat.completions.retrieve("chatcmpl-nonesuch")


def test_a_streamed_completion_is_stored_whole(api):
    c = client(api)
    stream = c.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Say hello."}],
                                       temperature=0, max_tokens=4, stream=True, store=True)
    chunks = list(stream)
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    got = c.chat.completions.retrieve(chunks[0].id)
    assert got.object == "chat.completion" and got.choices[0].message.content == text
    assert got.choices[0].finish_reason in ("stop", "length") and got.usage.completion_tokens > 0


def test_the_list_pages_with_after_limit_and_order_and_filters_by_model(api):
    c = client(api, OTHER_KEY)  # its own completions only: the other tests' are not listed
    ids = [ask(c, f"Count to {n}.", store=True, metadata={"batch": "paging"}).id for n in range(3)]
    first = c.chat.completions.list(limit=2, metadata={"batch": "paging"})
    assert [x.id for x in first.data] == ids[:2] and first.has_more
    rest = c.chat.completions.list(limit=2, after=ids[1], metadata={"batch": "paging"})
    assert [x.id for x in rest.data] == ids[2:] and not rest.has_more
    assert [x.id for x in c.chat.completions.list(order="desc", metadata={"batch": "paging"})] == ids[::-1]
    assert [x.id for x in c.chat.completions.list(metadata={"batch": "paging"})] == ids  # the client pages on
    assert list(c.chat.completions.list(model="no-such-model")) == []


def test_each_key_sees_its_own_and_the_admin_key_every_one(api):
    mine = ask(client(api), "Name a fruit.", store=True).id
    with pytest.raises(openai.NotFoundError):
        client(api, OTHER_KEY).chat.completions.retrieve(mine)
    with pytest.raises(openai.NotFoundError):
        client(api, OTHER_KEY).chat.completions.delete(mine)
    assert client(api, ADMIN_KEY).chat.completions.retrieve(mine).id == mine


def test_bad_metadata_is_refused_naming_the_limit(api):
    c = client(api)
    with pytest.raises(openai.BadRequestError, match="at most 16"):
        ask(c, "Hi", store=True, metadata={str(i): "x" for i in range(17)})
    made = ask(c, "Hi", store=True)
    with pytest.raises(openai.BadRequestError, match="512"):
        c.chat.completions.update(made.id, metadata={"note": "x" * 513})
    assert c.chat.completions.retrieve(made.id).metadata == {}  # nothing changed


def test_capture_keeps_every_request_as_the_model_saw_it_and_never_a_key(api):
    c = client(api)
    answered = ask(c, "What is 2+2?")  # not store: true, kept because capture is on
    with pytest.raises(openai.BadRequestError):
        c.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hi"}], temperature=-3)
    rows = kept(api)
    row = next(r for r in rows if r["id"] == answered.id)
    assert row["stored"] == 0 and row["status"] == 200 and row["client"] == "key 1" and row["model"] == MODEL
    details = json.loads(row["details"])
    assert "<|im_start|>user\nWhat is 2+2?<|im_end|>" in details["prompt"] and details["params"]["temperature"] == 0
    assert details["token_ids"][0] and details["loader"] == "transformers"
    assert details["sources"] == {"temperature": "request", "max_new_tokens": "request"}
    preset = c.completions.create(model=MODEL, prompt="Hi", extra_body={"preset": "Creative"})  # 16 tokens
    kept_preset = next(r for r in kept(api) if r["id"] == preset.id)
    sources = json.loads(kept_preset["details"])["sources"]
    assert sources["max_new_tokens"] == "server default" and "preset Creative" in sources.values()
    refused = [r for r in rows if r["status"] == 400 and '"temperature": -3' in r["request"]]
    assert refused and "temperature" in json.loads(refused[-1]["response"])["error"]["message"]
    with pytest.raises(openai.NotFoundError):  # kept, but not stored: OpenAI's routes do not list it
        c.chat.completions.retrieve(answered.id)
    everything = "\n".join(" ".join(str(v) for v in tuple(r)) for r in rows)
    assert api.key not in everything and OTHER_KEY not in everything and ADMIN_KEY not in everything
    assert "Bearer" not in everything
    logged = api.server.log.read_text()  # nor the server's log
    assert api.key not in logged and OTHER_KEY not in logged and ADMIN_KEY not in logged and "Bearer" not in logged


def test_the_store_keeps_to_its_retention_budget(api):
    c = client(api)
    for n in range(14):
        ask(c, f"Say {n}.")
    rows = kept(api)
    assert len(rows) == 12  # --capture-max-requests 12: the oldest went first
    assert json.loads(rows[-1]["request"])["messages"][0]["content"] == "Say 13."
    with urllib.request.urlopen(api.root + "/health", timeout=10) as r:
        assert json.loads(r.read())["status"] == "ok"
