"""A pytest plugin for openai-python's own tests run against our server (tests/api/test_openai_suite.py and
tests/api/test_openai_suite_batches.py), and anthropic-sdk-python's (tests/api/test_anthropic_suite.py).

Their stored-completions tests read, update and delete the id "completion_id" (a prism mock answers any id). Before
each of their tests this puts a real stored completion of our server under that id, copied in the server's SQLite
file from one the suite's fixture created with store: true (so a test that deleted it leaves none missing for the
next). Their files and batches tests name the ids "file_id", "input_file_id" and "batch_id": those are copies of a
real uploaded batch input (its row and its bytes) and of a real batch, put back in progress, with no rows left to
run, so it can be cancelled. Their stored-responses tests (tests/api/test_openai_suite_responses.py) name the ids in
WORKBENCH_SEED_RESPONSE_IDS; each gets a copy of the stored response WORKBENCH_SEED_RESPONSE the same way.
anthropic-sdk-python's Message Batches tests (tests/api/test_anthropic_suite.py) name "message_batch_id" (and list
with after_id="after_id", before_id="before_id"): each is a copy of the ended Message Batch
WORKBENCH_SEED_MESSAGE_BATCH with its rows (its results); for their cancel tests "message_batch_id" is put back in
progress with its rows not run (the runner notices it once woken: by the cancel). Not a
package of ours: loaded by name with -p, from this folder on PYTHONPATH, because their own tests directory is also
called "tests".
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _stored_completion_id() -> None:
    db_path, source = os.environ.get("WORKBENCH_SEED_DB"), os.environ.get("WORKBENCH_SEED_FROM")
    if not db_path or not source:
        return
    with sqlite3.connect(db_path, timeout=30) as db:
        row = db.execute("SELECT response FROM api_requests WHERE id = ?", (source,)).fetchone()
        assert row is not None, f"the seed completion {source} is not in {db_path}"
        response = json.dumps({**json.loads(row[0]), "id": "completion_id"})
        db.execute("DELETE FROM api_requests WHERE id = 'completion_id'")
        db.execute("""INSERT INTO api_requests (id, created, endpoint, status, client, model, stored, metadata,
                                                request, response, details, bytes)
                      SELECT 'completion_id', created, endpoint, status, client, model, stored, '{}', request, ?,
                             details, bytes FROM api_requests WHERE id = ?""", (response, source))


@pytest.fixture(autouse=True)
def _file_and_batch_ids() -> None:
    db_path, file_id, batch_id = (os.environ.get(name) for name in ("WORKBENCH_SEED_DB", "WORKBENCH_SEED_FILE",
                                                                    "WORKBENCH_SEED_BATCH"))
    if not db_path or not file_id or not batch_id:
        return
    folder = Path(db_path).parent / "api_files"
    with sqlite3.connect(db_path, timeout=30) as db:
        for copy in ("file_id", "input_file_id"):
            db.execute("DELETE FROM api_files WHERE id = ?", (copy,))
            found = db.execute("""INSERT INTO api_files (id, client, filename, purpose, bytes, created_at, expires_at)
                                  SELECT ?, client, filename, purpose, bytes, created_at, expires_at FROM api_files
                                  WHERE id = ?""", (copy, file_id)).rowcount
            assert found, f"the seed file {file_id} is not in {db_path}"
            shutil.copyfile(folder / file_id, folder / copy)
        db.execute("DELETE FROM api_batches WHERE id = 'batch_id'")
        found = db.execute("""INSERT INTO api_batches (id, client, endpoint, input_file_id, completion_window, status,
                                                       model, metadata, output_expires_after, errors, output_file_id,
                                                       error_file_id, total, completed, failed, input_tokens,
                                                       cached_tokens, output_tokens, created_at, expires_at, times)
                              SELECT 'batch_id', client, endpoint, input_file_id, completion_window, 'in_progress',
                                     model, metadata, NULL, NULL, NULL, NULL, total, completed, failed, input_tokens,
                                     cached_tokens, output_tokens, created_at, expires_at,
                                     json_object('in_progress', created_at)
                              FROM api_batches WHERE id = ?""", (batch_id,)).rowcount
        assert found, f"the seed batch {batch_id} is not in {db_path}"


@pytest.fixture(autouse=True)
def _stored_response_ids() -> None:
    db_path, source = os.environ.get("WORKBENCH_SEED_DB"), os.environ.get("WORKBENCH_SEED_RESPONSE")
    if not db_path or not source:
        return
    with sqlite3.connect(db_path, timeout=30) as db:
        row = db.execute("SELECT response FROM responses WHERE id = ?", (source,)).fetchone()
        assert row is not None, f"the seed response {source} is not in {db_path}"
        for wanted in os.environ.get("WORKBENCH_SEED_RESPONSE_IDS", "").split(","):
            response = json.dumps({**json.loads(row[0]), "id": wanted})
            db.execute("DELETE FROM responses WHERE id = ?", (wanted,))
            db.execute("""INSERT INTO responses (id, client, created, status, background, previous, response, input)
                          SELECT ?, client, created, status, background, previous, ?, input FROM responses
                          WHERE id = ?""", (wanted, response, source))


MESSAGE_BATCH_IDS = ("after_id", "before_id", "message_batch_id")  # in this order: message_batch_id is the newest


@pytest.fixture(autouse=True)
def _message_batch_ids(request: pytest.FixtureRequest) -> None:
    db_path, source = os.environ.get("WORKBENCH_SEED_DB"), os.environ.get("WORKBENCH_SEED_MESSAGE_BATCH")
    if not db_path or not source:
        return
    with sqlite3.connect(db_path, timeout=30) as db:
        for copy in MESSAGE_BATCH_IDS:
            reopened = copy == "message_batch_id" and "cancel" in request.node.name
            db.execute("DELETE FROM api_batch_rows WHERE batch_seq IN (SELECT seq FROM api_batches WHERE id = ?)",
                       (copy,))
            db.execute("DELETE FROM api_batches WHERE id = ?", (copy,))
            made = db.execute(f"""INSERT INTO api_batches (id, client, endpoint, input_file_id, completion_window,
                                                          status, model, metadata, output_expires_after, errors,
                                                          output_file_id, error_file_id, total, completed, failed,
                                                          input_tokens, cached_tokens, output_tokens, created_at,
                                                          expires_at, times, api)
                                 SELECT ?, client, endpoint, input_file_id, completion_window,
                                        {"'in_progress'" if reopened else "status"}, model, metadata,
                                        output_expires_after, errors, output_file_id, error_file_id, total,
                                        {"0, 0, 0, 0, 0" if reopened else
                                         "completed, failed, input_tokens, cached_tokens, output_tokens"},
                                        created_at, expires_at,
                                        {"json_object('in_progress', created_at)" if reopened else "times"}, api
                                 FROM api_batches WHERE id = ? AND api = 'anthropic'""", (copy, source))
            assert made.rowcount == 1, f"the seed Message Batch {source} is not in {db_path}"
            seq = made.lastrowid
            db.execute(f"""INSERT INTO api_batch_rows (batch_seq, line, custom_id, url, body, status_code, result)
                           SELECT ?, line, custom_id, url, body, {"NULL, NULL" if reopened else "status_code, result"}
                           FROM api_batch_rows WHERE batch_seq = (SELECT seq FROM api_batches WHERE id = ?)""",
                       (seq, source))
