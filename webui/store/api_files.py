"""Files of OpenAI's Files API (/v1/files, #45): the uploads a batch reads and the output and error files it writes.

    files = FileStore(db, config.api_files_dir)
    f = files.add("key 1", "rows.jsonl", "batch", upload)     # bytes written whole, then the row
    page = files.page(client="key 1", purpose="batch", limit=20)

The metadata is a row in SQLite (``api_files``); the bytes are a file in the folder, named by the id. Files, not
BLOBs: a 200 MB upload is streamed to disk and back without being held in memory or written twice through the
WAL, and deleting one gives its space back at once. Bytes are written to a temp file, fsynced and renamed before
the row is inserted, so a file is listed only once it is whole; bytes without a row (a crash between the two) and
temp files are removed by ``sweep``, as are files past their ``expires_at`` (never served once past it).

``client`` is the label of the API key that owns a file ("" without keys); ``client=None`` reads every key's.
"""

from __future__ import annotations

import os
import re
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Literal

from webui.fsutil import atomic_write_stream
from webui.store.db import Database

Order = Literal["asc", "desc"]
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,100}$")  # an id that is also a safe file name
ORPHAN_AGE_S = 600  # bytes without a row are removed once this old (a write in another process may be under way)


@dataclass(frozen=True)
class StoredFile:
    id: str
    client: str
    filename: str
    purpose: str
    bytes: int
    created_at: int
    expires_at: int | None = None


def new_file_id() -> str:
    return f"file-{uuid.uuid4().hex[:24]}"


class FileStore:
    def __init__(self, db: Database, folder: Path) -> None:
        self._db, self.folder = db, Path(folder)

    def path(self, file_id: str) -> Path:
        if not _NAME.match(file_id):
            raise ValueError(f"'{file_id}' is not a file id this store makes")
        return self.folder / file_id

    # -- writing -----------------------------------------------------------------------------------------------
    def write(self, source: BinaryIO | Iterable[bytes]) -> tuple[str, int]:
        """The bytes of a new file, whole (not listed until ``insert``): its new id and size."""
        file_id = new_file_id()
        size = atomic_write_stream(self.path(file_id), source)
        return file_id, size

    def insert(self, file: StoredFile) -> None:
        """The row of a file whose bytes ``write`` wrote (inside the caller's transaction, if it has one)."""
        with self._db.transaction() as conn:
            conn.execute("""INSERT INTO api_files (id, client, filename, purpose, bytes, created_at, expires_at)
                            VALUES (?, ?, ?, ?, ?, ?, ?)""",
                         (file.id, file.client, file.filename, file.purpose, file.bytes, file.created_at,
                          file.expires_at))

    def add(self, client: str, filename: str, purpose: str, source: BinaryIO | Iterable[bytes],
            expires_after: int | None = None) -> StoredFile:
        """Keep a new file: its bytes, then its row; a failure on the way leaves neither."""
        file_id, size = self.write(source)
        created = int(time.time())
        file = StoredFile(file_id, client, filename, purpose, size, created,
                          None if expires_after is None else created + expires_after)
        try:
            self.insert(file)
        except BaseException:
            self.path(file_id).unlink(missing_ok=True)
            raise
        return file

    # -- reading -----------------------------------------------------------------------------------------------
    def get(self, file_id: str, client: str | None = None) -> StoredFile | None:
        """The file ``file_id`` if ``client`` (None: any) owns it and it has not expired."""
        where, args = _live(client)
        row = self._db.query_one(f"SELECT * FROM api_files WHERE id = ? AND {where}", (file_id, *args))
        return None if row is None else _file(row)

    def open(self, file: StoredFile) -> BinaryIO:
        """Its bytes to read (an open file still reads whole if the file is deleted meanwhile)."""
        return open(self.path(file.id), "rb")

    def page(self, *, client: str | None = None, purpose: str | None = None, after: str | None = None,
             limit: int = 10000, order: Order = "desc") -> tuple[list[StoredFile], bool]:
        """Up to ``limit`` files in the order made (``desc``: newest first) after the one with id ``after``, and
        whether there are more."""
        where, args = _live(client)
        if purpose is not None:
            where, args = where + " AND purpose = ?", [*args, purpose]
        if after is not None and (row := self._db.query_one("SELECT seq FROM api_files WHERE id = ?", (after,))):
            where, args = where + f" AND seq {'>' if order == 'asc' else '<'} ?", [*args, row["seq"]]
        rows = self._db.query(f"SELECT * FROM api_files WHERE {where} ORDER BY seq {order.upper()} LIMIT ?",
                              (*args, limit + 1))
        return [_file(r) for r in rows[:limit]], len(rows) > limit

    # -- removing ----------------------------------------------------------------------------------------------
    def delete(self, file_id: str) -> bool:
        with self._db.transaction() as conn:
            gone = conn.execute("DELETE FROM api_files WHERE id = ?", (file_id,)).rowcount > 0
        if gone:
            self.path(file_id).unlink(missing_ok=True)
        return gone

    def sweep(self) -> int:
        """Remove expired files, bytes that have no row and temp files left by a crash; how many went."""
        now = int(time.time())
        expired = [r["id"] for r in self._db.query("SELECT id FROM api_files WHERE expires_at <= ?", (now,))]
        for file_id in expired:
            self.delete(file_id)
        if not self.folder.is_dir():
            return len(expired)
        known = {r["id"] for r in self._db.query("SELECT id FROM api_files")}
        removed = 0
        for entry in os.scandir(self.folder):
            try:
                old = now - entry.stat(follow_symlinks=False).st_mtime > ORPHAN_AGE_S
            except FileNotFoundError:
                continue
            if entry.name not in known and old and not entry.is_dir(follow_symlinks=False):
                Path(entry.path).unlink(missing_ok=True)
                removed += 1
        return len(expired) + removed


def _live(client: str | None) -> tuple[str, list[Any]]:
    where, args = "(expires_at IS NULL OR expires_at > ?)", list[Any]([int(time.time())])
    if client is not None:
        where, args = where + " AND client = ?", [*args, client]
    return where, args


def _file(row: Any) -> StoredFile:
    return StoredFile(row["id"], row["client"], row["filename"], row["purpose"], row["bytes"], row["created_at"],
                      row["expires_at"])
