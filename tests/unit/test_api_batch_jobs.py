"""The API's batch runner (#45) against a stand-in ASGI app (no model): rows go out a few at a time, as the batch's
key at background priority; a 503 is sent again, not failed; a stopped runner's successor runs only the rows not
done; cancel stops the rows in flight; a batch past its window expires. Also the stores under it: a row is kept
once, an upload that fails leaves no file, the sweep clears what a crash left. An Anthropic Message Batch runs
through the same runner: results kept in Anthropic's shape, a 529 sent again, no files, its own list."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections import Counter

import pytest

from tests.conftest import run_async
from webui.api.batch_input import message_requests, read_input
from webui.api.batch_jobs import BatchJobs
from webui.engine.types import BACKGROUND
from webui.store.api_batches import APIBatchStore, RowUsage
from webui.store.api_files import ORPHAN_AGE_S, FileStore
from webui.store.db import Database

URL = "/v1/chat/completions"


class StandIn:
    """An ASGI app answering each row with what it was sent and as whom; ``hold`` keeps rows in flight until set,
    ``busy`` answers 503 to the first N requests."""

    def __init__(self, busy: int = 0, hold: bool = False, busy_status: int = 503) -> None:
        self.calls, self.busy, self.flying, self.most, self.cancelled = Counter[str](), busy, 0, 0, 0
        self.busy_status = busy_status  # 529: how /v1/messages says it (Anthropic's overloaded)
        self.callers: set[tuple[str, int]] = set()
        self.release = asyncio.Event() if hold else None

    async def __call__(self, scope, receive, send) -> None:
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        sent = json.loads(body)
        caller = scope["state"]["caller"]
        self.callers.add((caller.client, caller.priority))
        self.flying += 1
        self.most = max(self.most, self.flying)
        try:
            if self.release is not None:
                await self.release.wait()
            else:
                await asyncio.sleep(0.01)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        finally:
            self.flying -= 1
        if self.busy:
            self.busy -= 1
            status, answer = self.busy_status, {"error": {"message": "busy", "type": "service_unavailable"}}
        else:
            self.calls[sent["messages"][0]["content"]] += 1
            status = 400 if sent.get("bad") else 200
            answer = {"type": "error", "error": {"type": "invalid_request_error", "message": "bad"}} if sent.get(
                "anthropic") and sent.get("bad") else {"error": {"message": "bad", "param": "bad"}} if sent.get(
                "bad") else {
                "echo": sent["messages"][0]["content"], "usage": {"prompt_tokens": 3, "completion_tokens": 2}}
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"), (b"x-request-id", b"rid")]})
        await send({"type": "http.response.body", "body": json.dumps(answer).encode()})


@pytest.fixture
def stores(tmp_path):
    db = Database(tmp_path / "db.sqlite3")
    files = FileStore(db, tmp_path / "api_files")
    yield files, APIBatchStore(db, files)
    db.close()


def make(batches: APIBatchStore, n: int, bad: tuple[int, ...] = (), window_s: int = 3600):
    rows = "".join(json.dumps({"custom_id": f"c{i}", "method": "POST", "url": URL, "body": {
        "messages": [{"content": f"m{i}"}], **({"bad": True} if i in bad else {})}}) + "\n" for i in range(n))
    read = read_input(rows.encode().splitlines(keepends=True), URL)
    assert not read.errors
    return batches.create(client="key 2", endpoint=URL, input_file_id="file-x", completion_window="24h",
                          window_s=window_s, rows=read.rows)


async def until(condition, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "not so in time"
        await asyncio.sleep(0.01)


def contents(files: FileStore, file_id: str | None) -> list[dict]:
    if file_id is None:
        return []
    with files.open(files.get(file_id)) as f:
        return [json.loads(line) for line in f]


def test_rows_run_a_few_at_a_time_as_the_batch_key_in_the_background(stores):
    files, batches = stores
    batch = make(batches, 10, bad=(3,))
    app = StandIn()

    async def run():
        jobs = BatchJobs(app, batches, files, rows_in_flight=3)
        await jobs.start()
        await until(lambda: batches.get(batch.id).status == "completed")
        await jobs.stop()

    run_async(run())
    done = batches.get(batch.id)
    assert (done.total, done.completed, done.failed) == (10, 9, 1) and done.usage == RowUsage(27, 0, 18)
    assert app.most == 3 and app.callers == {("key 2", BACKGROUND)}
    out, errors = contents(files, done.output_file_id), contents(files, done.error_file_id)
    assert [x["custom_id"] for x in out] == [f"c{i}" for i in range(10) if i != 3]
    assert out[0]["response"] == {"status_code": 200, "request_id": "rid", "body": {
        "echo": "m0", "usage": {"prompt_tokens": 3, "completion_tokens": 2}}} and out[0]["error"] is None
    assert [(x["custom_id"], x["response"]["status_code"]) for x in errors] == [("c3", 400)]
    assert files.get(done.output_file_id).purpose == "batch_output" and files.get(done.output_file_id).client == "key 2"


def test_a_busy_answer_is_sent_again_not_failed(stores, monkeypatch):
    files, batches = stores
    monkeypatch.setattr("webui.api.batch_jobs.RETRY_S", (0.05, 0.1))
    batch = make(batches, 3)
    app = StandIn(busy=2)

    async def run():
        jobs = BatchJobs(app, batches, files, rows_in_flight=1)
        await jobs.start()
        await until(lambda: batches.get(batch.id).status == "completed")
        await jobs.stop()

    run_async(run())
    assert batches.get(batch.id).completed == 3 and app.calls == Counter({"m0": 1, "m1": 1, "m2": 1})


def test_a_new_runner_goes_on_from_the_rows_not_done(stores):
    files, batches = stores
    batch = make(batches, 12)
    first, second = StandIn(), StandIn()

    async def run():
        jobs = BatchJobs(first, batches, files, rows_in_flight=2)
        await jobs.start()
        await until(lambda: batches.get(batch.id).completed >= 4)
        await jobs.stop()
        kept = {r.custom_id: r.result for r in batches.rows(batch.seq) if r.result is not None}
        jobs = BatchJobs(second, batches, files, rows_in_flight=2)
        await jobs.start()
        await until(lambda: batches.get(batch.id).status == "completed")
        await jobs.stop()
        return kept

    kept = run_async(run())
    assert 4 <= len(kept) < 12
    assert not set(second.calls) & {f"m{c[1:]}" for c in kept}  # no done row ran again
    out = contents(files, batches.get(batch.id).output_file_id)
    assert sorted(x["custom_id"] for x in out) == sorted(f"c{i}" for i in range(12))
    assert {x["custom_id"]: x for x in out if x["custom_id"] in kept} == kept


def test_cancel_stops_the_rows_in_flight(stores):
    files, batches = stores
    batch = make(batches, 5)
    app = StandIn(hold=True)

    async def run():
        jobs = BatchJobs(app, batches, files, rows_in_flight=2)
        await jobs.start()
        await until(lambda: app.flying == 2)
        assert batches.set_status(batch.seq, "cancelling", only_from=("in_progress",))
        jobs.wake()
        await until(lambda: batches.get(batch.id).status == "cancelled")
        await jobs.stop()

    run_async(run())
    done = batches.get(batch.id)
    assert app.cancelled == 2 and app.flying == 0 and done.completed == 0 and done.output_file_id is None
    errors = contents(files, done.error_file_id)
    assert [(x["custom_id"], x["error"]["code"], x["response"]) for x in errors] == [
        (f"c{i}", "batch_cancelled", None) for i in range(5)]


def test_a_batch_past_its_window_expires(stores):
    files, batches = stores
    batch = make(batches, 2, window_s=0)

    async def run():
        jobs = BatchJobs(StandIn(), batches, files)
        await jobs.start()
        await until(lambda: batches.get(batch.id).status == "expired")
        await jobs.stop()

    run_async(run())
    done = batches.get(batch.id)
    assert done.times["expired"] and [x["error"]["code"] for x in contents(files, done.error_file_id)] == [
        "batch_expired"] * 2


def test_a_row_is_kept_once(stores):
    _, batches = stores
    batch = make(batches, 2)
    result = {"custom_id": "c0"}
    assert batches.finish_row(batch.seq, 1, 200, result, RowUsage(1, 0, 1))
    assert not batches.finish_row(batch.seq, 1, 200, {"custom_id": "again"}, RowUsage(1, 0, 1))
    assert batches.get(batch.id).completed == 1 and [r.line for r in batches.pending(batch.seq)] == [2]


def test_an_upload_that_fails_leaves_no_file_and_the_sweep_clears_a_crash(stores):
    files, _ = stores

    def broken():
        yield b"half of it"
        raise OSError("the disk is full")

    with pytest.raises(OSError):
        files.add("", "a.jsonl", "batch", broken())
    assert list(files.folder.iterdir()) == [] and files.page()[0] == []
    kept = files.add("", "b.jsonl", "batch", [b"x"])
    orphan = files.folder / "file-orphan"
    orphan.write_bytes(b"bytes a crash left without a row")
    old = time.time() - ORPHAN_AGE_S - 1
    os.utime(orphan, (old, old))
    expired = files.add("", "c.jsonl", "batch", [b"y"], expires_after=-1)
    assert files.get(expired.id) is None  # past its expiry: not served
    assert files.sweep() == 2 and sorted(p.name for p in files.folder.iterdir()) == [kept.id]


def test_an_anthropic_batch_keeps_anthropic_results_and_no_files(stores, monkeypatch):
    files, batches = stores
    monkeypatch.setattr("webui.api.batch_jobs.RETRY_S", (0.05, 0.1))
    read = message_requests([{"custom_id": f"c{i}", "params": {"messages": [{"content": f"a{i}"}], "anthropic": True,
                                                                 **({"bad": True} if i == 1 else {})}}
                             for i in range(3)])
    batch = batches.create(client="key 2", endpoint="/v1/messages", input_file_id="", completion_window="24h",
                           window_s=3600, rows=read.rows, api="anthropic")
    openai_batch = make(batches, 1)
    app = StandIn(busy=1, busy_status=529)

    async def run():
        jobs = BatchJobs(app, batches, files, rows_in_flight=1)
        await jobs.start()
        await until(lambda: batches.get(openai_batch.id).status == "completed")
        await jobs.stop()

    run_async(run())
    done = batches.get(batch.id)
    assert batch.id.startswith("msgbatch_") and done.status == "completed" and (done.completed, done.failed) == (2, 1)
    assert done.output_file_id is None and done.error_file_id is None and app.calls["a0"] == 1  # 529: sent again
    results = [row.result for row in batches.rows(done.seq)]
    assert results[0] == {"custom_id": "c0", "result": {"type": "succeeded", "message": {
        "echo": "a0", "usage": {"prompt_tokens": 3, "completion_tokens": 2}}}}
    assert results[1] == {"custom_id": "c1", "result": {"type": "errored", "error": {
        "type": "error", "error": {"type": "invalid_request_error", "message": "bad"}, "request_id": "rid"}}}
    # each API lists and finds only its own; only an ended batch is deleted
    assert [b.id for b in batches.page(api="anthropic")[0]] == [batch.id]
    assert [b.id for b in batches.page(api="openai")[0]] == [openai_batch.id]
    assert batches.get(batch.id, api="openai") is None and batches.get(batch.id, "key 2", "anthropic") is not None
    running = batches.create(client="key 2", endpoint="/v1/messages", input_file_id="", completion_window="24h",
                             window_s=3600, rows=read.rows, api="anthropic")
    assert not batches.delete(running.seq) and batches.delete(done.seq)
    assert batches.get(batch.id) is None and list(batches.rows(done.seq)) == []
