"""The Batch tab's view of the API's batch jobs (#45) on a real SQLite store: what the table lists, a batch in
words, Cancel, and who sees them with a login; Anthropic's Message Batches listed beside OpenAI's."""

from __future__ import annotations

import dataclasses
import json

import pytest

from webui.controllers.api_batches import APIBatchesView
from webui.controllers.errors import UserError
from webui.store.api_batches import RowInput, RowUsage

CHAT = "/v1/chat/completions"


def a_batch(services, rows: int = 3, client: str = "key 1", errors=()):
    lines = [RowInput(i + 1, f"r{i}", CHAT, json.dumps({"model": "tiny", "messages": []})) for i in range(rows)]
    return services.api_batches.create(client=client, endpoint=CHAT, input_file_id="file-abc",
                                       completion_window="24h", window_s=86400, rows=lines, errors=errors,
                                       model="tiny")


def test_the_table_lists_batches_newest_first_with_their_progress(services):
    assert "The API is off" in APIBatchesView(services).table(None).note
    services.config = dataclasses.replace(services.config, api=True)
    view = APIBatchesView(services)
    empty = view.table(None)
    assert empty.rows == [] and not empty.running and "No API batches yet" in empty.note
    first = a_batch(services, rows=4)
    services.api_batches.finish_row(first.seq, 1, 200, {"custom_id": "r0"}, RowUsage(10, 2, 3))
    services.api_batches.finish_row(first.seq, 2, 400, {"custom_id": "r1"}, RowUsage())
    failed = a_batch(services, errors=[{"code": "invalid_url", "message": "line 2: url is not the batch's endpoint",
                                        "param": "url", "line": 2}])
    listed = view.table(None)
    assert [r[0] for r in listed.rows] == [failed.id, first.id]
    assert listed.rows[1][1:4] == ["in_progress", "2 / 4 (50%)", "1"] and listed.rows[1][6] == "key 1"
    assert listed.rows[0][1] == "failed" and listed.running  # the first is still open: the tab refreshes
    said = view.detail(first.id, None)
    assert "2 / 4 (50%) rows done, 1 failed" in said and "Tokens: 10 in (2 from the prefix cache), 3 out" in said
    assert "line 2: line 2: url is not the batch's endpoint" in view.detail(failed.id, None)


def test_cancel_asks_the_runner_to_stop_a_running_batch_and_says_why_it_cannot_otherwise(services):
    view = APIBatchesView(services)
    running, failed = a_batch(services), a_batch(services, errors=[{"code": "x", "message": "bad", "line": 1}])
    assert "is being cancelled" in view.cancel(running.id, None)
    assert services.api_batches.get(running.id).status == "cancelling"
    assert "cancelling already" in view.cancel(running.id, None)
    with pytest.raises(UserError, match="is failed: only a batch in progress can be cancelled"):
        view.cancel(failed.id, None)
    with pytest.raises(UserError, match="Click a batch in the table first"):
        view.cancel(None, None)
    with pytest.raises(UserError, match="is gone"):
        view.detail("batch_nonesuch", None)


def test_with_a_login_only_admins_see_the_apis_batches(services):
    batch = a_batch(services)
    services.config = dataclasses.replace(services.config, ui_users=(("alice", "x"), ("bob", "y")),
                                          ui_admins=("alice",))
    view = APIBatchesView(services)
    assert [r[0] for r in view.table("alice").rows] == [batch.id]
    hidden = view.table("bob")
    assert hidden.rows == [] and "Only admin users" in hidden.note
    for act in (lambda: view.detail(batch.id, "bob"), lambda: view.cancel(batch.id, "bob")):
        with pytest.raises(UserError, match="Only admin users"):
            act()
    assert services.api_batches.get(batch.id).status == "in_progress"


def test_anthropic_message_batches_are_listed_beside_openais(services):
    services.config = dataclasses.replace(services.config, api=True)
    openai_batch = a_batch(services)
    rows = [RowInput(1, "a", "/v1/messages", json.dumps({"model": "tiny", "max_tokens": 8, "messages": []}))]
    message_batch = services.api_batches.create(client="key 2", endpoint="/v1/messages", input_file_id="",
                                                completion_window="24h", window_s=86400, rows=rows, model="tiny",
                                                api="anthropic")
    view = APIBatchesView(services)
    listed = view.table(None).rows
    assert [(r[0], r[4]) for r in listed] == [(message_batch.id, "/v1/messages"), (openai_batch.id, CHAT)]
    said = view.detail(message_batch.id, None)
    assert "Anthropic's Message Batches API" in said and f"/v1/messages/batches/{message_batch.id}/results" in said
    assert "requests not run are canceled" in view.cancel(message_batch.id, None)
