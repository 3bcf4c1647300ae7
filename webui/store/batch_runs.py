"""Batch runs in SQLite: the run's full spec (to re-run it) and every finished result row.

Each result is written in its own transaction as soon as it finishes, so a
crash mid-run keeps every finished row.

The spec is a ``StoredRun``: written by ``StoredRun.to_json`` and read back only by ``StoredRun.from_json``, which
also reads the specs stored before specs had a version (version 0: the same keys, any of the later ones missing).
"""

from __future__ import annotations

import builtins
import functools
import json
import sqlite3
import time
from dataclasses import dataclass, field
from typing import Any, Mapping

from webui.owner import current as current_owner
from webui.store.chats import check_title
from webui.store.db import Database, inserted_id
from webui.store.errors import StoreError

STATUSES = ("running", "done", "cancelled", "failed")


class RunNotFound(StoreError):
    pass


SPEC_VERSION = 1
"""The version ``StoredRun.to_json`` writes (0: specs stored before they had one; the same keys)."""


@dataclass(frozen=True)
class RanOn:
    """The model one setting of a run ran on."""

    model: str  # its id (model_id)
    loader: str | None  # None: a run stored before runs kept their loader
    load_options: dict[str, Any] | None = None  # None: not stored

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "loader": self.loader, "load_options": self.load_options}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "RanOn":
        options = data.get("load_options")
        return cls(str(data["model"]), data.get("loader"), dict(options) if isinstance(options, Mapping) else None)

    def describe(self) -> str:
        """``NAME@llamacpp (loader llamacpp, n_ctx=4096)``: what a message names."""
        options = ", ".join(f"{k}={v}" for k, v in sorted((self.load_options or {}).items()))
        return f"{self.model} (loader {self.loader or 'not stored'}{', ' + options if options else ''})"


@dataclass(frozen=True)
class StoredSetting:
    """One fully expanded setting of a stored run (its parts that have types of their own kept as their JSON:
    ``params`` as SamplingParams.to_dict, ``prompt`` as ProviderPrompt.to_dict)."""

    label: str
    params: dict[str, Any]
    preset: str | None = None
    overrides: dict[str, Any] = field(default_factory=dict)
    loras: tuple[tuple[str, float], ...] = ()
    model: str | None = None  # the grid's model axis value (None: the model in use)
    provider: str | None = None  # a promptfoo suite's provider id
    raw: bool = False
    prompt: dict[str, Any] | None = None
    ran_on: RanOn | None = None  # None: stored before runs kept it, or not run yet

    def to_json(self) -> dict[str, Any]:
        return {"label": self.label, "params": self.params, "preset": self.preset, "overrides": self.overrides,
                "loras": [list(x) for x in self.loras], "model": self.model,
                **({"provider": self.provider} if self.provider is not None else {}),
                **({"raw": True} if self.raw else {}),
                **({"prompt": self.prompt} if self.prompt is not None else {}),
                **({"ran_on": self.ran_on.to_dict()} if self.ran_on is not None else {})}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "StoredSetting":
        return cls(str(data["label"]), dict(data["params"]), data.get("preset"), dict(data.get("overrides") or {}),
                   tuple((str(n), float(w)) for n, w in data.get("loras") or []), data.get("model"),
                   data.get("provider"), bool(data.get("raw", False)),
                   dict(data["prompt"]) if data.get("prompt") is not None else None,
                   RanOn.from_dict(data["ran_on"]) if data.get("ran_on") else None)


