"""OpenAI's Files and Batch APIs (#45) with the official client against a real server and the real default model:
a batch's rows answer as the same requests sent alone (chat, completions, embeddings); every input a client can
get wrong is a 4xx naming the field (uploads, batch creation, each bad line of an input file); a row the endpoint
refuses lands in the error file; cancel stops the rows in flight; each key sees only its own files and batches;
rows run at background priority and as the batch owner's key; a batch survives a stop (SIGTERM) and a crash
(SIGKILL) mid-way, every row answered exactly once.

One server for the module (the restart test, last, stops it and starts two more on its user data dir). It runs
with --max-running 2, so a background row never takes the last slot: the batch runs one row at a time while the
others wait, which /health shows."""

from __future__ import annotations

import json
import signal
import sqlite3
import time
import urllib.request
from pathlib import Path

import httpx
import openai
import pytest

from tests.api.conftest import API_KEY, APIServer, start_api
from tests.e2e.server import free_port, running_server

pytestmark = pytest.mark.real_model

MODEL = "SmolLM2-135M-Instruct"
OTHER_KEY, ADMIN_KEY = "second-key-456", "admin-key-789"
ARGS = ("--api-key", OTHER_KEY, "--admin-key", ADMIN_KEY, "--api-max-file-mb", "2", "--api-max-body-mb", "1",
        "--max-running", "2", "--capture-requests")
CHAT, COMPLETIONS, EMBEDDINGS = "/v1/chat/completions", "/v1/completions", "/v1/embeddings"
ENDED = ("completed", "failed", "expired", "cancelled")
QUESTIONS = ("What is the capital of France?", "Name a colour.", "Say hello.")


@pytest.fixture(scope="module")
def api(tmp_path_factory, default_model_dir):
    ctx, base, key = start_api(tmp_path_factory, default_model_dir, *ARGS)
    with ctx as server:
        yield APIServer(base, key, server)


def client(api, key: str | None = None, base: str | None = None) -> openai.OpenAI:
    return openai.OpenAI(base_url=base or api.base_url, api_key=key or api.key, max_retries=0, timeout=120)


def chat_body(text: str, **extra) -> dict:
    return {"model": MODEL, "messages": [{"role": "user", "content": text}], "temperature": 0, "max_tokens": 8,
            **extra}


def row(custom_id: str, body: dict, url: str = CHAT) -> dict:
    return {"custom_id": custom_id, "method": "POST", "url": url, "body": body}


