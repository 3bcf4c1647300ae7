"""Documents attached to chat messages (#44), each stored once by its content: its bytes (to show and export),
how it was read and the text the model reads; a message names its documents in order, each under the name it was
attached with. The SQL of ChatStore's documents, kept apart from its messages."""

from __future__ import annotations

import sqlite3
import time
from dataclasses import replace
from typing import Any, Sequence

from webui.documents import Document

Attached = tuple[Document, bytes]
"""A document as it is attached: as read, and the file's bytes."""


def add_documents(conn: sqlite3.Connection, message_id: Any, documents: Sequence[Document],
                  data: dict[str, bytes]) -> None:
    """Message ``message_id`` carries ``documents`` in order; ``data``: the bytes of those not stored yet, by
    digest."""
    now = time.time()
    for position, doc in enumerate(documents):
        if doc.digest in data:
            conn.execute("INSERT OR IGNORE INTO documents (digest, data, kind, text, created) VALUES (?, ?, ?, ?, ?)",
                         (doc.digest, data[doc.digest], doc.kind, doc.text, now))
        conn.execute("INSERT INTO message_documents (message_id, position, digest, name) VALUES (?, ?, ?, ?)",
                     (message_id, position, doc.digest, doc.name))


def documents_of(conn: sqlite3.Connection, messages: list[Any]) -> list[Any]:
    """``messages`` (store Messages) with the documents each carries, their text included."""
    if not messages:
        return messages
    marks = ",".join("?" * len(messages))
    rows = conn.execute(f"SELECT md.message_id, md.name, d.digest, d.kind, d.text FROM message_documents AS md "
                        f"JOIN documents AS d ON d.digest = md.digest WHERE md.message_id IN ({marks}) "
                        "ORDER BY md.message_id, md.position", [m.id for m in messages]).fetchall()
    if not rows:
        return messages
    found: dict[int, list[Document]] = {}
    for row in rows:
        found.setdefault(row["message_id"], []).append(Document(row["name"], row["digest"], row["text"], row["kind"]))
    return [replace(m, documents=tuple(found[m.id])) if m.id in found else m for m in messages]


def document_data(conn: sqlite3.Connection, digests: Sequence[str]) -> dict[str, bytes]:
    """The bytes of the documents ``digests``, by digest."""
    return {d: bytes(conn.execute("SELECT data FROM documents WHERE digest = ?", (d,)).fetchone()[0])
            for d in dict.fromkeys(digests)}


def drop_unused_documents(conn: sqlite3.Connection) -> None:
    """Documents no message carries any more go (a deleted chat's, a truncated branch's)."""
    conn.execute("DELETE FROM documents WHERE NOT EXISTS (SELECT 1 FROM message_documents AS md "
                 "WHERE md.digest = documents.digest)")