@dataclass(frozen=True)
class StoredRun:
    """What a batch run stores to be opened, re-run and reproduced: the job (prompts, grid, expanded settings,
    options) and what it ran on (each model's loader, load options and instruction template). The prompts and
    the grid are kept as their own JSON (PromptRow.to_dict, GridSpec.to_dict)."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    grid: dict[str, Any] = field(default_factory=dict)
    settings: list[StoredSetting] = field(default_factory=list)
    system_prompt: str = ""
    raw: bool = False
    max_cells: int | None = None  # None: not stored (the default)
    chat_template_name: str = ""  # the instruction template's name ("": each model's own)
    use_cache: bool = True
    judge_prompt: str | None = None  # None: not stored (the default prompt)
    judge_model: str = ""
    remote_judge: dict[str, Any] | None = None  # RemoteJudge.to_dict
    derived_metrics: dict[str, str] = field(default_factory=dict)
    loader: str | None = None  # the first setting's model's loader (None: stored before runs kept it)
    loaders: dict[str, str] = field(default_factory=dict)  # by model name
    load_options: dict[str, dict[str, Any]] = field(default_factory=dict)  # by model name
    chat_template: dict[str, str] | None = None  # the first model's template record (None: its own)
    chat_templates: dict[str, dict[str, str] | None] = field(default_factory=dict)  # by model name
    version: int = SPEC_VERSION
    judge_tokens: int | None = None  # the most tokens the judge writes per grading step (None: each step's own)

    def setting(self, label: str) -> StoredSetting | None:
        return next((s for s in self.settings if s.label == label), None)

    def to_json(self) -> dict[str, Any]:
        return {"version": SPEC_VERSION, "rows": self.rows, "grid": self.grid,
                "settings": [s.to_json() for s in self.settings],
                "system_prompt": self.system_prompt, "raw": self.raw,
                **({"max_cells": self.max_cells} if self.max_cells is not None else {}),
                "chat_template_name": self.chat_template_name, "use_cache": self.use_cache,
                **({"judge_prompt": self.judge_prompt} if self.judge_prompt is not None else {}),
                "judge_model": self.judge_model, "remote_judge": self.remote_judge,
                **({"derived_metrics": dict(self.derived_metrics)} if self.derived_metrics else {}),
                **({"loader": self.loader} if self.loader is not None else {}),
                "loaders": self.loaders, "load_options": self.load_options,
                "chat_template": self.chat_template, "chat_templates": self.chat_templates,
                **({"judge_tokens": self.judge_tokens} if self.judge_tokens else {})}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "StoredRun":
        """The one reader of a stored spec, of any version up to SPEC_VERSION; a StoreError for one it cannot
        read."""
        version = data.get("version", 0)
        if not isinstance(version, int) or version > SPEC_VERSION:
            raise StoreError(f"this batch run was stored by a newer version of the workbench (spec version "
                             f"{version}); update the workbench to open it")
        try:
            return cls([dict(r) for r in data.get("rows") or []], dict(data.get("grid") or {}),
                       [StoredSetting.from_json(s) for s in data.get("settings") or []],
                       str(data.get("system_prompt") or ""), bool(data.get("raw", False)), data.get("max_cells"),
                       str(data.get("chat_template_name") or ""), bool(data.get("use_cache", True)),
                       data.get("judge_prompt"), str(data.get("judge_model") or ""),
                       dict(data["remote_judge"]) if data.get("remote_judge") else None,
                       dict(data.get("derived_metrics") or {}), data.get("loader"), dict(data.get("loaders") or {}),
                       {k: dict(v or {}) for k, v in (data.get("load_options") or {}).items()},
                       data.get("chat_template"), dict(data.get("chat_templates") or {}), version,
                       _judge_tokens(data.get("judge_tokens")))
        except (KeyError, TypeError, ValueError) as exc:
            raise StoreError(f"this batch run's stored spec cannot be read ({type(exc).__name__}: {exc}); run its "
                             "prompts again from the form") from None


def _judge_tokens(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"judge_tokens must be a whole number of tokens, got {value!r}")
    return value


@dataclass(frozen=True)
class BatchRun:
    id: int
    """The run's key in the store (shared by all owners: never shown)."""
    name: str
    stored_spec: str
    """The spec as stored (JSON), read when ``spec`` is first asked for: a run whose spec cannot be read still
    lists, and says why when it is opened."""
    model: str | None
    status: str
    total: int
    done: int
    created: float
    updated: float
    number: int = 0
    """What the user sees: #1 is their first run (numbered per owner)."""

    @functools.cached_property
    def spec(self) -> StoredRun:
        try:
            data = json.loads(self.stored_spec)
        except ValueError as exc:
            raise StoreError(f"this batch run's stored spec is not JSON ({exc}); run its prompts again from the "
                             "form") from None
        if not isinstance(data, dict):
            raise StoreError("this batch run's stored spec is not an object; run its prompts again from the form")
        return StoredRun.from_json(data)


class BatchStore:
    def __init__(self, db: Database) -> None:
        self._db = db

    def create(self, name: str, spec: StoredRun, model: str | None, total: int) -> BatchRun:
        name = check_title(name)
        now = time.time()
        with self._db.transaction() as conn:
            owner = current_owner()
            number = conn.execute("SELECT coalesce(max(number), 0) + 1 FROM batch_runs WHERE owner = ?",
                                  (owner,)).fetchone()[0]
            cur = conn.execute("INSERT INTO batch_runs (name, spec, model, status, total, created, updated, owner, "
                               "number) VALUES (?, ?, ?, 'running', ?, ?, ?, ?, ?)",
                               (name, json.dumps(spec.to_json()), model, total, now, now, owner, number))
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
    return BatchRun(row["id"], row["name"], row["spec"], row["model"], row["status"],
                    row["total"], row["done"], row["created"], row["updated"], row["number"])
