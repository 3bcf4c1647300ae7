"""Anthropic's Message Batches API (/v1/messages/batches) with Anthropic's official client against a real server and
the real default model: a batch's requests answer as the same requests sent alone (greedy); a request
/v1/messages refuses is that one's ``errored`` result, the others succeed; cancel leaves the requests not run
``canceled``; lists page newest first; delete only once ended; every input a client can get wrong is a 400 naming
the field, in Anthropic's error shape; each key sees only its own batches, and OpenAI's /v1/batches lists none of
them. Generations are kept short (max_tokens <= 8).

One server for the module, with --max-running 2: a background row never takes the last slot, so a batch runs one
request at a time (which gives a cancel rows still to cancel)."""

from __future__ import annotations

import time

import anthropic
import httpx
import openai
import pytest

from tests.api.conftest import APIServer, start_api

pytestmark = pytest.mark.real_model

MODEL = "SmolLM2-135M-Instruct"
OTHER_KEY = "second-key-456"
QUESTIONS = ("What is the capital of France?", "Name a colour.", "Say hello.")


@pytest.fixture(scope="module")
def api(tmp_path_factory, default_model_dir):
    ctx, base, key = start_api(tmp_path_factory, default_model_dir, "--api-key", OTHER_KEY, "--max-running", "2")
    with ctx as server:
        yield APIServer(base, key, server)


@pytest.fixture
def client(api):
    with anthropic.Anthropic(base_url=api.root, api_key=api.key, max_retries=0, timeout=120) as c:
        yield c


def params(text: str, **extra) -> dict:
    return {"model": MODEL, "max_tokens": 8, "temperature": 0, "messages": [{"role": "user", "content": text}],
            **extra}


def ended(client: anthropic.Anthropic, batch_id: str, timeout: float = 180):
    deadline = time.monotonic() + timeout
    while (batch := client.messages.batches.retrieve(batch_id)).processing_status != "ended":
        assert time.monotonic() < deadline, f"batch {batch_id} still {batch.processing_status} after {timeout}s"
        time.sleep(0.1)
    return batch


def results(client: anthropic.Anthropic, batch_id: str) -> dict:
    found: dict = {}
    for line in client.messages.batches.results(batch_id):
        assert line.custom_id not in found, f"{line.custom_id} twice"
        found[line.custom_id] = line.result
    return found


def raw(api: APIServer, method: str, path: str, key: str | None = None, **kwargs) -> httpx.Response:
    headers = {"x-api-key": key or api.key, "anthropic-version": "2023-06-01"}
    return httpx.request(method, api.root + path, headers=headers, timeout=60, **kwargs)


def anthropic_error(response: httpx.Response, status: int, kind: str, *names: str) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["type"] == "error" and body["error"]["type"] == kind, body
    assert all(name in body["error"]["message"] for name in names), body
    return body["error"]["message"]


def test_a_batch_answers_each_request_as_the_same_request_sent_alone(api, client):
    requests = [{"custom_id": f"q{i}", "params": params(q)} for i, q in enumerate(QUESTIONS)]
    batch = client.messages.batches.create(requests=requests)
    assert batch.type == "message_batch" and batch.id.startswith("msgbatch_")
    assert batch.processing_status == "in_progress" and batch.request_counts.processing == 3
    assert batch.results_url is None and batch.ended_at is None and batch.cancel_initiated_at is None
    assert (batch.expires_at - batch.created_at).total_seconds() == 24 * 3600
    done = ended(client, batch.id)
    counts = done.request_counts
    assert (counts.processing, counts.succeeded, counts.errored, counts.canceled, counts.expired) == (0, 3, 0, 0, 0)
    assert done.ended_at >= done.created_at and done.results_url.endswith(f"/v1/messages/batches/{batch.id}/results")
    found = results(client, batch.id)
    assert sorted(found) == ["q0", "q1", "q2"]
    for i, question in enumerate(QUESTIONS):
        result = found[f"q{i}"]
        assert result.type == "succeeded" and result.message.type == "message", result
        sent = params(question)
        greedy = {"temperature": sent.pop("temperature")}  # (this client version has no temperature argument)
        alone = client.messages.create(**sent, extra_body=greedy)
        assert [b.text for b in result.message.content] == [b.text for b in alone.content] and alone.content
        assert result.message.usage.output_tokens <= 8
    # OpenAI's Batch API neither lists nor finds it (nor the other way round)
    with openai.OpenAI(base_url=api.base_url, api_key=api.key, max_retries=0) as oa:
        assert batch.id not in [b.id for b in oa.batches.list()]
        with pytest.raises(openai.NotFoundError):
            oa.batches.retrieve(batch.id)


def test_a_request_messages_refuses_is_errored_and_the_others_succeed(client):
    bad = params("Hi")
    del bad["max_tokens"]
    batch = client.messages.batches.create(requests=[
        {"custom_id": "good-1", "params": params("Say hello.")}, {"custom_id": "bad", "params": bad},
        {"custom_id": "good_2", "params": params("Name a colour.")}])
    done = ended(client, batch.id)
    assert (done.request_counts.succeeded, done.request_counts.errored) == (2, 1)
    found = results(client, batch.id)
    assert found["good-1"].type == found["good_2"].type == "succeeded"
    error = found["bad"]
    assert error.type == "errored" and error.error.type == "error", error
    assert error.error.error.type == "invalid_request_error" and "max_tokens" in error.error.error.message


