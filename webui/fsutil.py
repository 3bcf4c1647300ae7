"""Crash-safe file writes: a reader sees the old file or the new one, never half of one."""

from __future__ import annotations

import os
import tempfile
import threading
from pathlib import Path


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` via a temp file, fsync and rename.

    If the disk is full or the process dies, the previous file stays intact.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


_scratch: tempfile.TemporaryDirectory | None = None
_scratch_lock = threading.Lock()


def scratch_folder(prefix: str) -> Path:
    """A new empty folder for files the UI hands out (exports to download) or gathers (several files uploaded
    together), inside this process's scratch folder, which is removed when the process exits: a long-running
    server leaves no trail of them in the system's temp folder."""
    global _scratch
    with _scratch_lock:
        if _scratch is None:
            _scratch = tempfile.TemporaryDirectory(prefix="llm-workbench-scratch-")
        return Path(tempfile.mkdtemp(prefix=prefix, dir=_scratch.name))


def in_scratch(path: Path) -> bool:
    """Whether ``path`` lies inside this process's scratch folder (made by :func:`scratch_folder`)."""
    with _scratch_lock:
        root = None if _scratch is None else Path(_scratch.name).resolve()
    return root is not None and path.resolve().is_relative_to(root)
