"""One check for every name a user or client gives us (models, presets, chats, adapters)."""

from __future__ import annotations

import re

MAX_NAME_LENGTH = 120
_BAD = re.compile(r"[/\\:\x00-\x1f]")


class InvalidName(ValueError):
    pass


def check_name(kind: str, name: object) -> str:
    """Return ``name`` stripped, or raise InvalidName saying what is wrong with it.

    A name is a plain file or folder name: no path separators, no ``..``, no
    control characters, not hidden. This keeps names from the UI and the API
    inside the folders we own.
    """
    if not isinstance(name, str) or not name.strip():
        raise InvalidName(f"{kind} name must not be empty")
    name = name.strip()
    if _BAD.search(name) or name in (".", "..") or name.startswith("."):
        raise InvalidName(f"{kind} name {name!r} must be a plain name, without path characters "
                          "(/ \\ : or a leading dot)")
    if len(name) > MAX_NAME_LENGTH:
        raise InvalidName(f"{kind} name is too long ({len(name)} characters; at most {MAX_NAME_LENGTH})")
    return name
