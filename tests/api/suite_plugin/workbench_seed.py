"""A pytest plugin for openai-python's own tests run against our server (tests/api/test_openai_suite.py).

Their stored-completions tests read, update and delete the id "completion_id" (a prism mock answers any id). Before
each of their tests this puts a real stored completion of our server under that id, copied in the server's SQLite
file from one the suite's fixture created with store: true (so a test that deleted it leaves none missing for the
next). Their stored-responses tests (tests/api/test_openai_suite_responses.py) name the ids in
WORKBENCH_SEED_RESPONSE_IDS; each gets a copy of the stored response WORKBENCH_SEED_RESPONSE the same way. Not a package of ours: loaded by name with -p, from this folder on PYTHONPATH, because their own tests
directory is also called "tests".
"""

from __future__ import annotations

import json
import os
import sqlite3

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
