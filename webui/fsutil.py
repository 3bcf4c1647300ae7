"""Crash-safe file writes: a reader sees the old file or the new one, never half of one."""

from __future__ import annotations

import contextlib
import os
import tempfile
import threading
from pathlib import Path
from typing import BinaryIO, Iterable, Iterator


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` via a temp file, fsync and rename.

    If the disk is full or the process dies, the previous file stays intact.
    """
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` as atomic_write_text writes text. A link at ``path`` is replaced, never written
    through: a link in our folder cannot make us write to a file elsewhere."""
    with _replacing(path) as f:
        f.write(data)


def atomic_copy(source: Path, path: Path) -> None:
    """Copy the file ``source`` to ``path`` as atomic_write_bytes writes: whole or not at all, never through a
    link at ``path``."""
    with open(source, "rb") as src:
        atomic_write_stream(path, src)


def atomic_write_stream(path: Path, source: BinaryIO | Iterable[bytes]) -> int:
    """Write what ``source`` holds (a binary file read to its end, or byte chunks) to ``path`` as
    atomic_write_bytes writes; returns the number of bytes written."""
    written = 0
    chunks = iter(lambda: source.read(2**20), b"") if hasattr(source, "read") else source
    with _replacing(path) as f:
        for chunk in chunks:
            f.write(chunk)
            written += len(chunk)
    return written


@contextlib.contextmanager
def _replacing(path: Path) -> Iterator[BinaryIO]:
    """A temp file beside ``path`` to write; fsynced and renamed over ``path`` at the end, removed on an error."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
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
