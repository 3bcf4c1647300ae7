"""Errors raised by the storage layer; every one carries a message fit to show a user."""

from __future__ import annotations


class StoreError(Exception):
    """Base class: anything the store refuses or cannot find."""


class NotADatabase(StoreError):
    """The file exists but is not a SQLite database (it is left untouched)."""


class SchemaTooNew(StoreError):
    """The database was written by a newer version of the workbench."""


class ChatNotFound(StoreError):
    pass


class MessageNotFound(StoreError):
    pass


class NotebookNotFound(StoreError):
    pass


class NotebookExists(StoreError):
    pass
