"""API requests kept in the store (#33): each as sent and as answered, for debugging the apps that call the API and
for OpenAI's stored chat completions.

    requests = RequestStore(db, Retention(max_requests=1000, max_bytes=200 * 2**20))
    requests.add(CapturedRequest(...))       # the oldest go once the budget is passed
    page = requests.page(client="key 1", stored=True, limit=20)

``client`` is the label of the API key that sent a request ("" without keys); a key sees only its own requests,
an admin key every client's (``client=None``).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from webui.store.db import Database

Order = Literal["asc", "desc"]


@dataclass(frozen=True)
class Retention:
    """How much is kept: at most ``max_requests`` requests and ``max_bytes`` of them; the oldest go first."""

    max_requests: int = 1000
    max_bytes: int = 200 * 2**20


@dataclass
class CapturedRequest:
    id: str
    created: float
    endpoint: str
    status: int
    client: str
    request: Any  # the body as sent: parsed JSON, or the text when it was not JSON
    response: Any = None  # the completion (a stream's put together) or the error body
    model: str | None = None
    stored: bool = False
    metadata: dict[str, str] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_row(cls, row: sqlite3.Row) -> "CapturedRequest":
        return cls(row["id"], row["created"], row["endpoint"], row["status"], row["client"],
                   _loads(row["request"]), _loads(row["response"]), row["model"], bool(row["stored"]),
                   json.loads(row["metadata"]), json.loads(row["details"]))


@dataclass
class Page:
    items: list[CapturedRequest]
    has_more: bool


def _dumps(value: Any) -> str:
    """JSON; text too (a body kept as its text reads back as that text, never as the JSON it may hold)."""
    text = json.dumps(value, ensure_ascii=False, default=str)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate an app sent ("\ud800"): kept as the escape it came as
        return json.dumps(value, default=str)
    return text


def _loads(text: str | None) -> Any:
    """The value written by ``_dumps``; a row written before text was encoded as JSON: its text."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except (ValueError, RecursionError):  # (such a row's text may be JSON nested too deep to read)
        return text


class RequestStore:
    def __init__(self, db: Database, retention: Retention = Retention(), capture_all: bool = False) -> None:
        self._db, self.retention = db, retention
        self.capture_all = capture_all
        """Keep every API request (--capture-requests, or the UI's switch); off: only those that ask store: true."""

    def add(self, item: CapturedRequest) -> None:
        """Keep ``item`` (an id seen before is replaced), then drop the oldest past the retention budget."""
        request, response, details = _dumps(item.request), _dumps(item.response), _dumps(item.details)
        size = len(request.encode()) + len(response.encode()) + len(details.encode())
        with self._db.transaction() as conn:
            conn.execute(
                """INSERT OR REPLACE INTO api_requests (id, created, endpoint, status, client, model, stored,
                                                       metadata, request, response, details, bytes)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
                (item.id, item.created, item.endpoint, item.status, item.client, item.model, int(item.stored),
                 _dumps(item.metadata), request, None if item.response is None else response, details, size))
            self._trim(conn)

    def _trim(self, conn: sqlite3.Connection) -> None:
        count, total = conn.execute("SELECT count(*), coalesce(sum(bytes), 0) FROM api_requests").fetchone()
        if count <= self.retention.max_requests and total <= self.retention.max_bytes:
            return
        over_count = max(0, count - self.retention.max_requests)
        over_bytes = total - self.retention.max_bytes
        dropped, freed = 0, 0
        for seq, size in conn.execute("SELECT seq, bytes FROM api_requests ORDER BY seq"):
            if dropped >= over_count and freed >= over_bytes:
                break
            dropped, freed, last = dropped + 1, freed + size, seq
        conn.execute("DELETE FROM api_requests WHERE seq <= ?", (last,))

    def get(self, id: str, client: str | None = None, stored: bool | None = None) -> CapturedRequest | None:
        """The request ``id`` if ``client`` (None: any) sent it (and it was stored, when ``stored``)."""
        where, args = self._where(client, stored)
        row = self._db.query_one(f"SELECT * FROM api_requests WHERE id = ? AND {where}", (id, *args))
        return None if row is None else CapturedRequest.from_row(row)

    def page(self, *, client: str | None = None, stored: bool | None = None, model: str | None = None,
             metadata: Mapping[str, str] | None = None, after: str | None = None, limit: int = 20,
             order: Order = "asc") -> Page:
        """Up to ``limit`` requests in the order taken (``desc``: newest first), after the one with id ``after``."""
        where, args = self._where(client, stored)
        if model is not None:
            where, args = where + " AND model = ?", [*args, model]
        for key, value in (metadata or {}).items():
            where += " AND EXISTS (SELECT 1 FROM json_each(metadata) AS m WHERE m.key = ? AND m.value = ?)"
            args = [*args, key, value]
        if after is not None:
            row = self._db.query_one("SELECT seq FROM api_requests WHERE id = ?", (after,))
            if row is not None:
                where, args = where + f" AND seq {'>' if order == 'asc' else '<'} ?", [*args, row["seq"]]
        rows = self._db.query(f"SELECT * FROM api_requests WHERE {where} ORDER BY seq {order.upper()} LIMIT ?",
                              (*args, limit + 1))
        return Page([CapturedRequest.from_row(r) for r in rows[:limit]], len(rows) > limit)

    def set_metadata(self, id: str, metadata: Mapping[str, str]) -> None:
        with self._db.transaction() as conn:
            conn.execute("UPDATE api_requests SET metadata = ? WHERE id = ?", (_dumps(dict(metadata)), id))

    def delete(self, id: str) -> bool:
        with self._db.transaction() as conn:
            return conn.execute("DELETE FROM api_requests WHERE id = ?", (id,)).rowcount > 0

    def count(self) -> tuple[int, int]:
        """(requests kept, their bytes)."""
        row = self._db.query_one("SELECT count(*) AS n, coalesce(sum(bytes), 0) AS b FROM api_requests")
        return (0, 0) if row is None else (row["n"], row["b"])

    @staticmethod
    def _where(client: str | None, stored: bool | None) -> tuple[str, list[Any]]:
        where, args = "1", list[Any]()
        if client is not None:
            where, args = where + " AND client = ?", [*args, client]
        if stored is not None:
            where, args = where + " AND stored = ?", [*args, int(stored)]
        return where, args
