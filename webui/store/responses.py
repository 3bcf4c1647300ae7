"""Stored responses of OpenAI's Responses API (webui/api/responses.py): each response with the input items it was
given, for retrieving it, continuing it (``previous_response_id``), listing its input items and finding an item
by its id (``item_reference``).

    responses = ResponseStore(db)
    responses.add(StoredResponse(...))
    responses.get("resp_...", client="key 1")     # None: unknown, or another key's

``client`` is the label of the API key that made a response ("" without keys); a key sees only its own responses,
an admin key every client's (``client=None``).
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field
from typing import Any

from webui.store.db import Database


@dataclass
class StoredResponse:
    id: str
    client: str
    created: float
    response: dict[str, Any]  # the response object as last answered
    input: list[dict[str, Any]] = field(default_factory=list)  # the request's input items, each with its id
    background: bool = False

    @property
    def status(self) -> str:
        return str(self.response.get("status") or "completed")

    @property
    def previous(self) -> str | None:
        return self.response.get("previous_response_id")

    @classmethod
    def from_row(cls, row: sqlite3.Row) -> "StoredResponse":
        return cls(row["id"], row["client"], row["created"], json.loads(row["response"]), json.loads(row["input"]),
                   bool(row["background"]))


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


class ResponseStore:
    def __init__(self, db: Database) -> None:
        self._db = db

    def add(self, item: StoredResponse) -> None:
        """Keep ``item`` (the same id again replaces it)."""
        with self._db.transaction() as conn:
            conn.execute("""INSERT OR REPLACE INTO responses (id, client, created, status, background, previous,
                                                              response, input)
                            VALUES (?, ?, ?, ?, ?, ?, ?, ?)""",
                         (item.id, item.client, item.created, item.status, int(item.background), item.previous,
                          _dumps(item.response), _dumps(item.input)))

    def update(self, id: str, response: dict[str, Any]) -> bool:
        """The response object of ``id`` as it is now (a background response as it ends); False if it is gone."""
        with self._db.transaction() as conn:
            return conn.execute("UPDATE responses SET status = ?, response = ? WHERE id = ?",
                                (str(response.get("status")), _dumps(response), id)).rowcount > 0

    def mark_interrupted(self) -> int:
        """Responses a previous process left queued or generating died with it: failed now, saying so (a client
        polling a background one gets an answer, and can send it again). Returns how many."""
        with self._db.transaction() as conn:
            rows = conn.execute("SELECT id, response FROM responses WHERE status IN ('queued', 'in_progress')"
                                ).fetchall()
            for row in rows:
                response = {**json.loads(row["response"]), "status": "failed", "error": {
                    "code": "server_error", "message": "the server stopped while this response was being generated; "
                                                      "send the request again"}}
                conn.execute("UPDATE responses SET status = 'failed', response = ? WHERE id = ?",
                             (_dumps(response), row["id"]))
        return len(rows)

    def get(self, id: str, client: str | None = None) -> StoredResponse | None:
        """The response ``id`` if ``client`` (None: any) made it."""
        where, args = self._where(client)
        row = self._db.query_one(f"SELECT * FROM responses WHERE id = ? AND {where}", (id, *args))
        return None if row is None else StoredResponse.from_row(row)

    def delete(self, id: str) -> bool:
        with self._db.transaction() as conn:
            return conn.execute("DELETE FROM responses WHERE id = ?", (id,)).rowcount > 0

    def item(self, item_id: str, client: str | None = None) -> dict[str, Any] | None:
        """The input or output item with the id ``item_id`` of a response ``client`` (None: any) made."""
        where, args = self._where(client)
        row = self._db.query_one(
            f"""SELECT value FROM responses, json_each(responses.input)
                WHERE {where} AND json_extract(value, '$.id') = ?
                UNION ALL
                SELECT value FROM responses, json_each(responses.response, '$.output')
                WHERE {where} AND json_extract(value, '$.id') = ? LIMIT 1""", (*args, item_id, *args, item_id))
        return None if row is None else json.loads(row["value"])

    @staticmethod
    def _where(client: str | None) -> tuple[str, list[Any]]:
        return ("1", []) if client is None else ("client = ?", [client])
