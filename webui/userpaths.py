"""One rule for the files a user names (#43): on a server, a path that comes from a user (a promptfoo suite's
``file://`` paths, an image path, a name typed in the UI) is opened only when it lies, symlinks resolved, inside a
folder that user owns (what they uploaded) or the operator named; anything else is refused, naming the path and
the folder it had to be in. Readers that take a path from a user call :func:`inside` before they open it."""

from __future__ import annotations

from pathlib import Path


class PathRefused(ValueError):
    """A path a user gave that lies outside the folder it must be in (``outside``), or that cannot be resolved at
    all (a NUL byte, a symlink loop)."""

    def __init__(self, message: str, outside: bool = True) -> None:
        super().__init__(message)
        self.outside = outside


def inside(folder: Path, given: str | Path, rule: str) -> Path:
    """``given`` (relative to ``folder``, or absolute) resolved, symlinks included; PathRefused, naming the path
    and ``rule`` (what ``folder`` is: "the files uploaded with the suite"), unless it lies inside ``folder``."""
    try:
        root = folder.resolve()
        path = (root / Path(given)).resolve()
    except (OSError, ValueError, RuntimeError) as exc:  # a NUL byte, a symlink loop
        raise PathRefused(f"'{given}' is not a usable path ({exc})", outside=False) from None
    if not path.is_relative_to(root):
        raise PathRefused(f"'{given}' lies outside {rule}" + (" (a symlink that leads out of it)"
                                                             if _through_symlink(root, Path(given)) else ""))
    return path


def _through_symlink(root: Path, given: Path) -> bool:
    """Whether ``given`` stays inside ``root`` as written but a symlink on its way leads out."""
    written = root / given
    if given.is_absolute() or ".." in given.parts:
        return False
    return any(p.is_symlink() for p in [written, *written.parents] if p.is_relative_to(root))
