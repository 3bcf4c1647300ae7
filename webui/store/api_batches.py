"""Batches of OpenAI's Batch API (/v1/batches, #45) and Anthropic's Message Batches API (/v1/messages/batches):
each batch with its input's rows, and each row's result as soon as it has run. ``api`` names which API made a
batch: each API lists, reads and answers only its own.

    batches = APIBatchStore(db, files)
    batch = batches.create(client="key 1", endpoint="/v1/chat/completions", rows=[RowInput(1, "a", url, body)], ...)
    for row in batches.pending(batch.seq, limit=8): ...          # the rows not done yet, in input order
    batches.finish_row(batch.seq, row.line, 200, line, RowUsage(12, 0, 8))   # its result and the counts, at once

A row's result (the line of the output or error file it goes to) is written with the batch's progress counts in
one transaction, so a crash loses no finished row and a restarted server runs only the rows whose result is not
there. The output and error files are kept with the batch's final status in one transaction too (``end``).
Batches and their files belong to the API key that made them (``client``, a label; ``client=None`` reads all).
An Anthropic batch has no files: its results are read from its rows (``rows``).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from webui.store.api_files import FileStore, StoredFile
from webui.store.db import Database

STATUSES = ("validating", "failed", "in_progress", "finalizing", "completed", "expired", "cancelling", "cancelled")
OPEN = ("in_progress", "finalizing", "cancelling")  # statuses the runner still has work for
CANCELLABLE = ("validating", "in_progress")
ENDED = ("failed", "completed", "expired", "cancelled")
APIS = ("openai", "anthropic")


@dataclass(frozen=True)
class RowInput:
    """One request of a batch's input file: its line there (1-based), custom_id, url and body (JSON text)."""

    line: int
    custom_id: str
    url: str
    body: str


@dataclass(frozen=True)
class BatchRow(RowInput):
    status_code: int | None = None  # None: not run yet
    result: dict[str, Any] | None = None  # its line of the output or error file


@dataclass(frozen=True)
class RowUsage:
    """The tokens a row's answer used, added to its batch's totals."""

    input_tokens: int = 0
    cached_tokens: int = 0
    output_tokens: int = 0


@dataclass
class APIBatch:
    seq: int
    id: str
    client: str
    endpoint: str
    input_file_id: str
    completion_window: str
    status: str
    created_at: int
    expires_at: int
    model: str | None = None
    metadata: dict[str, str] | None = None
    output_expires_after: int | None = None
    errors: list[dict[str, Any]] | None = None
    output_file_id: str | None = None
    error_file_id: str | None = None
    total: int = 0
    completed: int = 0
    failed: int = 0
    usage: RowUsage = RowUsage()
    times: dict[str, int] = field(default_factory=dict)  # status -> when the batch reached it
    api: str = "openai"  # the API it was made through (APIS)


def new_batch_id(api: str = "openai") -> str:
    return f"msgbatch_{uuid.uuid4().hex[:24]}" if api == "anthropic" else f"batch_{uuid.uuid4().hex[:24]}"


