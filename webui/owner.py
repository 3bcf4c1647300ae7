"""Whose data a call reads and writes: the logged-in UI user, or "" (no login: the one shared workspace).

The stores filter every read and write by ``current()``. It is the user set with ``as_owner`` (a batch run's
thread runs as the user who started it), else what the registered resolver says (the UI registers one that reads
the user of the Gradio request being handled), else "".
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from contextvars import ContextVar
from typing import Callable, Iterator

_OWNER: ContextVar[str | None] = ContextVar("owner", default=None)
_resolver: Callable[[], str | None] = lambda: None  # noqa: E731


def current() -> str:
    explicit = _OWNER.get()
    if explicit is not None:
        return explicit
    return _resolver() or ""


@contextlib.contextmanager
def as_owner(name: str) -> Iterator[None]:
    token = _OWNER.set(name)
    try:
        yield
    finally:
        _OWNER.reset(token)


def set_resolver(resolver: Callable[[], str | None]) -> None:
    global _resolver
    _resolver = resolver


def folder_name(owner: str) -> str:
    """A file-system-safe folder name for a user's own files (presets, settings), distinct per user."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", owner).strip(".") or "_"
    return safe if safe == owner else f"{safe}-{hashlib.sha256(owner.encode()).hexdigest()[:8]}"
