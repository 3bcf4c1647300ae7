"""SQLite storage for chats and notebooks (stdlib sqlite3, WAL, migrations).

    db = Database(config.data_dir / "workbench.sqlite3")
    chats, notebooks = ChatStore(db), NotebookStore(db)
"""

from webui.store.chat_format import FORMAT as CHAT_FORMAT
from webui.store.chat_format import MAX_TITLE_LENGTH, ROLES, check_title
from webui.store.chat_format import VERSION as CHAT_FORMAT_VERSION
from webui.store.chats import Chat, ChatStore, Message
from webui.store.db import Database
from webui.store.errors import (
    ChatNotFound,
    MessageNotFound,
    NotADatabase,
    NotebookExists,
    NotebookNotFound,
    SchemaTooNew,
    StoreError,
)
from webui.store.notebooks import NotebookStore

__all__ = [
    "CHAT_FORMAT",
    "CHAT_FORMAT_VERSION",
    "MAX_TITLE_LENGTH",
    "ROLES",
    "Chat",
    "ChatNotFound",
    "ChatStore",
    "Database",
    "Message",
    "MessageNotFound",
    "NotADatabase",
    "NotebookExists",
    "NotebookNotFound",
    "NotebookStore",
    "SchemaTooNew",
    "StoreError",
    "check_title",
]
