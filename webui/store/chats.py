"""Chats and their messages. Every write is one transaction and touches ``chats.updated``.

Messages form a tree: a regenerated reply or an edited message is a new version (a sibling) of the one it
replaces, with its own continuation, and nothing is overwritten. A chat shows one path, the one that ends at
its current leaf; ``messages()`` is that path, ``versions()`` a message's siblings, ``show()`` switches path.
"""

from __future__ import annotations

import builtins
import hashlib
import json
import sqlite3
import time
from dataclasses import dataclass, replace
from typing import Any, Sequence

from webui.chat.modes import INSTRUCT, MODES
from webui.chat.reply import ReplyRecord
from webui.owner import current as current_owner
from webui.documents import Document
from webui.store.chat_documents import Attached, add_documents, document_data, documents_of, drop_unused_documents
from webui.store.chat_format import ROLES, ChatExport, check_title, export_chat, export_tgwui, parse_chat
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
    mode: str = "instruct"
    """How the chat is written for the model (webui.chat.modes.MODES)."""
    character: str | None = None
    """The name of its character (<user data>/characters); None: none."""
    tools: tuple[str, ...] = ()
    """The tools its model is offered, by name (webui/tools); none: it answers without tools."""


@dataclass(frozen=True)
class Message:
    """One turn of a chat."""

    id: int
    chat_id: int
    position: int
    """0-based place in the chat's path (its depth in the tree)."""
    role: str
    """One of ROLES: 'system', 'user', 'assistant'."""
    content: str
    stats: dict[str, Any] | None
    """The JSON object stored with it, as stored (a reply's: ``record``)."""
    created: float
    parent_id: int | None = None
    """The message it answers or follows; None for a first message."""
    images: tuple[str, ...] = ()
    """The images it carries (for a vision model), in order, by the SHA-256 of their bytes (``ChatStore.image``)."""
    documents: tuple[Document, ...] = ()
    """The documents attached to it, in order, as read (the model reads their text after the message's)."""

    @property
    def record(self) -> ReplyRecord:
        """The stats as a reply's record (an empty one when there are none)."""
        return ReplyRecord.from_json(self.stats)


