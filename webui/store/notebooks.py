"""Notebooks: named raw-text documents (the notebook tab's saved prompts)."""

from __future__ import annotations

import builtins
import time

from webui.names import check_name
from webui.owner import current as current_owner
from webui.store.db import Database
from webui.store.errors import NotebookExists, NotebookNotFound, StoreError


class NotebookStore:
    """Notebooks on a Database, keyed by a plain name (see webui.names.check_name).

    Invalid names raise webui.names.InvalidName (a ValueError).
    """

    def __init__(self, db: Database) -> None:
        self._db = db

    def save(self, name: str, text: str) -> str:
        """Create or replace the notebook; return its name as stored (stripped)."""
        name = check_name("notebook", name)
        if not isinstance(text, str):
            raise StoreError(f"notebook text must be a string, got {type(text).__name__}")
        now = time.time()
        with self._db.transaction() as conn:
            conn.execute(
                """INSERT INTO notebooks (owner, name, text, created, updated) VALUES (?, ?, ?, ?, ?)
                   ON CONFLICT (owner, name) DO UPDATE SET text = excluded.text,
                                                           updated = excluded.updated""",
                (current_owner(), name, text, now, now))
        return name

    def get(self, name: str) -> str:
        """The notebook's text, or NotebookNotFound."""
        name = check_name("notebook", name)
        row = self._db.query_one("SELECT text FROM notebooks WHERE owner = ? AND name = ?", (current_owner(), name))
        if row is None:
            raise _not_found(name)
        return row["text"]

    def list(self) -> builtins.list[str]:
        """Notebook names, most recently saved first."""
        rows = self._db.query("SELECT name FROM notebooks WHERE owner = ? ORDER BY updated DESC, name",
                              (current_owner(),))
        return [row["name"] for row in rows]

    def delete(self, name: str) -> None:
        """Delete the notebook, or raise NotebookNotFound."""
        name = check_name("notebook", name)
        with self._db.transaction() as conn:
            if conn.execute("DELETE FROM notebooks WHERE owner = ? AND name = ?",
                            (current_owner(), name)).rowcount == 0:
                raise _not_found(name)

    def rename(self, old: str, new: str) -> str:
        """Rename a notebook; NotebookExists if ``new`` is taken. Return the new name."""
        old = check_name("notebook", old)
        new = check_name("notebook", new)
        owner = current_owner()
        with self._db.transaction() as conn:
            if conn.execute("SELECT 1 FROM notebooks WHERE owner = ? AND name = ?", (owner, old)).fetchone() is None:
                raise _not_found(old)
            if new == old:
                return new
            if conn.execute("SELECT 1 FROM notebooks WHERE owner = ? AND name = ?", (owner, new)).fetchone():
                raise NotebookExists(f"a notebook named {new!r} already exists; "
                                     "choose another name or delete that one first")
            conn.execute("UPDATE notebooks SET name = ?, updated = ? WHERE owner = ? AND name = ?",
                         (new, time.time(), owner, old))
        return new


def _not_found(name: str) -> NotebookNotFound:
    return NotebookNotFound(f"notebook {name!r} does not exist (it may have been deleted "
                            "or renamed)")
