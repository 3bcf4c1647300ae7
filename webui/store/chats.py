"""Chats and their messages. Every write is one transaction and touches ``chats.updated``."""

from __future__ import annotations

import builtins
import json
import sqlite3
import time
from dataclasses import dataclass
from typing import Any

from webui.store.chat_format import ROLES, ChatExport, check_title, export_chat, parse_chat
from webui.store.db import Database
from webui.store.errors import ChatNotFound, MessageNotFound, StoreError


@dataclass(frozen=True)
class Chat:
    """A conversation's own fields; its messages come from ChatStore.messages()."""

    id: int
    title: str
    system_prompt: str
    created: float
    """Seconds since the epoch."""
    updated: float
    """Seconds since the epoch of the last write to the chat or any of its messages."""


@dataclass(frozen=True)
class Message:
    """One turn of a chat."""

    id: int
    chat_id: int
    position: int
    """0-based place in the chat; contiguous, since only truncate() deletes messages."""
    role: str
    """One of ROLES: 'system', 'user', 'assistant'."""
    content: str
    stats: dict[str, Any] | None
    """Free-form JSON object: tokens, ttft, tokens_per_s, finish_reason, seed, params..."""
    created: float


class ChatStore:
    """Chats on a Database; methods are safe to call from any thread.

    Ids that do not exist raise ChatNotFound / MessageNotFound; bad values raise StoreError.
    """

    def __init__(self, db: Database) -> None:
        self._db = db

    def create(self, title: str = "New chat", system_prompt: str = "") -> Chat:
        """Create an empty chat."""
        title = check_title(title)
        _check_str("system_prompt", system_prompt)
        now = time.time()
        with self._db.transaction() as conn:
            cur = conn.execute(
                "INSERT INTO chats (title, system_prompt, created, updated) VALUES (?, ?, ?, ?)",
                (title, system_prompt, now, now))
            return self._get(conn, cur.lastrowid)

    def get(self, chat_id: int) -> Chat:
        """The chat, or ChatNotFound."""
        row = self._db.query_one("SELECT * FROM chats WHERE id = ?", (chat_id,))
        if row is None:
            raise _not_found(chat_id)
        return _chat(row)

    def list(self, query: str = "") -> builtins.list[Chat]:
        """Chats, most recently updated first.

        A non-empty ``query`` keeps chats whose title or any message contains it,
        ignoring case (Unicode-aware); ``%`` and ``_`` match themselves.
        """
        query = query.strip()
        if not query:
            rows = self._db.query("SELECT * FROM chats ORDER BY updated DESC, id DESC")
            return [_chat(row) for row in rows]
        pattern = "%" + _escape_like(query.casefold()) + "%"
        rows = self._db.query(
            r"""SELECT * FROM chats AS c
                WHERE casefold(c.title) LIKE :p ESCAPE '\'
                   OR EXISTS (SELECT 1 FROM messages AS m WHERE m.chat_id = c.id
                              AND casefold(m.content) LIKE :p ESCAPE '\')
                ORDER BY c.updated DESC, c.id DESC""",
            {"p": pattern})
        return [_chat(row) for row in rows]

    def rename(self, chat_id: int, title: str) -> Chat:
        """Set the title (stripped; 1-200 characters, no control characters)."""
        title = check_title(title)
        with self._db.transaction() as conn:
            self._touch(conn, chat_id, "title = ?", (title,))
            return self._get(conn, chat_id)

    def set_system_prompt(self, chat_id: int, text: str) -> Chat:
        """Replace the chat's system prompt (may be empty)."""
        _check_str("system_prompt", text)
        with self._db.transaction() as conn:
            self._touch(conn, chat_id, "system_prompt = ?", (text,))
            return self._get(conn, chat_id)

    def delete(self, chat_id: int) -> None:
        """Delete the chat and its messages, or raise ChatNotFound."""
        with self._db.transaction() as conn:
            if conn.execute("DELETE FROM chats WHERE id = ?", (chat_id,)).rowcount == 0:
                raise _not_found(chat_id)

    def messages(self, chat_id: int) -> builtins.list[Message]:
        """The chat's messages in order; ChatNotFound if there is no such chat."""
        with self._db.transaction() as conn:
            self._get(conn, chat_id)
            rows = conn.execute("SELECT * FROM messages WHERE chat_id = ? ORDER BY position",
                                (chat_id,)).fetchall()
        return [_message(row) for row in rows]

    def append(self, chat_id: int, role: str, content: str,
               stats: dict[str, Any] | None = None) -> Message:
        """Add a message at the end of the chat and return it."""
        _check_role(role)
        _check_str("content", content)
        stats_json = _stats_json(stats)
        with self._db.transaction() as conn:
            now = self._touch(conn, chat_id)
            cur = conn.execute(
                """INSERT INTO messages (chat_id, position, role, content, stats, created)
                   VALUES (?, (SELECT COALESCE(MAX(position) + 1, 0) FROM messages
                               WHERE chat_id = ?), ?, ?, ?, ?)""",
                (chat_id, chat_id, role, content, stats_json, now))
            return _message(conn.execute("SELECT * FROM messages WHERE id = ?",
                                         (cur.lastrowid,)).fetchone())

    def update(self, message_id: int, content: str | None = None,
               stats: dict[str, Any] | None = None) -> Message:
        """Replace a message's content and/or stats (None leaves that part as it is).

        Meant for streaming: append the reply at its first text, then update it.
        """
        if content is not None:
            _check_str("content", content)
        stats_json = _stats_json(stats)
        with self._db.transaction() as conn:
            row = conn.execute("SELECT * FROM messages WHERE id = ?", (message_id,)).fetchone()
            if row is None:
                raise MessageNotFound(f"message {message_id} does not exist "
                                      "(its chat may have been deleted or truncated)")
            conn.execute("UPDATE messages SET content = COALESCE(?, content), "
                         "stats = COALESCE(?, stats) WHERE id = ?",
                         (content, stats_json, message_id))
            self._touch(conn, row["chat_id"])
            return _message(conn.execute("SELECT * FROM messages WHERE id = ?",
                                         (message_id,)).fetchone())

    def truncate(self, chat_id: int, from_position: int) -> int:
        """Delete the messages at and after ``from_position``; return how many went."""
        if isinstance(from_position, bool) or not isinstance(from_position, int) \
                or from_position < 0:
            raise StoreError(f"from_position must be an integer >= 0, got {from_position!r}")
        with self._db.transaction() as conn:
            self._touch(conn, chat_id)
            return conn.execute("DELETE FROM messages WHERE chat_id = ? AND position >= ?",
                                (chat_id, from_position)).rowcount

    def export_json(self, chat_id: int) -> str:
        """The chat as JSON in the documented format (see webui.store.chat_format)."""
        with self._db.transaction() as conn:
            chat = self._get(conn, chat_id)
            rows = conn.execute("SELECT * FROM messages WHERE chat_id = ? ORDER BY position",
                                (chat_id,)).fetchall()
        messages = [_message(row) for row in rows]
        return export_chat(ChatExport(
            title=chat.title, system_prompt=chat.system_prompt, created=chat.created,
            messages=[(m.role, m.content, m.stats) for m in messages]))

    def import_json(self, text: str) -> Chat:
        """Create a new chat from exported JSON; on any error raise StoreError, writing nothing."""
        data = parse_chat(text)
        now = time.time()
        with self._db.transaction() as conn:
            cur = conn.execute(
                "INSERT INTO chats (title, system_prompt, created, updated) VALUES (?, ?, ?, ?)",
                (data.title, data.system_prompt, data.created, now))
            chat_id = cur.lastrowid
            conn.executemany(
                "INSERT INTO messages (chat_id, position, role, content, stats, created) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                [(chat_id, i, role, content, _stats_json(stats), now)
                 for i, (role, content, stats) in enumerate(data.messages)])
            return self._get(conn, chat_id)

    def _get(self, conn: sqlite3.Connection, chat_id: Any) -> Chat:
        row = conn.execute("SELECT * FROM chats WHERE id = ?", (chat_id,)).fetchone()
        if row is None:
            raise _not_found(chat_id)
        return _chat(row)

    @staticmethod
    def _touch(conn: sqlite3.Connection, chat_id: int, assignments: str = "",
               params: tuple[Any, ...] = ()) -> float:
        """Set ``updated`` (and any other columns) on the chat; ChatNotFound if it is gone."""
        now = time.time()
        sets = f"{assignments}, updated = ?" if assignments else "updated = ?"
        cur = conn.execute(f"UPDATE chats SET {sets} WHERE id = ?", (*params, now, chat_id))
        if cur.rowcount == 0:
            raise _not_found(chat_id)
        return now