class ChatStore:
    """Chats on a Database; methods are safe to call from any thread.

    Ids that do not exist raise ChatNotFound / MessageNotFound; bad values raise StoreError.
    """

    def __init__(self, db: Database) -> None:
        self._db = db

    def create(self, title: str = "New chat", system_prompt: str = "", mode: str = INSTRUCT,
               character: str | None = None, tools: Sequence[str] = ()) -> Chat:
        """Create an empty chat (in ``mode``, with ``character``, offering ``tools``)."""
        title = check_title(title)
        _check_str("system_prompt", system_prompt)
        _check_mode(mode, character)
        names = _check_tools(tools)
        now = time.time()
        with self._db.transaction() as conn:
            cur = conn.execute(
                "INSERT INTO chats (title, system_prompt, created, updated, owner, mode, character, tools) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (title, system_prompt, now, now, current_owner(), mode, character, json.dumps(names)))
            return self._get(conn, cur.lastrowid)

    def get(self, chat_id: int) -> Chat:
        """The chat, or ChatNotFound."""
        row = self._db.query_one("SELECT * FROM chats WHERE id = ? AND owner = ?", (chat_id, current_owner()))
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
            rows = self._db.query("SELECT * FROM chats WHERE owner = ? ORDER BY updated DESC, id DESC",
                                  (current_owner(),))
            return [_chat(row) for row in rows]
        pattern = "%" + _escape_like(query.casefold()) + "%"
        rows = self._db.query(
            r"""SELECT * FROM chats AS c
                WHERE c.owner = :owner
                  AND (casefold(c.title) LIKE :p ESCAPE '\'
                       OR EXISTS (SELECT 1 FROM messages AS m WHERE m.chat_id = c.id
                                  AND casefold(m.content) LIKE :p ESCAPE '\'))
                ORDER BY c.updated DESC, c.id DESC""",
            {"p": pattern, "owner": current_owner()})
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

    def set_mode(self, chat_id: int, mode: str, character: str | None) -> Chat:
        """Set the chat's mode and character (None: none); its messages stay as they are."""
        _check_mode(mode, character)
        with self._db.transaction() as conn:
            self._touch(conn, chat_id, "mode = ?, character = ?", (mode, character))
            return self._get(conn, chat_id)

    def set_tools(self, chat_id: int, names: Sequence[str]) -> Chat:
        """Set the tools the chat offers its model (by name, in the order given, each once)."""
        tools = _check_tools(names)
        with self._db.transaction() as conn:
            self._touch(conn, chat_id, "tools = ?", (json.dumps(tools),))
            return self._get(conn, chat_id)

    def delete(self, chat_id: int) -> None:
        """Delete the chat and its messages, or raise ChatNotFound."""
        with self._db.transaction() as conn:
            if conn.execute("DELETE FROM chats WHERE id = ? AND owner = ?", (chat_id, current_owner())).rowcount == 0:
                raise _not_found(chat_id)
            _drop_unused_images(conn)

    def messages(self, chat_id: int) -> builtins.list[Message]:
        """The chat's shown path, first message first; ChatNotFound if there is no such chat."""
        with self._db.transaction() as conn:
            return self._path(conn, self._get_leaf(conn, chat_id))

    def append(self, chat_id: int, role: str, content: str,
               stats: ReplyRecord | dict[str, Any] | None = None, images: Sequence[bytes] = (),
               documents: Sequence[Attached] = ()) -> Message:
        """Add a message after the shown path's last one (it becomes the chat's current leaf) and return it;
        ``images``: the encoded images it carries, in order (each stored once, whatever messages share it);
        ``documents``: the documents attached to it, in order (each stored once too)."""
        _check_role(role)
        _check_str("content", content)
        stats_json = _stats_json(stats)
        if not all(isinstance(image, bytes) and image for image in images):
            raise StoreError("images must be the bytes of encoded images")
        with self._db.transaction() as conn:
            leaf = self._get_leaf(conn, chat_id)
            now = self._touch(conn, chat_id)
            depth = 0 if leaf is None else conn.execute("SELECT position + 1 FROM messages WHERE id = ?",
                                                        (leaf,)).fetchone()[0]
            cur = conn.execute(
                """INSERT INTO messages (chat_id, parent_id, position, role, content, stats, created)
                   VALUES (?, ?, ?, ?, ?, ?, ?)""",
                (chat_id, leaf, depth, role, content, stats_json, now))
            conn.execute("UPDATE chats SET current_leaf = ? WHERE id = ?", (cur.lastrowid, chat_id))
            _add_images(conn, cur.lastrowid, {hashlib.sha256(data).hexdigest(): data for data in images},
                        [hashlib.sha256(data).hexdigest() for data in images])
            add_documents(conn, cur.lastrowid, [doc for doc, _ in documents],
                          {doc.digest: data for doc, data in documents})
            return self._one(conn, cur.lastrowid)

    def image(self, digest: str) -> bytes:
        """The bytes of an image a message of the caller's chats carries; StoreError if there is none."""
        row = self._db.query_one(
            "SELECT i.data FROM images AS i WHERE i.digest = ? AND EXISTS (SELECT 1 FROM message_images AS mi "
            "JOIN messages AS m ON m.id = mi.message_id JOIN chats AS c ON c.id = m.chat_id "
            "WHERE mi.digest = i.digest AND c.owner = ?)", (digest, current_owner()))
        if row is None:
            raise StoreError(f"no chat holds the image {digest[:16]}...")
        return bytes(row["data"])

    def document_bytes(self, digest: str) -> bytes:
        """The bytes of a document a message of the caller's chats carries; StoreError if there is none."""
        row = self._db.query_one(
            "SELECT d.data FROM documents AS d WHERE d.digest = ? AND EXISTS (SELECT 1 FROM message_documents AS md "
            "JOIN messages AS m ON m.id = md.message_id JOIN chats AS c ON c.id = m.chat_id "
            "WHERE md.digest = d.digest AND c.owner = ?)", (digest, current_owner()))
        if row is None:
            raise StoreError(f"no chat holds the document {digest[:16]}...")
        return bytes(row["data"])

    def rewind(self, chat_id: int, to_position: int) -> None:
        """Show the path only up to ``to_position`` (exclusive), keeping what followed as a branch: the next
        append is a new version of the message that stood at ``to_position``."""
        _check_position(to_position)
        with self._db.transaction() as conn:
            path = self._path(conn, self._get_leaf(conn, chat_id))
            self._touch(conn, chat_id)
            leaf = path[to_position - 1].id if 0 < to_position <= len(path) else (
                path[-1].id if path and to_position > len(path) else None)
            conn.execute("UPDATE chats SET current_leaf = ? WHERE id = ?", (leaf, chat_id))

    def versions(self, message_id: int) -> builtins.list[int]:
        """The ids of a message's versions (itself and its siblings: the same parent), oldest first."""
        with self._db.transaction() as conn:
            row = self._message_row(conn, message_id)
            rows = conn.execute("SELECT id FROM messages WHERE chat_id = ? AND parent_id IS ? ORDER BY id",
                                (row["chat_id"], row["parent_id"])).fetchall()
        return [r["id"] for r in rows]

    def version_numbers(self, chat_id: int) -> dict[int, tuple[int, int]]:
        """For every message of the chat: (its 1-based number among its versions, how many versions there are)."""
        with self._db.transaction() as conn:
            self._get(conn, chat_id)
            rows = conn.execute("SELECT id, parent_id FROM messages WHERE chat_id = ? ORDER BY id",
                                (chat_id,)).fetchall()
        groups: dict[Any, builtins.list[int]] = {}
        for row in rows:
            groups.setdefault(row["parent_id"], []).append(row["id"])
        return {mid: (i + 1, len(ids)) for ids in groups.values() for i, mid in enumerate(ids)}

    def show(self, message_id: int) -> builtins.list[Message]:
        """Show the path through ``message_id`` (continued by the newest reply at each step); the new path."""
        with self._db.transaction() as conn:
            row = self._message_row(conn, message_id)
            leaf = message_id
            while (child := conn.execute("SELECT id FROM messages WHERE parent_id = ? ORDER BY id DESC LIMIT 1",
                                         (leaf,)).fetchone()) is not None:
                leaf = child["id"]
            self._touch(conn, row["chat_id"], "current_leaf = ?", (leaf,))
            return self._path(conn, leaf)

    def branch(self, message_id: int, title: str) -> Chat:
        """A new chat holding the path up to and including ``message_id`` (stats and all), shown from its end."""
        title = check_title(title)
        with self._db.transaction() as conn:
            row = self._message_row(conn, message_id)
            source = self._get(conn, row["chat_id"])
            now = time.time()
            chat_id = conn.execute(
                "INSERT INTO chats (title, system_prompt, created, updated, owner, mode, character, tools) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (title, source.system_prompt, now, now, current_owner(), source.mode, source.character,
                 json.dumps(list(source.tools)))).lastrowid
            parent = None
            for m in self._path(conn, message_id):
                parent = conn.execute(
                    "INSERT INTO messages (chat_id, parent_id, position, role, content, stats, created) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (chat_id, parent, m.position, m.role, m.content, _stats_json(m.stats), m.created)).lastrowid
                _add_images(conn, parent, {}, m.images)
                add_documents(conn, parent, m.documents, {})
            conn.execute("UPDATE chats SET current_leaf = ? WHERE id = ?", (parent, chat_id))
            return self._get(conn, chat_id)

    def update(self, message_id: int, content: str | None = None,
               stats: ReplyRecord | dict[str, Any] | None = None) -> Message:
        """Replace a message's content and/or stats (None leaves that part as it is).

        Meant for streaming: append the reply at its first text, then update it.
        """
        if content is not None:
            _check_str("content", content)
        stats_json = _stats_json(stats)
        with self._db.transaction() as conn:
            row = self._message_row(conn, message_id)
            conn.execute("UPDATE messages SET content = COALESCE(?, content), "
                         "stats = COALESCE(?, stats) WHERE id = ?",
                         (content, stats_json, message_id))
            self._touch(conn, row["chat_id"])
            return self._one(conn, message_id)

    def truncate(self, chat_id: int, from_position: int) -> int:
        """Delete the shown path's messages at and after ``from_position`` (with every version that followed
        them); return how many messages went."""
        _check_position(from_position)
        with self._db.transaction() as conn:
            path = self._path(conn, self._get_leaf(conn, chat_id))
            self._touch(conn, chat_id)
            if from_position >= len(path):
                return 0
            before = conn.execute("SELECT COUNT(*) FROM messages WHERE chat_id = ?", (chat_id,)).fetchone()[0]
            conn.execute("DELETE FROM messages WHERE id = ?", (path[from_position].id,))  # and its subtree
            _drop_unused_images(conn)
            leaf = path[from_position - 1].id if from_position > 0 else None
            conn.execute("UPDATE chats SET current_leaf = ? WHERE id = ?", (leaf, chat_id))
            return before - conn.execute("SELECT COUNT(*) FROM messages WHERE chat_id = ?", (chat_id,)).fetchone()[0]

    def export_json(self, chat_id: int) -> str:
        """The chat as JSON in the documented format (see webui.store.chat_format): every version, each message
        naming its parent, and which path is shown."""
        with self._db.transaction() as conn:
            chat = self._get(conn, chat_id)
            leaf = self._get_leaf(conn, chat_id)
            rows = conn.execute("SELECT * FROM messages WHERE chat_id = ? ORDER BY id", (chat_id,)).fetchall()
            messages = _with_images(conn, [_message(row) for row in rows])
            names = {name for m in messages for name in m.images}
            data = {name: bytes(conn.execute("SELECT data FROM images WHERE digest = ?", (name,)).fetchone()[0])
                    for name in sorted(names)}
            documents = document_data(conn, sorted({d.digest for m in messages for d in m.documents}))
        index: dict[int | None, int] = {m.id: i for i, m in enumerate(messages)}
        return export_chat(ChatExport(
            title=chat.title, system_prompt=chat.system_prompt, created=chat.created,
            messages=[(m.role, m.content, m.stats) for m in messages],
            parents=[index.get(m.parent_id) for m in messages], current=index.get(leaf), mode=chat.mode,
            character=chat.character, images=[m.images for m in messages], image_data=data, tools=chat.tools,
            documents=[m.documents for m in messages], document_data=documents))

    def export_tgwui(self, chat_id: int) -> str:
        """The shown conversation as text-generation-webui saves a chat history."""
        return export_tgwui([(m.role, m.content) for m in self.messages(chat_id)])

    def import_json(self, text: str) -> Chat:
        """Create a new chat from exported JSON; on any error raise StoreError, writing nothing."""
        data = parse_chat(text)
        now = time.time()
        with self._db.transaction() as conn:
            cur = conn.execute(
                "INSERT INTO chats (title, system_prompt, created, updated, owner, mode, character, tools) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (data.title, data.system_prompt, data.created, now, current_owner(), data.mode, data.character,
                 json.dumps(list(data.tools))))
            chat_id = cur.lastrowid
            ids: builtins.list[int | None] = []
            depth: builtins.list[int] = []
            for i, ((role, content, stats), parent) in enumerate(zip(data.messages, data.parents or [])):
                depth.append(0 if parent is None else depth[parent] + 1)  # (parents are set for every chat)
                ids.append(conn.execute(
                    "INSERT INTO messages (chat_id, parent_id, position, role, content, stats, created) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (chat_id, None if parent is None else ids[parent], depth[-1], role, content,
                     _stats_json(stats), now)).lastrowid)
                if i < len(data.images):
                    _add_images(conn, ids[-1], data.image_data, data.images[i])
                if i < len(data.documents):
                    add_documents(conn, ids[-1], data.documents[i], data.document_data)
            leaf = ids[data.current] if data.current is not None else None
            conn.execute("UPDATE chats SET current_leaf = ? WHERE id = ?", (leaf, chat_id))
            return self._get(conn, chat_id)

    def _get_leaf(self, conn: sqlite3.Connection, chat_id: Any) -> int | None:
        row = conn.execute("SELECT current_leaf FROM chats WHERE id = ? AND owner = ?",
                           (chat_id, current_owner())).fetchone()
        if row is None:
            raise _not_found(chat_id)
        return row["current_leaf"]

    @staticmethod
    def _path(conn: sqlite3.Connection, leaf: int | None) -> builtins.list[Message]:
        if leaf is None:
            return []
        rows = conn.execute(
            """WITH RECURSIVE path(id) AS (
                   SELECT ? UNION ALL SELECT m.parent_id FROM messages AS m JOIN path ON m.id = path.id
                   WHERE m.parent_id IS NOT NULL)
               SELECT * FROM messages WHERE id IN (SELECT id FROM path) ORDER BY position""", (leaf,)).fetchall()
        return _with_images(conn, [_message(row) for row in rows])

    @staticmethod
    def _one(conn: sqlite3.Connection, message_id: Any) -> Message:
        return _with_images(conn, [_message(conn.execute("SELECT * FROM messages WHERE id = ?",
                                                         (message_id,)).fetchone())])[0]

    @staticmethod
    def _message_row(conn: sqlite3.Connection, message_id: Any) -> sqlite3.Row:
        row = conn.execute("SELECT m.* FROM messages AS m JOIN chats AS c ON c.id = m.chat_id "
                           "WHERE m.id = ? AND c.owner = ?", (message_id, current_owner())).fetchone()
        if row is None:
            raise MessageNotFound(f"message {message_id} does not exist (its chat may have been deleted or "
                                  "truncated)")
        return row

    def _get(self, conn: sqlite3.Connection, chat_id: Any) -> Chat:
        row = conn.execute("SELECT * FROM chats WHERE id = ? AND owner = ?", (chat_id, current_owner())).fetchone()
        if row is None:
            raise _not_found(chat_id)
        return _chat(row)

    @staticmethod
    def _touch(conn: sqlite3.Connection, chat_id: int, assignments: str = "",
               params: tuple[Any, ...] = ()) -> float:
        """Set ``updated`` (and any other columns) on the chat; ChatNotFound if it is gone."""
        now = time.time()
        sets = f"{assignments}, updated = ?" if assignments else "updated = ?"
        cur = conn.execute(f"UPDATE chats SET {sets} WHERE id = ? AND owner = ?", (*params, now, chat_id,
                                                                                 current_owner()))
        if cur.rowcount == 0:
            raise _not_found(chat_id)
        return now


