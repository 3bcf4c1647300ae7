"""Perplexity results, kept so models, quantizations and adapters can be compared later."""

from __future__ import annotations

import builtins
import json
import sqlite3
import time
from dataclasses import dataclass
from typing import Sequence

from webui.owner import current as current_owner
from webui.store.db import Database, inserted_id


@dataclass(frozen=True)
class PerplexityRecord:
    id: int
    model: str
    loader: str
    loras: list
    dataset: str
    tokens: int
    nll: float
    ppl: float
    window: int
    created: float


class PerplexityStore:
    def __init__(self, db: Database) -> None:
        self._db = db

    def add(self, model: str, loader: str, loras: Sequence[tuple[str, float]], dataset: str, tokens: int, nll: float, ppl: float,
            window: int) -> PerplexityRecord:
        with self._db.transaction() as conn:
            cur = conn.execute("INSERT INTO perplexity (model, loader, loras, dataset, tokens, nll, ppl, window, "
                               "created, owner) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                               (model, loader, json.dumps([list(x) for x in loras]), dataset, tokens, nll, ppl,
                                window, time.time(), current_owner()))
            row_id = inserted_id(cur.lastrowid)
        return self._get(row_id)

    def _get(self, row_id: int) -> PerplexityRecord:
        row = self._db.query_one("SELECT * FROM perplexity WHERE id = ?", (row_id,))
        assert row is not None, "the row was just inserted"
        return _record(row)

    def list(self) -> builtins.list[PerplexityRecord]:
        return [_record(r) for r in self._db.query("SELECT * FROM perplexity WHERE owner = ? "
                                                   "ORDER BY created DESC, id DESC", (current_owner(),))]


def _record(row: sqlite3.Row) -> PerplexityRecord:
    return PerplexityRecord(row["id"], row["model"], row["loader"], json.loads(row["loras"]), row["dataset"],
                            row["tokens"], row["nll"], row["ppl"], row["window"], row["created"])
