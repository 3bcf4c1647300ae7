"""One SQLite connection per database file: WAL, foreign keys, serialised access, migrations."""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from webui.store.errors import NotADatabase, SchemaTooNew, StoreError
from webui.store.schema import MIGRATIONS

log = logging.getLogger(__name__)

# The first 16 bytes of every SQLite 3 database file.
SQLITE_HEADER = b"SQLite format 3\x00"
# Seconds a writer waits for another process that holds the write lock.
BUSY_TIMEOUT_S = 30.0


class Database:
    """A SQLite database file, opened and migrated to the schema this code knows.

    All use of the connection goes through one lock, so Gradio's worker threads
    may share a Database. Writes go through ``transaction()``; reads through
    ``query()`` / ``query_one()``.
    """

    def __init__(self, path: Path, migrations: Sequence[str] = MIGRATIONS) -> None:
        self.path = Path(path)
        # Re-entrant so a store method may read inside its own transaction.
        self._lock = threading.RLock()
        self._savepoints = 0
        self._conn: sqlite3.Connection | None = self._connect()
        try:
            self._configure(len(migrations))
            self._migrate(migrations)
        except BaseException:
            self.close()
            raise

    def _connect(self) -> sqlite3.Connection:
        if self.path.is_dir():
            raise StoreError(f"cannot open database {self.path}: it is a folder")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._refuse_foreign_file()
        try:
            # isolation_level=None: the sqlite3 module issues no implicit BEGIN/COMMIT;
            # transaction() does it explicitly.
            conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None,
                                   check_same_thread=False)
        except sqlite3.Error as e:
            raise StoreError(f"cannot open database {self.path}: {e}") from e
        conn.row_factory = sqlite3.Row
        conn.create_function("casefold", 1, _casefold, deterministic=True)
        return conn

    def _refuse_foreign_file(self) -> None:
        # SQLite itself would treat a file shorter than its header as an empty
        # database and overwrite it; check the header first.
        try:
            with open(self.path, "rb") as f:
                head = f.read(len(SQLITE_HEADER))
        except FileNotFoundError:
            return
        except OSError as e:
            raise StoreError(f"cannot open database {self.path}: {e}") from e
        if head and head != SQLITE_HEADER:
            raise self._not_a_database()

    def _not_a_database(self) -> NotADatabase:
        return NotADatabase(f"{self.path} is not a SQLite database; it was left as it is. "
                            "Move it away or point the workbench at another data folder.")

    def _configure(self, known_version: int) -> None:
        conn = self._connection()
        try:
            # The first read of the header: fails on a file that is not SQLite,
            # before anything is written to it.
            version = _user_version(conn)
        except sqlite3.DatabaseError as e:
            if "not a database" in str(e):
                raise self._not_a_database() from e
            raise StoreError(f"cannot read database {self.path}: {e}") from e
        _check_not_newer(self.path, version, known_version)
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if mode.lower() != "wal":
            log.warning("database %s runs in %s journal mode, not WAL (the file system may not "
                        "support it); writes stay crash-safe but readers wait for writers",
                        self.path, mode)
        conn.execute("PRAGMA foreign_keys = ON")
        # NORMAL, not FULL: in WAL mode a commit is written to the WAL file before
        # COMMIT returns, so it survives the death of this process (kill -9, a
        # crash); only a power cut or OS crash can drop the last few commits.
        # FULL would fsync on every commit, and a streaming reply commits many
        # times a second.
        conn.execute("PRAGMA synchronous = NORMAL")

    def _migrate(self, migrations: Sequence[str]) -> None:
        # One transaction per script; the version is re-read under the write lock
        # so two processes opening the same file never apply a script twice.
        while True:
            with self.transaction() as conn:
                version = _user_version(conn)
                _check_not_newer(self.path, version, len(migrations))
                if version == len(migrations):
                    return
                try:
                    for statement in _statements(migrations[version]):
                        conn.execute(statement)
                except sqlite3.Error as e:
                    raise StoreError(f"schema migration {version + 1} of {self.path} failed "
                                     f"(nothing was changed): {e}") from e
                conn.execute(f"PRAGMA user_version = {version + 1}")

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StoreError(f"database {self.path} is closed")
        return self._conn

    @property
    def user_version(self) -> int:
        """The schema version stored in the file."""
        with self._lock:
            return _user_version(self._connection())

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """BEGIN IMMEDIATE ... COMMIT, or ROLLBACK if the block raises.

        Nested use in the same thread becomes a SAVEPOINT, so an inner block that
        fails rolls back only its own work (and the outer one decides the rest).
        """
        with self._lock:
            conn = self._connection()
            if conn.in_transaction:
                yield from self._savepoint(conn)
                return
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException:
                # Some errors (disk full, I/O) make SQLite roll back by itself.
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise

    def _savepoint(self, conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
        self._savepoints += 1
        name = f"nested_{self._savepoints}"
        conn.execute(f"SAVEPOINT {name}")
        try:
            yield conn
        except BaseException:
            if conn.in_transaction:
                conn.execute(f"ROLLBACK TO {name}")
                conn.execute(f"RELEASE {name}")
            raise
        else:
            conn.execute(f"RELEASE {name}")
        finally:
            self._savepoints -= 1

    def query(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> list[sqlite3.Row]:
        """Run a read and return all rows."""
        with self._lock:
            return self._connection().execute(sql, params).fetchall()

    def query_one(self, sql: str, params: Sequence[Any] = ()) -> sqlite3.Row | None:
        """Run a read and return the first row, or None."""
        with self._lock:
            return self._connection().execute(sql, params).fetchone()

    def close(self) -> None:
        """Close the connection; further use raises StoreError. Safe to call twice."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _user_version(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def _check_not_newer(path: Path, version: int, known: int) -> None:
    if version > known:
        raise SchemaTooNew(
            f"the database {path} was written by a newer version of the workbench "
            f"(schema version {version}; this version knows up to {known}); "
            "back it up and upgrade the workbench to open it")


def _statements(script: str) -> Iterator[str]:
    """Split a script into statements (sqlite3.Connection.executescript would COMMIT first)."""
    pending = ""
    for piece in script.split(";"):
        pending += piece + ";"
        if sqlite3.complete_statement(pending):
            if pending.strip(" \t\r\n;"):
                yield pending
            pending = ""
    if pending.strip(" \t\r\n;"):
        yield pending


def inserted_id(row_id: int | None) -> int:
    """An INSERT's ``cursor.lastrowid`` (None only after a statement that inserted no row)."""
    if row_id is None:
        raise StoreError("the row was not inserted")
    return row_id


def _casefold(value: str | bytes | int | float | None) -> str | bytes | int | float | None:
    """SQL casefold(): Unicode-aware lower-casing for case-insensitive search."""
    return value.casefold() if isinstance(value, str) else value