def _check_str(field: str, value: object) -> None:
    if not isinstance(value, str):
        raise StoreError(f"{field} must be a string, got {type(value).__name__}")


def _check_mode(mode: object, character: object) -> None:
    if mode not in MODES:
        raise StoreError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    if character is not None and (not isinstance(character, str) or not character.strip()):
        raise StoreError(f"character must be a character's name or None, got {character!r}")


def _check_tools(names: object) -> builtins.list[str]:
    if isinstance(names, str) or not isinstance(names, (list, tuple)) \
            or not all(isinstance(n, str) and n.strip() for n in names):
        raise StoreError(f"tools must be a list of tool names, got {names!r}")
    return builtins.list(dict.fromkeys(names))


def _check_position(position: object) -> None:
    if isinstance(position, bool) or not isinstance(position, int) or position < 0:
        raise StoreError(f"from_position must be an integer >= 0, got {position!r}")


def _check_role(role: object) -> None:
    if role not in ROLES:
        raise StoreError(f"role must be one of {', '.join(ROLES)}, got {role!r}")


def _stats_json(stats: object) -> str | None:
    if stats is None:
        return None
    if isinstance(stats, ReplyRecord):
        stats = stats.to_json()
    if not isinstance(stats, dict):
        raise StoreError(f"stats must be a dict or None, got {type(stats).__name__}")
    try:
        return json.dumps(stats, allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError) as e:
        raise StoreError(f"stats must be plain JSON (str, finite numbers, bool, None, "
                         f"lists, dicts): {e}") from e


