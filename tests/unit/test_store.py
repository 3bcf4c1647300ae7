"""Tests for webui.store.db.Database: pragmas, migrations, refusals, transactions, crash safety."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from webui.store import ChatStore, Database, NotADatabase, SchemaTooNew, StoreError
from webui.store.schema import MIGRATIONS

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def db(tmp_path: Path):
    database = Database(tmp_path / "workbench.sqlite3")
    yield database
    database.close()


def count(db: Database, table: str) -> int:
    return db.query_one(f"SELECT COUNT(*) FROM {table}")[0]


def test_schema_and_pragmas(db: Database) -> None:
    rows = db.query("SELECT name FROM sqlite_master WHERE type = 'table'")
    tables = {row["name"] for row in rows}
    assert {"chats", "messages", "notebooks"} <= tables
    assert db.user_version == len(MIGRATIONS)
    assert db.query_one("PRAGMA journal_mode")[0] == "wal"
    assert db.query_one("PRAGMA foreign_keys")[0] == 1
    assert db.query_one("PRAGMA synchronous")[0] == 1  # NORMAL


def test_migrations_apply_in_order_once(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    first = ["CREATE TABLE a (x INTEGER); INSERT INTO a VALUES (1);"]
    with Database(path, migrations=first) as db:
        assert db.user_version == 1
    # Reopening with one more script applies only the new one (a's row is not doubled).
    second = first + ["INSERT INTO a VALUES (2); CREATE TABLE b (y TEXT);"]
    with Database(path, migrations=second) as db:
        assert db.user_version == 2
        assert [r[0] for r in db.query("SELECT x FROM a ORDER BY x")] == [1, 2]
    with Database(path, migrations=second) as db:
        assert db.user_version == 2
        assert count(db, "a") == 2


def test_failed_migration_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    good = "CREATE TABLE a (x INTEGER);"
    broken = "CREATE TABLE b (y INTEGER); INSERT INTO a VALUES (1); INSERT INTO nowhere VALUES (1);"
    with pytest.raises(StoreError, match=r"migration 2 .* failed .*nowhere"):
        Database(path, migrations=[good, broken])
    with Database(path, migrations=[good]) as db:
        assert db.user_version == 1
        assert count(db, "a") == 0
        assert db.query_one("SELECT 1 FROM sqlite_master WHERE name = 'b'") is None


def test_triggers_with_semicolons_survive_the_statement_split(tmp_path: Path) -> None:
    script = """
        CREATE TABLE a (x INTEGER); CREATE TABLE log (x INTEGER);
        CREATE TRIGGER a_log AFTER INSERT ON a BEGIN INSERT INTO log VALUES (new.x); END;
        INSERT INTO a VALUES (7)
    """
    with Database(tmp_path / "t.db", migrations=[script]) as db:
        assert db.query_one("SELECT x FROM log")[0] == 7


def test_newer_database_is_refused_clearly(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    raw = sqlite3.connect(path)
    raw.execute(f"PRAGMA user_version = {len(MIGRATIONS) + 5}")
    raw.close()
    with pytest.raises(SchemaTooNew) as info:
        Database(path)
    message = str(info.value)
    assert str(path) in message
    assert "newer version" in message and "back it up" in message and "upgrade" in message


@pytest.mark.parametrize("content", [b"hello, not a database\n" * 50, b"x"])
def test_non_sqlite_file_is_refused_and_left_untouched(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "notes.db"
    path.write_bytes(content)
    with pytest.raises(NotADatabase, match="not a SQLite database") as info:
        Database(path)
    assert str(path) in str(info.value)
    assert path.read_bytes() == content
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.db"]


def test_folder_is_refused(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="is a folder") as info:
        Database(tmp_path)
    assert str(tmp_path) in str(info.value)


def test_missing_parent_folders_are_created(tmp_path: Path) -> None:
    with Database(tmp_path / "a" / "b" / "w.db") as db:
        assert db.user_version == len(MIGRATIONS)


def test_closed_database_says_so(tmp_path: Path) -> None:
    db = Database(tmp_path / "w.db")
    db.close()
    db.close()
    with pytest.raises(StoreError, match="closed"):
        db.query("SELECT 1")


def test_transaction_that_raises_leaves_nothing(db: Database) -> None:
    with pytest.raises(RuntimeError):
        with db.transaction() as conn:
            conn.execute("INSERT INTO chats (title, created, updated) VALUES ('a', 0, 0)")
            conn.execute("INSERT INTO chats (title, created, updated) VALUES ('b', 0, 0)")
            raise RuntimeError("midway")
    assert count(db, "chats") == 0
    # The connection is usable afterwards.
    with db.transaction() as conn:
        conn.execute("INSERT INTO chats (title, created, updated) VALUES ('c', 0, 0)")
    assert count(db, "chats") == 1


def test_nested_transaction_rolls_back_only_its_part(db: Database) -> None:
    with db.transaction() as conn:
        conn.execute("INSERT INTO chats (title, created, updated) VALUES ('outer', 0, 0)")
        with pytest.raises(ValueError):
            with db.transaction() as inner:
                inner.execute("INSERT INTO chats (title, created, updated) VALUES ('inner', 0, 0)")
                raise ValueError
    assert [r["title"] for r in db.query("SELECT title FROM chats")] == ["outer"]


def test_foreign_keys_are_enforced(db: Database) -> None:
    with pytest.raises(sqlite3.IntegrityError):
        with db.transaction() as conn:
            conn.execute("INSERT INTO messages (chat_id, position, role, content, created) "
                         "VALUES (999, 0, 'user', 'x', 0)")


def test_concurrent_writes_from_8_threads_all_land(db: Database) -> None:
    chats = ChatStore(db)
    shared = chats.create("shared")
    per_thread = 40
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            own = chats.create(f"thread {n}")
            for i in range(per_thread):
                chats.append(shared.id, "user", f"{n}:{i}")
                chats.append(own.id, "assistant", f"{i}")
                chats.list("thread")  # reads interleave with writes
        except BaseException as e:  # noqa: BLE001 - re-raised in the main thread
            errors.append(e)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    messages = chats.messages(shared.id)
    assert [m.position for m in messages] == list(range(8 * per_thread))
    expected = {f"{n}:{i}" for n in range(8) for i in range(per_thread)}
    assert {m.content for m in messages} == expected
    assert len(chats.list()) == 9
    assert count(db, "messages") == 2 * 8 * per_thread


def test_two_databases_on_one_file_share_the_data(tmp_path: Path) -> None:
    path = tmp_path / "w.db"
    with Database(path) as a, Database(path) as b:
        chat = ChatStore(a).create("from a")
        assert ChatStore(b).get(chat.id).title == "from a"


def test_kill_9_loses_no_committed_message(tmp_path: Path) -> None:
    """A message already shown (appended, then updated while streaming) survives SIGKILL."""
    path = tmp_path / "crash.db"
    script = textwrap.dedent(f"""
        import os, signal
        from pathlib import Path
        from webui.store import ChatStore, Database
        chats = ChatStore(Database(Path({str(path)!r})))
        chat = chats.create("crash test")
        chats.append(chat.id, "user", "hello")
        reply = chats.append(chat.id, "assistant", "Hel")
        chats.update(reply.id, content="Hello there", stats={{"tokens": 3}})
        print("written", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=env, timeout=60)
    assert proc.stdout.strip() == "written", proc.stderr
    assert proc.returncode == -9
    with Database(path) as db:
        chats = ChatStore(db)
        [chat] = chats.list()
        messages = chats.messages(chat.id)
        assert [(m.role, m.content, m.stats) for m in messages] == [
            ("user", "hello", None), ("assistant", "Hello there", {"tokens": 3})]
