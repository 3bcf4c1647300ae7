"""Reading request bodies whole or not at all (#43): webui/api/body.py's parser and route class, the capture
middleware that must never cut an answer short, and the request store that must read back what it kept. In process
(the real server gets the hostile bodies in tests/security/test_api_bodies.py)."""

from __future__ import annotations

import types

import httpx
import pytest
from fastapi import FastAPI

from tests.conftest import run_async
from webui.api import batches, embeddings, files, manage, routes, stored, utility
from webui.api.app import create_api_app
from webui.api.body import MAX_DEPTH, BodyError, JSONBodyRoute, parse_json
from webui.api.capture import _may_ask_store
from webui.api.serving import APIConfig
from webui.store.db import Database
from webui.store.requests import CapturedRequest, RequestStore

DEEP = b"[" * 20_000 + b"]" * 20_000


@pytest.mark.parametrize("raw,message,param", [
    (DEEP, f"nests JSON deeper than {MAX_DEPTH} levels", None),
    (b'{"a": ' + b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1) + b"}", "deeper than 100 levels in 'a'", "a"),
    (b'{"x": "\xff"}', "is not UTF-8 text (byte 7 is 0xff)", None),
    (b'{"x": ', "is not valid JSON: Expecting value (line 1, column 7)", None),
    (b'{"t": NaN}', "t: NaN is not a number JSON has", "t"),
    (b'{"b": {"5": [1, -1e999]}}', "b.5.1: -Infinity is not a number JSON has", "b.5.1"),
    (b"Infinity", "the request body is Infinity", None),
    (b'{"n": ' + b"9" * 5000 + b"}", "holds a number this server cannot read", None),
])
def test_a_body_that_is_not_json_within_the_limits_is_refused_saying_why(raw, message, param):
    with pytest.raises(BodyError) as caught:
        parse_json(raw)
    assert message in str(caught.value) and caught.value.param == param


def test_a_body_at_the_limits_reads():
    assert parse_json(b"\xef\xbb\xbf" + b"[" * MAX_DEPTH + b"]" * MAX_DEPTH) is not None  # (a byte order mark too)
    assert parse_json('{"a": "\\ud800", "b": 1e300}'.encode()) == {"a": "\ud800", "b": 1e300}  # (the model says)


def test_every_api_route_reads_its_body_through_the_checked_route():
    for router in (routes.router, embeddings.router, stored.router, manage.router, utility.router, files.router,
                   batches.router):
        assert router.routes and all(isinstance(r, JSONBodyRoute) for r in router.routes), router


def test_only_a_body_that_can_say_store_true_is_parsed_with_capture_off():
    assert _may_ask_store(b'{"store" : true}') and _may_ask_store(b'{"st\\u006fre": true}')
    assert not _may_ask_store(b'{"store": false}') and not _may_ask_store(b'{"stream": true}')


def captured_app(tmp_path, capture_all: bool, failing_store: bool = False) -> tuple[FastAPI, RequestStore]:
    store = RequestStore(Database(tmp_path / "requests.sqlite3"), capture_all=capture_all)
    if failing_store:
        def add(item: CapturedRequest) -> None:
            raise OSError("disk full")
        store.add = add  # type: ignore[method-assign]
    app = create_api_app(types.SimpleNamespace(requests=store, health=dict, api_batches=None, api_files=None,
                                                 responses=None),
                         APIConfig())  # type: ignore[arg-type]
    return app, store


async def post(app: FastAPI, content: bytes) -> httpx.Response:
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=True)  # (an error the app lets out fails here)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        return await client.post("/v1/chat/completions", content=content, headers={"content-type": "application/json"})


@pytest.mark.parametrize("capture_all", [False, True])
def test_a_nested_body_gets_a_whole_answer_and_is_kept_as_text(tmp_path, capture_all):
    """The issue's request: 20,000 nested arrays (with "store": true, so even capture off reads it)."""
    app, store = captured_app(tmp_path, capture_all)
    body = b'{"store": true, "messages": ' + DEEP + b"}"
    r = run_async(post(app, body))
    assert r.status_code == 400 and "nests JSON deeper" in r.json()["error"]["message"]
    kept = store.page(limit=5).items
    assert [(type(i.request), i.status) for i in kept] == ([(str, 400)] if capture_all else [])
    if capture_all:
        assert kept[0].request == body.decode() and kept[0].response == r.json()  # read back as the text sent


def test_a_store_that_fails_never_cuts_the_answer_short(tmp_path, caplog):
    app, _ = captured_app(tmp_path, capture_all=True, failing_store=True)
    r = run_async(post(app, b'{"messages": []}'))
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages"
    assert "could not keep the API request to /v1/chat/completions" in caplog.text and "disk full" in caplog.text


def test_a_request_kept_as_text_reads_back_as_that_text(tmp_path):
    """Text that holds JSON reads back as text; a lone surrogate (SQLite cannot encode it) is kept escaped."""
    store = RequestStore(Database(tmp_path / "requests.sqlite3"))
    sent = ['{"a": 1}', "[" * 5000 + "]" * 5000, "not json", "", {"content": "a\ud800"}]  # (and a lone surrogate)
    for n, body in enumerate(sent):
        store.add(CapturedRequest(f"req-{n}", 1.0, "/v1/completions", 400, "", body, {"error": {}}))
    assert [i.request for i in store.page(limit=10).items] == sent