def _add_images(conn: sqlite3.Connection, message_id: Any, data: dict[str, bytes], names: Sequence[str]) -> None:
    """Message ``message_id`` carries the images ``names`` in order; ``data``: bytes of those not stored yet."""
    now = time.time()
    for position, name in enumerate(names):
        if name in data:
            conn.execute("INSERT OR IGNORE INTO images (digest, data, created) VALUES (?, ?, ?)",
                         (name, data[name], now))
        conn.execute("INSERT INTO message_images (message_id, position, digest) VALUES (?, ?, ?)",
                     (message_id, position, name))


def _with_images(conn: sqlite3.Connection, messages: builtins.list[Message]) -> builtins.list[Message]:
    """``messages`` with the images and documents each carries."""
    if not messages:
        return messages
    messages = documents_of(conn, messages)
    marks = ",".join("?" * len(messages))
    rows = conn.execute(f"SELECT message_id, digest FROM message_images WHERE message_id IN ({marks}) "
                        "ORDER BY message_id, position", [m.id for m in messages]).fetchall()
    if not rows:
        return messages
    found: dict[int, builtins.list[str]] = {}
    for row in rows:
        found.setdefault(row["message_id"], []).append(row["digest"])
    return [replace(m, images=tuple(found[m.id])) if m.id in found else m for m in messages]


def _drop_unused_images(conn: sqlite3.Connection) -> None:
    """Images no message carries any more go (a deleted chat's, a truncated branch's)."""
    conn.execute("DELETE FROM images WHERE NOT EXISTS (SELECT 1 FROM message_images AS mi "
                 "WHERE mi.digest = images.digest)")
    drop_unused_documents(conn)


def _escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _not_found(chat_id: object) -> ChatNotFound:
    return ChatNotFound(f"chat {chat_id} does not exist (it may have been deleted)")


def _chat(row: sqlite3.Row) -> Chat:
    return Chat(id=row["id"], title=row["title"], system_prompt=row["system_prompt"],
                created=row["created"], updated=row["updated"], mode=row["mode"], character=row["character"],
                tools=tuple(json.loads(row["tools"])))


def _message(row: sqlite3.Row) -> Message:
    stats = json.loads(row["stats"]) if row["stats"] is not None else None
    return Message(id=row["id"], chat_id=row["chat_id"], position=row["position"],
                   role=row["role"], content=row["content"], stats=stats,
                   created=row["created"], parent_id=row["parent_id"])