def jsonl(rows: list[dict]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def upload(c: openai.OpenAI, content: bytes | list[dict], name: str = "rows.jsonl"):
    return c.files.create(file=(name, content if isinstance(content, bytes) else jsonl(content)), purpose="batch")


def create(c: openai.OpenAI, content: bytes | list[dict], endpoint: str = CHAT, **extra):
    return c.batches.create(input_file_id=upload(c, content).id, endpoint=endpoint, completion_window="24h", **extra)


def wait(c: openai.OpenAI, batch_id: str, until=ENDED, timeout: float = 180, done: int | None = None):
    """The batch once its status is in ``until`` (or, with ``done``, once that many rows are done)."""
    deadline = time.monotonic() + timeout
    while True:
        batch = c.batches.retrieve(batch_id)
        counts = batch.request_counts
        if batch.status in until or (done is not None and counts.completed + counts.failed >= done):
            return batch
        assert time.monotonic() < deadline, f"batch {batch_id} still {batch.status} after {timeout}s: {batch}"
        time.sleep(0.1)


def lines(c: openai.OpenAI, file_id: str | None) -> list[dict]:
    return [] if file_id is None else [json.loads(x) for x in c.files.content(file_id).text.splitlines()]


def until(condition, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not so after {timeout}s"
        time.sleep(0.05)


def health(base: str) -> dict:
    with urllib.request.urlopen(base.removesuffix("/v1") + "/health", timeout=10) as r:
        return json.loads(r.read())


# -- running ---------------------------------------------------------------------------------------------------------

def test_a_chat_batch_answers_each_row_as_the_same_request_sent_alone_at_background_priority(api):
    c = client(api)
    rows = [row(f"q{i}", chat_body(q)) for i, q in enumerate(QUESTIONS)] + [row("seeded", chat_body(
        "Tell me a word.", temperature=0.8, seed=7))]
    batch = create(c, rows, metadata={"run": "1"})
    assert batch.object == "batch" and batch.id.startswith("batch_") and batch.endpoint == CHAT
    assert batch.status == "in_progress" and batch.request_counts.total == 4 and batch.metadata == {"run": "1"}
    seen = []  # /health while it runs: one row runs (the last of 2 slots is kept for interactive work), the rest wait
    while (batch := c.batches.retrieve(batch.id)).status not in ENDED:
        seen.append(health(api.base_url))
        time.sleep(0.05)
    assert batch.status == "completed", batch
    assert max(h["running"] for h in seen) == 1 and max(h["waiting"] for h in seen) >= 1, seen
    assert batch.request_counts.completed == 4 and batch.request_counts.failed == 0
    assert batch.error_file_id is None and batch.model == MODEL and batch.errors is None
    assert batch.in_progress_at and batch.finalizing_at and batch.completed_at >= batch.created_at
    assert batch.expires_at == batch.created_at + 24 * 3600
    assert batch.usage.input_tokens > 0 and 0 < batch.usage.output_tokens <= 32
    out = c.files.retrieve(batch.output_file_id)
    assert out.purpose == "batch_output" and out.filename == f"{batch.id}_output.jsonl"
    got = lines(c, batch.output_file_id)
    assert [g["custom_id"] for g in got] == ["q0", "q1", "q2", "seeded"]
    for line, sent in zip(got, rows):
        assert line["id"].startswith("batch_req_") and line["error"] is None
        assert line["response"]["status_code"] == 200 and line["response"]["request_id"]
        body = line["response"]["body"]
        alone = c.chat.completions.create(**sent["body"])
        assert body["object"] == "chat.completion" and body["model"] == MODEL
        assert body["choices"][0]["message"]["content"] == alone.choices[0].message.content
        assert body["choices"][0]["finish_reason"] == alone.choices[0].finish_reason
        assert body["usage"]["completion_tokens"] == alone.usage.completion_tokens
        assert body["usage"]["prompt_tokens"] == alone.usage.prompt_tokens


def test_completions_and_embeddings_batches_answer_as_sent_alone(api):
    c = client(api)
    prompts = ("The capital of France is", "Once upon a time")
    done = wait(c, create(c, [row(f"p{i}", {"model": MODEL, "prompt": p, "max_tokens": 6, "temperature": 0},
                                  COMPLETIONS) for i, p in enumerate(prompts)], COMPLETIONS).id)
    assert done.status == "completed" and done.request_counts.completed == 2
    for line, prompt in zip(lines(c, done.output_file_id), prompts):
        alone = c.completions.create(model=MODEL, prompt=prompt, max_tokens=6, temperature=0)
        assert line["response"]["body"]["choices"][0]["text"] == alone.choices[0].text
    texts = ("a cat", "a dog")
    done = wait(c, create(c, [row(f"e{i}", {"model": MODEL, "input": t}, EMBEDDINGS) for i, t in enumerate(texts)],
                          EMBEDDINGS).id)
    assert done.status == "completed" and done.request_counts.completed == 2
    for line, text in zip(lines(c, done.output_file_id), texts):
        alone = c.embeddings.create(model=MODEL, input=text, encoding_format="float").data[0].embedding
        vector = line["response"]["body"]["data"][0]["embedding"]
        assert vector == pytest.approx(alone, abs=1e-5)


def test_rows_the_endpoint_refuses_land_in_the_error_file_and_the_others_complete(api):
    c = client(api)
    rows = [row("fine", chat_body("Say hello.")), row("hot", chat_body("Hi", temperature=9)),
            row("nomodel", chat_body("Hi", model="no-such-model")), row("nomessages", {"model": MODEL})]
    batch = wait(c, create(c, rows).id)
    assert batch.status == "completed"
    assert (batch.request_counts.completed, batch.request_counts.failed) == (1, 3)
    assert [x["custom_id"] for x in lines(c, batch.output_file_id)] == ["fine"]
    errors = {x["custom_id"]: x["response"] for x in lines(c, batch.error_file_id)}
    assert c.files.retrieve(batch.error_file_id).filename == f"{batch.id}_error.jsonl"
    assert errors["hot"]["status_code"] == 400 and errors["hot"]["body"]["error"]["param"] == "temperature"
    assert errors["nomodel"]["status_code"] == 404 and errors["nomodel"]["body"]["error"]["param"] == "model"
    assert errors["nomessages"]["status_code"] == 400 and errors["nomessages"]["body"]["error"]["param"] == "messages"


def test_cancel_stops_the_rows_in_flight_and_keeps_what_ran(api):
    c = client(api)
    long = row("long", chat_body("Write a long story.", max_tokens=2000, ignore_eos=True))
    batch = create(c, [long] + [row(f"s{i}", chat_body("Hi")) for i in range(5)])
    until(lambda: health(api.base_url)["running"] == 1)  # the long row generates (2000 tokens: a minute or more)
    cancelling = c.batches.cancel(batch.id)
    started = time.monotonic()
    assert cancelling.status in ("cancelling", "cancelled") and cancelling.cancelling_at
    batch = wait(c, batch.id, timeout=30)
    assert batch.status == "cancelled" and batch.cancelled_at and time.monotonic() - started < 10
    until(lambda: health(api.base_url)["running"] == 0, 5)  # the long row was stopped, not left to finish
    assert c.batches.cancel(batch.id).status == "cancelled"  # again: the same answer
    errors = lines(c, batch.error_file_id)
    long_line = next(e for e in errors if e["custom_id"] == "long")
    assert long_line["response"] is None and long_line["error"]["code"] == "batch_cancelled"
    done = [x["custom_id"] for x in lines(c, batch.output_file_id)] + [x["custom_id"] for x in errors]
    assert sorted(done) == sorted(["long"] + [f"s{i}" for i in range(5)])  # each row once, run or not
    with pytest.raises(openai.ConflictError, match="only a batch that is validating or in progress") as exc:
        c.batches.cancel(wait(c, create(c, [row("a", chat_body("Hi"))]).id).id)
    assert exc.value.param == "batch_id"


# -- bad input files: the batch fails at once, naming the line ------------------------------------------------------

GOOD = row("ok", chat_body("Hi"))


@pytest.mark.parametrize("content,code,line,param", [
    (jsonl([GOOD]) + b'{"custom_id": "x", "method": \n', "invalid_json_line", 2, None),
    (jsonl([GOOD, row("x", chat_body("Hi"), url=COMPLETIONS)]), "invalid_url", 2, "url"),
    (jsonl([GOOD, GOOD]), "duplicate_custom_id", 2, "custom_id"),
    (jsonl([GOOD, {**row("x", chat_body("Hi")), "method": "GET"}]), "invalid_method", 2, "method"),
    (jsonl([{k: v for k, v in row("x", {}).items() if k != "body"}]), "missing_required_parameter", 1, "body"),
    (jsonl([row("x", chat_body("Hi", stream=True))]), "invalid_request", 1, "body.stream"),
    (jsonl([row("x", [1])]), "invalid_request", 1, "body"),
    (jsonl([{**GOOD, "custom_id": 5}]), "invalid_custom_id", 1, "custom_id"),
    (b"[1, 2]\n", "invalid_json_line", 1, None),
    (b"\n\n", "empty_file", None, None),
], ids=["json", "url", "duplicate", "method", "missing-body", "stream", "body-not-object", "custom-id", "array",
        "empty"])
def test_a_bad_line_fails_the_batch_naming_it(api, content, code, line, param):
    batch = create(client(api), content)
    assert batch.status == "failed" and batch.failed_at and batch.request_counts.total == 0
    error = batch.errors.data[0]
    assert (error.code, error.line, error.param) == (code, line, param), error
    assert error.message and (line is None or f"line {line}" in error.message)


# -- bad requests: a 4xx naming the field ----------------------------------------------------------------------------

def test_creating_a_batch_refuses_what_it_cannot_run(api):
    c = client(api)
    good = upload(c, [GOOD]).id
    cases = [
        (dict(input_file_id="file-nonesuch"), openai.NotFoundError, "input_file_id"),
        (dict(input_file_id=good, endpoint="/v1/moderations"), openai.BadRequestError, "endpoint"),
        (dict(input_file_id=good, completion_window="48h"), openai.BadRequestError, "completion_window"),
        (dict(input_file_id=good, metadata={f"k{i}": "v" for i in range(17)}), openai.BadRequestError, "metadata"),
        (dict(input_file_id=good, output_expires_after={"anchor": "created_at", "seconds": 5}),
         openai.BadRequestError, "output_expires_after.seconds"),
    ]
    for given, error, param in cases:
        with pytest.raises(error) as exc:
            client(api).batches.create(**{"endpoint": CHAT, "completion_window": "24h", **given})
        assert exc.value.param == param, given
    output = wait(c, create(c, [GOOD]).id).output_file_id
    with pytest.raises(openai.BadRequestError, match="purpose 'batch_output'") as exc:
        c.batches.create(input_file_id=output, endpoint=CHAT, completion_window="24h")
    assert exc.value.param == "input_file_id"
    with pytest.raises(openai.NotFoundError):
        c.batches.retrieve("batch_nonesuch")


@pytest.mark.parametrize("purpose,message", [
    ("assistants", "purpose 'assistants' is not served here"),
    ("batch_output", "set by this server on the files a batch writes"),
    ("fine-tunes", "purpose must be 'batch'"),
])
def test_an_upload_names_a_purpose_it_cannot_take(api, purpose, message):
    with pytest.raises(openai.BadRequestError, match=message) as exc:
        client(api).files.create(file=("a.jsonl", b"{}"), purpose=purpose)
    assert exc.value.param == "purpose"


def test_uploads_have_their_own_size_limit_and_json_bodies_keep_theirs(api):
    """--api-max-file-mb 2 and --api-max-body-mb 1: a 1.5 MB upload is taken, a JSON body of that size is not; a
    file just over 2 MB is refused by its route, a larger one while it arrives; the server goes on serving."""
    auth = {"authorization": f"Bearer {api.key}"}
    taken = client(api).files.create(file=("big.jsonl", b"x" * (3 * 2**19)), purpose="batch")
    assert taken.bytes == 3 * 2**19
    for size in (2 * 2**20 + 1, 3 * 2**20):
        r = httpx.post(api.base_url + "/files", headers=auth, files={"file": ("f.jsonl", b"x" * size)},
                       data={"purpose": "batch"}, timeout=60)
        assert r.status_code == 413 and r.json()["error"]["param"] == "file", r.text
        assert "--api-max-file-mb" in r.json()["error"]["message"]
    r = httpx.post(api.base_url + "/chat/completions", headers=auth, timeout=60,
                   json=chat_body("x" * (3 * 2**19)))
    assert r.status_code == 413 and "--api-max-body-mb" in r.text
    with pytest.raises(openai.BadRequestError, match="'file' is required") as exc:  # not multipart at all
        client(api).post("/files", body={"purpose": "batch"}, cast_to=object)
    assert exc.value.param == "file"
    r = httpx.post(api.base_url + "/files", headers=auth, files={"file": ("f.jsonl", b"{}")}, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["param"] == "purpose"
    assert client(api).models.list().data  # still serving


# -- files -----------------------------------------------------------------------------------------------------------

def test_files_are_listed_filtered_paged_read_and_deleted(api):
    c = client(api)
    made = [c.files.create(file=(f"f{i}.jsonl", f"line {i}\n".encode()), purpose="batch",
                           expires_after={"anchor": "created_at", "seconds": 3600}) for i in range(3)]
    assert made[0].object == "file" and made[0].id.startswith("file-") and made[0].status == "processed"
    assert made[0].filename == "f0.jsonl" and made[0].bytes == 7 and made[0].expires_at == made[0].created_at + 3600
    assert c.files.retrieve(made[1].id) == made[1]
    assert c.files.content(made[2].id).content == b"line 2\n"
    newest = c.files.list(purpose="batch", limit=2)
    assert [f.id for f in newest.data] == [made[2].id, made[1].id] and newest.has_more
    assert c.files.list(purpose="batch", limit=1, after=made[1].id).data[0].id == made[0].id
    oldest_first = [f.id for f in c.files.list(purpose="batch", order="asc").data]
    assert oldest_first.index(made[0].id) < oldest_first.index(made[2].id)
    assert all(f.purpose == "batch_output" for f in c.files.list(purpose="batch_output").data)
    gone = c.files.delete(made[0].id)
    assert gone.deleted and gone.id == made[0].id
    with pytest.raises(openai.NotFoundError) as exc:
        c.files.retrieve(made[0].id)
    assert exc.value.param == "file_id"
    with pytest.raises(openai.BadRequestError) as exc:
        c.files.create(file=("a.jsonl", b"{}"), purpose="batch", expires_after={"anchor": "created_at", "seconds": 60})
    assert exc.value.param == "expires_after.seconds"


def test_each_key_sees_and_uses_only_its_own_files_and_batches(api):
    mine, theirs, admin = client(api), client(api, OTHER_KEY), client(api, ADMIN_KEY)
    batch = wait(theirs, create(theirs, [row("t", chat_body("Hi"))]).id)
    their_file = batch.input_file_id
    for call in (lambda: mine.files.retrieve(their_file), lambda: mine.files.content(their_file),
                 lambda: mine.files.delete(their_file), lambda: mine.batches.retrieve(batch.id),
                 lambda: mine.batches.cancel(batch.id), lambda: mine.files.retrieve(batch.output_file_id)):
        with pytest.raises(openai.NotFoundError):
            call()
    with pytest.raises(openai.NotFoundError) as exc:
        mine.batches.create(input_file_id=their_file, endpoint=CHAT, completion_window="24h")
    assert exc.value.param == "input_file_id"
    assert their_file not in {f.id for f in mine.files.list()} and batch.id not in {b.id for b in mine.batches.list()}
    assert their_file in {f.id for f in theirs.files.list()} and batch.id in {b.id for b in theirs.batches.list()}
    assert admin.files.retrieve(their_file).id == their_file and admin.batches.retrieve(batch.id).id == batch.id
    with sqlite3.connect(api.server.log.parent / "workbench.sqlite3") as db:  # its row ran as the key that made it
        clients = {r[0] for r in db.execute("SELECT client FROM api_requests WHERE request LIKE ?",
                                            (f"%{json.dumps(chat_body('Hi'))[1:-1]}%",))}
    assert "key 2" in clients


def test_batches_are_listed_newest_first_in_pages(api):
    c = client(api)
    made = [create(c, b"not json\n").id for _ in range(3)]  # (failed at once: quick)
    first = c.batches.list(limit=2)
    assert [b.id for b in first.data] == made[::-1][:2] and first.has_more
    assert c.batches.list(limit=1, after=made[1]).data[0].id == made[0]
    assert {b.id for b in c.batches.list(limit=100)} >= set(made)


# -- restart (last: it stops the module's server) --------------------------------------------------------------------

def _done_rows(user_data: Path, batch_id: str) -> dict[str, dict]:
    with sqlite3.connect(user_data / "workbench.sqlite3") as db:
        rows = db.execute("SELECT r.custom_id, r.result FROM api_batch_rows AS r JOIN api_batches AS b ON "
                          "b.seq = r.batch_seq WHERE b.id = ? AND r.status_code IS NOT NULL", (batch_id,)).fetchall()
    return {custom_id: json.loads(result) for custom_id, result in rows}


def _serve(user_data: Path):
    port = free_port()
    return running_server(user_data, "--nowebui", "--api-port", str(port), "--api-key", API_KEY, *ARGS), \
        f"http://127.0.0.1:{port}/v1"


def test_a_batch_goes_on_after_a_stop_and_a_crash_running_each_row_once(api):
    user_data = api.server.log.parent
    total = 24
    c = client(api)
    batch = create(c, [row(f"r{i:02d}", chat_body(f"Count from {i}.")) for i in range(total)])
    wait(c, batch.id, done=3)
    api.server.proc.send_signal(signal.SIGTERM)  # a stop: the runner ends with the app, rows in flight cancelled
    stopping = time.monotonic()
    assert api.server.proc.wait(30) == 0 and time.monotonic() - stopping < 15
    stopped = _done_rows(user_data, batch.id)
    assert 3 <= len(stopped) < total
    ctx, base = _serve(user_data)
    with ctx as second:
        c2 = client(api, base=base)
        assert c2.batches.retrieve(batch.id).status == "in_progress"
        wait(c2, batch.id, done=len(stopped) + 3)
        second.proc.kill()  # a crash
        second.proc.wait(30)
    crashed = _done_rows(user_data, batch.id)
    assert len(crashed) < total, "the batch ended before the crash; give it more rows"
    assert {k: crashed[k] for k in stopped} == stopped  # nothing done was run again
    ctx, base = _serve(user_data)
    with ctx:
        c3 = client(api, base=base)
        done = wait(c3, batch.id)
        out = lines(c3, done.output_file_id)
    assert done.status == "completed" and done.request_counts.completed == total and done.error_file_id is None
    assert sorted(x["custom_id"] for x in out) == [f"r{i:02d}" for i in range(total)]  # each row exactly once
    by_id = {x["custom_id"]: x for x in out}
    assert {k: by_id[k] for k in crashed} == crashed  # the rows done before the crash: their first and only answer
