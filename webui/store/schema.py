"""Schema migrations: script N (1-based) moves a database from user_version N-1 to N.

Append new scripts at the end; never edit one that has shipped.
"""

from __future__ import annotations

MIGRATIONS: tuple[str, ...] = (
    # 1: chats, their messages, and notebooks.
    """
    CREATE TABLE chats (
        id            INTEGER PRIMARY KEY,
        title         TEXT NOT NULL,
        system_prompt TEXT NOT NULL DEFAULT '',
        created       REAL NOT NULL,
        updated       REAL NOT NULL
    );
    CREATE INDEX chats_by_updated ON chats (updated DESC, id DESC);

    CREATE TABLE messages (
        id       INTEGER PRIMARY KEY,
        chat_id  INTEGER NOT NULL REFERENCES chats (id) ON DELETE CASCADE,
        position INTEGER NOT NULL,
        role     TEXT NOT NULL CHECK (role IN ('system', 'user', 'assistant')),
        content  TEXT NOT NULL,
        stats    TEXT,  -- a JSON object, or NULL
        created  REAL NOT NULL,
        UNIQUE (chat_id, position)
    );

    CREATE TABLE notebooks (
        name    TEXT PRIMARY KEY,
        text    TEXT NOT NULL,
        created REAL NOT NULL,
        updated REAL NOT NULL
    );
    CREATE INDEX notebooks_by_updated ON notebooks (updated DESC);
    """,
)