def test_cancel_leaves_the_requests_not_run_canceled_and_delete_waits_for_the_end(api, client):
    batch = client.messages.batches.create(requests=[{"custom_id": f"r{i}", "params": params(f"Count to {i}.")}
                                                     for i in range(24)])
    anthropic_error(raw(api, "DELETE", f"/v1/messages/batches/{batch.id}"), 400, "invalid_request_error",
                    "message_batch_id", "cancel it first")
    anthropic_error(raw(api, "GET", f"/v1/messages/batches/{batch.id}/results"), 400, "invalid_request_error",
                    "still processing")
    canceling = client.messages.batches.cancel(batch.id)
    assert canceling.processing_status in ("canceling", "ended") and canceling.cancel_initiated_at is not None
    done = ended(client, batch.id)
    counts = done.request_counts
    assert counts.canceled >= 1 and counts.succeeded + counts.canceled == 24 and counts.errored == 0, counts
    found = results(client, batch.id)
    assert sorted(found) == sorted(f"r{i}" for i in range(24))
    assert sum(r.type == "canceled" for r in found.values()) == counts.canceled
    anthropic_error(raw(api, "POST", f"/v1/messages/batches/{batch.id}/cancel"), 400, "invalid_request_error",
                    "has ended")
    deleted = client.messages.batches.delete(batch.id)
    assert deleted.id == batch.id and deleted.type == "message_batch_deleted"
    with pytest.raises(anthropic.NotFoundError):
        client.messages.batches.retrieve(batch.id)


def test_lists_page_newest_first(api, client):
    made = [client.messages.batches.create(requests=[{"custom_id": "one", "params": params("Hi", max_tokens=1)}]).id
            for _ in range(3)]
    everything = [b.id for b in client.messages.batches.list(limit=2)]  # the client follows after_id page by page
    assert everything[:3] == made[::-1] and len(everything) == len(set(everything))
    first = client.messages.batches.list(limit=2)
    assert first.has_more and [b.id for b in first.data] == made[:0:-1] and first.last_id == made[1]
    older = client.messages.batches.list(limit=1, after_id=made[1])
    assert [b.id for b in older.data] == [made[0]]
    newer = client.messages.batches.list(limit=1, before_id=made[0])
    assert [b.id for b in newer.data] == [made[1]] and newer.has_more
    anthropic_error(raw(api, "GET", "/v1/messages/batches", params={"after_id": "msgbatch_nope"}), 400,
                    "invalid_request_error", "after_id")
    anthropic_error(raw(api, "GET", "/v1/messages/batches", params={"limit": "0"}), 400, "invalid_request_error",
                    "limit")
    for batch_id in made:
        ended(client, batch_id)


@pytest.mark.parametrize("requests, names", [
    ([{"custom_id": "a", "params": params("Hi")}, {"custom_id": "a", "params": params("Hi")}],
     ("requests.1.custom_id", "'a'")),
    ([{"custom_id": "has space", "params": params("Hi")}], ("requests.0.custom_id", "has space")),
    ([{"custom_id": "x" * 65, "params": params("Hi")}], ("requests.0.custom_id",)),
    ([{"custom_id": 7, "params": params("Hi")}], ("requests.0.custom_id",)),
    ([{"params": params("Hi")}], ("requests.0.custom_id", "required")),
    ([{"custom_id": "a", "params": "Hi"}], ("requests.0.params",)),
    ([{"custom_id": "a", "params": params("Hi", stream=True)}], ("requests.0.params.stream",)),
    (["a"], ("requests.0",)),
    ([], ("requests",)),
])
def test_bad_requests_are_a_400_naming_the_field(api, requests, names):
    anthropic_error(raw(api, "POST", "/v1/messages/batches", json={"requests": requests}), 400,
                    "invalid_request_error", *names)


def test_a_bad_body_is_a_400_and_nothing_is_made(api, client):
    before = [b.id for b in client.messages.batches.list(limit=1000)]
    anthropic_error(raw(api, "POST", "/v1/messages/batches", json={}), 400, "invalid_request_error", "requests")
    anthropic_error(raw(api, "POST", "/v1/messages/batches", json={"requests": {"a": 1}}), 400,
                    "invalid_request_error", "requests")
    anthropic_error(raw(api, "POST", "/v1/messages/batches", json={"requests": [], "extra": 1}), 400,
                    "invalid_request_error", "extra")
    with pytest.raises(anthropic.BadRequestError, match="requests.1.custom_id"):
        client.messages.batches.create(requests=[{"custom_id": "a", "params": params("Hi")},
                                                 {"custom_id": "a", "params": params("Hi")}])
    assert [b.id for b in client.messages.batches.list(limit=1000)] == before


def test_each_key_sees_only_its_own_batches(api, client):
    batch = client.messages.batches.create(requests=[{"custom_id": "mine", "params": params("Hi", max_tokens=1)}])
    with anthropic.Anthropic(base_url=api.root, api_key=OTHER_KEY, max_retries=0) as other:
        with pytest.raises(anthropic.NotFoundError) as caught:
            other.messages.batches.retrieve(batch.id)
        assert caught.value.body["error"]["type"] == "not_found_error" and batch.id in caught.value.message
        assert batch.id not in [b.id for b in other.messages.batches.list()]
    for method, tail in (("POST", "/cancel"), ("DELETE", ""), ("GET", "/results")):
        anthropic_error(raw(api, method, f"/v1/messages/batches/{batch.id}{tail}", key=OTHER_KEY), 404,
                        "not_found_error", batch.id)
    anthropic_error(raw(api, "GET", "/v1/messages/batches/msgbatch_none"), 404, "not_found_error", "msgbatch_none")
    ended(client, batch.id)
