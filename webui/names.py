"""One check for every name a user or client gives us (models, presets, chats, adapters), and one for the files
we then open by that name (a link in our folder to a file elsewhere is not read)."""

from __future__ import annotations

import re
from pathlib import Path

from webui import userpaths

MAX_NAME_LENGTH = 120
MAX_NAME_BYTES = 200
"""A name in UTF-8, at most: a file system takes 255 bytes a file name, and a saved file is written under
``.<name><suffix>.<random>.tmp`` first (webui.fsutil.atomic_write_text)."""
_BAD = re.compile(r"[/\\:\x00-\x1f]")
_SHOWN = 40


class InvalidName(ValueError):
    pass


def check_name(kind: str, name: object) -> str:
    """Return ``name`` stripped, or raise InvalidName saying what is wrong with it.

    A name is a plain file or folder name: no path separators, no ``..``, no
    control characters, not hidden, not too long for a file name. This keeps
    names from the UI and the API inside the folders we own.
    """
    if not isinstance(name, str) or not name.strip():
        raise InvalidName(f"{kind} name must not be empty")
    name = name.strip()
    if len(name) > MAX_NAME_LENGTH:
        raise InvalidName(f"{kind} name is too long ({len(name):,} characters; at most {MAX_NAME_LENGTH}); "
                          "choose a shorter one")
    if _BAD.search(name) or name in (".", "..") or name.startswith("."):
        raise InvalidName(f"{kind} name {shown(name)} must be a plain name, without path characters "
                          "(/ \\ : or a leading dot) or control characters; choose another")
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidName(f"{kind} name {shown(name)} is not valid text (it holds a lone UTF-16 surrogate); "
                          "choose another") from None
    if size > MAX_NAME_BYTES:
        raise InvalidName(f"{kind} name is too long ({size} bytes in UTF-8; at most {MAX_NAME_BYTES}); choose a "
                          "shorter one")
    return name


def plain_name(text: str) -> str:
    """``text`` (a name read from a file made elsewhere) as a name check_name takes where it can: path and control
    characters become "_", leading dots and spaces go ("" where nothing is left)."""
    return _BAD.sub("_", text.strip()).lstrip(". ")


def shown(name: str) -> str:
    """``name`` quoted for a message, its middle left out when it is long."""
    return repr(name if len(name) <= _SHOWN else f"{name[:_SHOWN // 2]}…{name[-_SHOWN // 2:]}")


def inside(kind: str, folder: Path, path: Path) -> Path:
    """``path`` (a file we open by a name, in ``folder``) when it lies in ``folder`` once links are followed, else
    InvalidName: a link there to a file elsewhere would let a name read any file this process can."""
    try:
        userpaths.inside(folder, path, "")
    except userpaths.PathRefused:
        raise InvalidName(f"the {kind} '{path.name}' in {folder} is a link to a file outside that folder, which "
                          "is not read; put the file itself in the folder instead of a link to it") from None
    return path
