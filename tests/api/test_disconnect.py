"""Clients that go away cancel their generation: the engine ends up idle, not generating for nobody."""

from __future__ import annotations

import json
import re
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.api.conftest import API_KEY

CLIENTS = 50
LONG_STORY = {"model": "gpt-test",
              "messages": [{"role": "user", "content": "Tell me a long story about a lighthouse."}],
              "max_tokens": 200, "ignore_eos": True, "temperature": 1}
AUTH = {"Authorization": f"Bearer {API_KEY}"}
CHAT_LINE = re.compile(r"POST /v1/chat/completions status=(\d+) prompt_tokens=\S+ completion_tokens=(\d+) .*"
                       r"finish=(\S+)")


def health(api) -> dict:
    r = httpx.get(api.root + "/health", timeout=10)
    assert r.status_code == 200
    return r.json()


def wait_idle(api, within: float) -> tuple[dict, float]:
    """Poll /health until nothing runs or waits; the last answer and the seconds it took."""
    started = time.monotonic()
    while True:
        h = health(api)
        if (h["running"] == 0 and h["waiting"] == 0) or time.monotonic() - started > within:
            return h, time.monotonic() - started
        time.sleep(0.1)


def chat_lines(api, after: int, count: int, within: float = 10) -> list[tuple[int, int, str]]:
    """(status, completion_tokens, finish) of the chat requests logged after line ``after``."""
    deadline = time.monotonic() + within
    while True:
        lines = api.server.log.read_text().splitlines()[after:]
        found = [(int(m[1]), int(m[2]), m[3]) for m in map(CHAT_LINE.search, lines) if m]
        if len(found) >= count or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


def log_length(api) -> int:
    return len(api.server.log.read_text().splitlines())


def read_first_content_then_leave(api, _: int) -> float:
    """Stream a long chat, return the seconds to its first content delta, and disconnect."""
    started = time.monotonic()
    with httpx.Client(base_url=api.root, headers=AUTH, timeout=httpx.Timeout(60, connect=10)) as client:
        with client.stream("POST", "/v1/chat/completions", json={**LONG_STORY, "stream": True}) as r:
            assert r.status_code == 200, r.read()
            for line in r.iter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line.removeprefix("data: "))
                assert "error" not in chunk, chunk
                if chunk["choices"] and chunk["choices"][0]["delta"].get("content"):
                    return time.monotonic() - started
    raise AssertionError("the stream ended before any content")


def test_fifty_streaming_clients_that_leave_are_all_cancelled(api):
    assert wait_idle(api, 10)[0]["running"] == 0
    before = log_length(api)
    with ThreadPoolExecutor(max_workers=CLIENTS) as pool:
        firsts = list(pool.map(lambda i: read_first_content_then_leave(api, i), range(CLIENTS), timeout=120))
    assert len(firsts) == CLIENTS
    h, _ = wait_idle(api, 60)
    assert h["running"] == 0 and h["waiting"] == 0, h
    # each request was logged when its stream was torn down, long before its 200 tokens
    lines = chat_lines(api, before, CLIENTS)
    assert len(lines) == CLIENTS, lines
    assert all(status == 200 for status, _, _ in lines)
    assert max(tokens for _, tokens, _ in lines) < 100, lines
    # and the engine still serves
    r = httpx.post(api.base_url + "/chat/completions", headers=AUTH, timeout=60,
                   json={**LONG_STORY, "max_tokens": 3})
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 3


def test_a_client_that_times_out_cancels_its_generation(api):
    assert wait_idle(api, 10)[0]["running"] == 0
    before = log_length(api)
    with pytest.raises(httpx.TimeoutException):
        httpx.post(api.base_url + "/chat/completions", headers=AUTH, timeout=1,
                   json={**LONG_STORY, "max_tokens": 300})
    # 300 tokens take ~20 s here; the server notices the disconnect within a second or so
    h, _ = wait_idle(api, 5)
    assert h["running"] == 0 and h["waiting"] == 0, h
    [(status, tokens, finish)] = chat_lines(api, before, 1)
    assert finish == "cancelled"
    assert 0 < tokens < 300


def test_a_streaming_client_that_leaves_mid_stream_with_n_choices(api):
    """n=3 streams in one request: leaving cancels all three."""
    before = log_length(api)
    with httpx.Client(base_url=api.root, headers=AUTH, timeout=60) as client:
        with client.stream("POST", "/v1/chat/completions", json={**LONG_STORY, "stream": True, "n": 3}) as r:
            assert r.status_code == 200
            contents = 0
            for line in r.iter_lines():
                if line.startswith("data: {") and '"content": "' in line and '"content": ""' not in line:
                    contents += 1
                    if contents == 6:
                        break
    h, _ = wait_idle(api, 10)
    assert h["running"] == 0 and h["waiting"] == 0, h
    [(status, tokens, _)] = chat_lines(api, before, 1)
    assert tokens < 3 * 200