def _check_str(field: str, value: object) -> None:
    if not isinstance(value, str):
        raise StoreError(f"{field} must be a string, got {type(value).__name__}")


def _check_role(role: object) -> None:
    if role not in ROLES:
        raise StoreError(f"role must be one of {', '.join(ROLES)}, got {role!r}")


def _stats_json(stats: object) -> str | None:
    if stats is None:
        return None
    if not isinstance(stats, dict):
        raise StoreError(f"stats must be a dict or None, got {type(stats).__name__}")
    try:
        return json.dumps(stats, allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError) as e:
        raise StoreError(f"stats must be plain JSON (str, finite numbers, bool, None, "
                         f"lists, dicts): {e}") from e


def _escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _not_found(chat_id: object) -> ChatNotFound:
    return ChatNotFound(f"chat {chat_id} does not exist (it may have been deleted)")


def _chat(row: sqlite3.Row) -> Chat:
    return Chat(id=row["id"], title=row["title"], system_prompt=row["system_prompt"],
                created=row["created"], updated=row["updated"])


def _message(row: sqlite3.Row) -> Message:
    stats = json.loads(row["stats"]) if row["stats"] is not None else None
    return Message(id=row["id"], chat_id=row["chat_id"], position=row["position"],
                   role=row["role"], content=row["content"], stats=stats,
                   created=row["created"])
