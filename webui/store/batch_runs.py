"""Batch runs in SQLite: the run's full spec (to re-run it) and every finished result row.

Each result is written in its own transaction as soon as it finishes, so a
crash mid-run keeps every finished row.
"""

from __future__ import annotations

import builtins
import json
import sqlite3
import time
from dataclasses import dataclass
from typing import Any

from webui.owner import current as current_owner
from webui.store.chats import check_title
from webui.store.db import Database, inserted_id
from webui.store.errors import StoreError

STATUSES = ("running", "done", "cancelled", "failed")


class RunNotFound(StoreError):
    pass


@dataclass(frozen=True)
class BatchRun:
    id: int
    """The run's key in the store (shared by all owners: never shown)."""
    name: str
    spec: dict[str, Any]
    model: str | None
    status: str
    total: int
    done: int
    created: float
    updated: float
    number: int = 0
    """What the user sees: #1 is their first run (numbered per owner)."""


class BatchStore:
    def __init__(self, db: Database) -> None:
        self._db = db

    def create(self, name: str, spec: dict[str, Any], model: str | None, total: int) -> BatchRun:
        name = check_title(name)
        now = time.time()
        with self._db.transaction() as conn:
            owner = current_owner()
            number = conn.execute("SELECT coalesce(max(number), 0) + 1 FROM batch_runs WHERE owner = ?",
                                  (owner,)).fetchone()[0]
            cur = conn.execute("INSERT INTO batch_runs (name, spec, model, status, total, created, updated, owner, "
                               "number) VALUES (?, ?, ?, 'running', ?, ?, ?, ?, ?)",
                               (name, json.dumps(spec), model, total, now, now, owner, number))
            run_id = inserted_id(cur.lastrowid)
        return self.get(run_id)

    def add_result(self, run_id: int, cell: int, result: dict[str, Any]) -> None:
        with self._db.transaction() as conn:
            _own(conn, run_id)
            conn.execute("INSERT OR REPLACE INTO batch_results (run_id, cell, result) VALUES (?, ?, ?)",
                         (run_id, cell, json.dumps(result)))
            conn.execute("UPDATE batch_runs SET updated = ? WHERE id = ?", (time.time(), run_id))

    def set_review(self, run_id: int, prompt_index: int, setting: str, sample: int,
                   review: dict[str, Any] | None) -> bool:
        """Store a person's verdict on one row ({"verdict": "good"|"bad", "note": text}; None clears it);
        False when the run has no such row."""
        with self._db.transaction() as conn:
            _own(conn, run_id)
            changed = conn.execute(
                "UPDATE batch_results SET result = json_set(result, '$.review', json(?)) WHERE run_id = ? AND "
                "json_extract(result, '$.prompt_index') = ? AND json_extract(result, '$.setting') = ? AND "
                "json_extract(result, '$.sample') = ?",
                (json.dumps(review), run_id, prompt_index, setting, sample)).rowcount
            if changed:
                conn.execute("UPDATE batch_runs SET updated = ? WHERE id = ?", (time.time(), run_id))
            return changed > 0

    def finish(self, run_id: int, status: str) -> None:
        if status not in STATUSES:
            raise StoreError(f"status must be one of {', '.join(STATUSES)}, got {status!r}")
        with self._db.transaction() as conn:
            _own(conn, run_id)
            conn.execute("UPDATE batch_runs SET status = ?, updated = ? WHERE id = ?", (status, time.time(), run_id))

    def get(self, run_id: int) -> BatchRun:
        row = self._db.query_one(
            "SELECT r.*, (SELECT count(*) FROM batch_results WHERE run_id = r.id) AS done "
            "FROM batch_runs r WHERE r.id = ? AND r.owner = ?", (run_id, current_owner()))
        if row is None:
            raise RunNotFound("this batch run does not exist (it may have been deleted)")
        return _run(row)

    def list(self) -> builtins.list[BatchRun]:
        rows = self._db.query("SELECT r.*, (SELECT count(*) FROM batch_results WHERE run_id = r.id) AS done "
                              "FROM batch_runs r WHERE r.owner = ? ORDER BY r.created DESC, r.id DESC",
                              (current_owner(),))
        return [_run(r) for r in rows]

    def results(self, run_id: int) -> builtins.list[dict[str, Any]]:
        self.get(run_id)
        rows = self._db.query("SELECT result FROM batch_results WHERE run_id = ? ORDER BY cell", (run_id,))
        return [json.loads(r["result"]) for r in rows]

    def rename(self, run_id: int, name: str) -> BatchRun:
        name = check_title(name)
        with self._db.transaction() as conn:
            if conn.execute("UPDATE batch_runs SET name = ?, updated = ? WHERE id = ? AND owner = ?",
                            (name, time.time(), run_id, current_owner())).rowcount == 0:
                raise RunNotFound("this batch run does not exist")
        return self.get(run_id)

    def delete(self, run_id: int) -> None:
        with self._db.transaction() as conn:
            if conn.execute("DELETE FROM batch_runs WHERE id = ? AND owner = ?",
                            (run_id, current_owner())).rowcount == 0:
                raise RunNotFound("this batch run does not exist")

    def mark_interrupted(self) -> int:
        """Runs still 'running' from a process that died are 'failed' now; their rows stay. Returns how many."""
        with self._db.transaction() as conn:
            return conn.execute("UPDATE batch_runs SET status = 'failed' WHERE status = 'running'").rowcount


def _own(conn: sqlite3.Connection, run_id: int) -> None:
    """RunNotFound unless the run is there and the current owner's."""
    if conn.execute("SELECT 1 FROM batch_runs WHERE id = ? AND owner = ?", (run_id, current_owner())).fetchone() is None:
        raise RunNotFound("this batch run does not exist (it may have been deleted)")


def _run(row: sqlite3.Row) -> BatchRun:
    return BatchRun(row["id"], row["name"], json.loads(row["spec"]), row["model"], row["status"], row["total"],
                    row["done"], row["created"], row["updated"], row["number"])