class APIBatchStore:
    def __init__(self, db: Database, files: FileStore) -> None:
        self._db, self.files = db, files

    def create(self, *, client: str, endpoint: str, input_file_id: str, completion_window: str, window_s: int,
               rows: Sequence[RowInput], errors: Sequence[dict[str, Any]] = (), model: str | None = None,
               metadata: dict[str, str] | None = None, output_expires_after: int | None = None,
               api: str = "openai") -> APIBatch:
        """A new batch of ``rows``, in progress; or failed with ``errors`` (then no row is kept)."""
        if api not in APIS:
            raise ValueError(f"unknown batch API '{api}'")
        now = int(time.time())
        status = "failed" if errors else "in_progress"
        with self._db.transaction() as conn:
            cursor = conn.execute(
                """INSERT INTO api_batches (id, client, endpoint, input_file_id, completion_window, status, model,
                                            metadata, output_expires_after, errors, total, created_at, expires_at,
                                            times, api)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
                (new_batch_id(api), client, endpoint, input_file_id, completion_window, status, model,
                 None if metadata is None else json.dumps(metadata), output_expires_after,
                 json.dumps(list(errors)) if errors else None, 0 if errors else len(rows), now, now + window_s,
                 json.dumps({status: now}), api))
            seq = cursor.lastrowid
            if not errors:
                conn.executemany("INSERT INTO api_batch_rows (batch_seq, line, custom_id, url, body) "
                                 "VALUES (?, ?, ?, ?, ?)", [(seq, r.line, r.custom_id, r.url, r.body) for r in rows])
        batch = self._by_seq(int(seq or 0))
        assert batch is not None, "just inserted"
        return batch

    # -- reading -----------------------------------------------------------------------------------------------
    def get(self, batch_id: str, client: str | None = None, api: str | None = None) -> APIBatch | None:
        """The batch ``batch_id``, if ``client``'s (None: anyone's) and made through ``api`` (None: either)."""
        where, args = _whose(client, api)
        row = self._db.query_one(f"SELECT * FROM api_batches WHERE id = ? AND {where}", [batch_id, *args])
        return None if row is None else _batch(row)

    def _by_seq(self, seq: int) -> APIBatch | None:
        row = self._db.query_one("SELECT * FROM api_batches WHERE seq = ?", (seq,))
        return None if row is None else _batch(row)

    def page(self, *, client: str | None = None, api: str | None = None, after: str | None = None,
             before: str | None = None, limit: int = 20) -> tuple[list[APIBatch], bool]:
        """Up to ``limit`` of ``client``'s batches made through ``api`` (None: all), newest first: the ones right
        after (older than) the batch with id ``after``, or with only ``before``, the ones right before (newer than)
        it; and whether there are more beyond the page that way. An id that names no batch limits nothing."""
        where, args = _whose(client, api)
        for cursor, op in ((after, "<"), (before, ">")):
            if cursor is not None and (row := self._db.query_one("SELECT seq FROM api_batches WHERE id = ?",
                                                                 (cursor,))):
                where, args = f"{where} AND seq {op} ?", [*args, row["seq"]]
        order = "ASC" if before is not None and after is None else "DESC"  # the nearest to ``before`` first
        rows = self._db.query(f"SELECT * FROM api_batches WHERE {where} ORDER BY seq {order} LIMIT ?",
                              (*args, limit + 1))
        batches = [_batch(r) for r in rows[:limit]]
        return sorted(batches, key=lambda b: -b.seq), len(rows) > limit

    def next_open(self) -> APIBatch | None:
        """The batch the runner works on next: one being cancelled (quick to end), else the oldest still open."""
        row = self._db.query_one(
            f"SELECT * FROM api_batches WHERE status IN ({', '.join('?' * len(OPEN))}) "
            "ORDER BY status != 'cancelling', seq LIMIT 1", OPEN)
        return None if row is None else _batch(row)

    def status(self, seq: int) -> str | None:
        row = self._db.query_one("SELECT status FROM api_batches WHERE seq = ?", (seq,))
        return None if row is None else row["status"]

    def pending(self, seq: int, after_line: int = 0, limit: int = 64) -> list[BatchRow]:
        """Rows not run yet, in input order, after line ``after_line``."""
        rows = self._db.query("SELECT * FROM api_batch_rows WHERE batch_seq = ? AND status_code IS NULL AND line > ? "
                              "ORDER BY line LIMIT ?", (seq, after_line, limit))
        return [_row(r) for r in rows]

    def rows(self, seq: int, chunk: int = 500) -> Iterator[BatchRow]:
        """Every row, in input order (read a chunk at a time)."""
        after = 0
        while True:
            rows = self._db.query("SELECT * FROM api_batch_rows WHERE batch_seq = ? AND line > ? ORDER BY line "
                                  "LIMIT ?", (seq, after, chunk))
            if not rows:
                return
            for r in rows:
                yield _row(r)
            after = rows[-1]["line"]

    # -- progress ----------------------------------------------------------------------------------------------
    def finish_row(self, seq: int, line: int, status_code: int, result: dict[str, Any], usage: RowUsage) -> bool:
        """Keep a row's result and count it (completed below 400, else failed); False if it had one already."""
        with self._db.transaction() as conn:
            done = conn.execute("UPDATE api_batch_rows SET status_code = ?, result = ? WHERE batch_seq = ? AND "
                                "line = ? AND status_code IS NULL",
                                (status_code, json.dumps(result), seq, line)).rowcount
            if done:
                counter = "completed" if status_code < 400 else "failed"
                conn.execute(f"UPDATE api_batches SET {counter} = {counter} + 1, input_tokens = input_tokens + ?, "
                             "cached_tokens = cached_tokens + ?, output_tokens = output_tokens + ? WHERE seq = ?",
                             (usage.input_tokens, usage.cached_tokens, usage.output_tokens, seq))
        return bool(done)

    def set_status(self, seq: int, status: str, *, only_from: Sequence[str] = ()) -> bool:
        """Move the batch to ``status`` (noting when), if it is in one of ``only_from`` (empty: any)."""
        if status not in STATUSES:
            raise ValueError(f"unknown batch status '{status}'")
        where = f" AND status IN ({', '.join('?' * len(only_from))})" if only_from else ""
        with self._db.transaction() as conn:
            return conn.execute(f"UPDATE api_batches SET status = ?, times = json_set(times, '$.' || ?, ?) "
                                f"WHERE seq = ?{where}", (status, status, int(time.time()), seq, *only_from)
                                ).rowcount > 0

    def fail(self, seq: int, errors: Sequence[dict[str, Any]]) -> None:
        """The batch failed on the way (its rows done so far stay kept)."""
        with self._db.transaction() as conn:
            conn.execute("UPDATE api_batches SET errors = ? WHERE seq = ?", (json.dumps(list(errors)), seq))
            self.set_status(seq, "failed")

    def delete(self, seq: int) -> bool:
        """Delete an ended batch with its rows; False (nothing deleted) if it is not ended."""
        with self._db.transaction() as conn:
            gone = conn.execute(f"DELETE FROM api_batches WHERE seq = ? AND status IN ({', '.join('?' * len(ENDED))})",
                                (seq, *ENDED)).rowcount
            if gone:
                conn.execute("DELETE FROM api_batch_rows WHERE batch_seq = ?", (seq,))
        return bool(gone)

    def end(self, seq: int, status: str, output: StoredFile | None, error: StoredFile | None) -> None:
        """The batch ends in ``status`` with its output and error files (their bytes written), all at once."""
        with self._db.transaction() as conn:
            for file in (output, error):
                if file is not None:
                    self.files.insert(file)
            conn.execute("UPDATE api_batches SET output_file_id = ?, error_file_id = ? WHERE seq = ?",
                         (output and output.id, error and error.id, seq))
            self.set_status(seq, status)


def _whose(client: str | None, api: str | None) -> tuple[str, list[Any]]:
    """The WHERE clause (and its arguments) for the batches of ``client`` made through ``api`` (None: any)."""
    parts = [(name, value) for name, value in (("client", client), ("api", api)) if value is not None]
    return " AND ".join([f"{name} = ?" for name, _ in parts] or ["1"]), [value for _, value in parts]


def _batch(row: Any) -> APIBatch:
    return APIBatch(row["seq"], row["id"], row["client"], row["endpoint"], row["input_file_id"],
                    row["completion_window"], row["status"], row["created_at"], row["expires_at"], row["model"],
                    None if row["metadata"] is None else json.loads(row["metadata"]), row["output_expires_after"],
                    None if row["errors"] is None else json.loads(row["errors"]), row["output_file_id"],
                    row["error_file_id"], row["total"], row["completed"], row["failed"],
                    RowUsage(row["input_tokens"], row["cached_tokens"], row["output_tokens"]), json.loads(row["times"]),
                    row["api"])


def _row(row: Any) -> BatchRow:
    return BatchRow(row["line"], row["custom_id"], row["url"], row["body"], row["status_code"],
                    None if row["result"] is None else json.loads(row["result"]))
