"""Where a promptfoo suite's ``file://`` paths lead (prompts, tests, vars, asserts, transforms, tools,
rubricPrompt; globs too). Read from the command line (``launch.py batch``), a path means what it means to
promptfoo: relative to the config's folder, or absolute. Uploaded to a server that listens beyond this machine,
a suite reads only the files uploaded with it: every path, each match of a glob and the target of each symlink
must lie inside its upload folder, by the one rule in webui/userpaths.py."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from webui.batch.asserts.errors import BatchInputError
from webui.userpaths import PathRefused, inside

UPLOAD_RULE = ("the files uploaded with the suite: on this server a suite reads only those (choose the config and "
               "the files it reads together in the upload dialog, and name them relative to the config)")

_GLOB = "*?["


@dataclass(frozen=True)
class SuiteFiles:
    """A suite's folder (``file://`` paths are relative to it), and whether a path must stay inside it."""

    folder: Path
    confined: bool = False

    def path(self, name: str | Path) -> Path:
        """The file ``name`` names; in a confined suite BatchInputError unless it lies inside the folder."""
        if not self.confined:
            return self.folder / Path(name).expanduser()
        try:
            return inside(self.folder, name, UPLOAD_RULE)
        except PathRefused as exc:
            raise BatchInputError(f"file://{name}: {exc}") from None

    def is_file(self, name: str) -> bool:
        """Whether ``name`` is a file this suite may read."""
        try:
            return self.path(name).is_file()
        except (BatchInputError, OSError, ValueError):
            return False

    def paths(self, pattern: str) -> list[Path]:
        """Every file a glob matches, in name order, or the one path it names; in a confined suite the glob's
        fixed part and every match must lie inside the folder."""
        if not any(c in pattern for c in _GLOB):
            return [self.path(pattern)]
        parts = Path(pattern).parts
        fixed = Path(*parts[:next(i for i, p in enumerate(parts) if any(c in p for c in _GLOB))] or ["."])
        start = self.path(fixed) if self.confined else self.folder / fixed
        rest = str(Path(pattern).relative_to(fixed)) if fixed != Path(".") else pattern
        return [self.path(p) if self.confined else p for p in sorted(start.glob(rest))]

    def name_of(self, path: Path) -> str:
        """``path`` as the suite names it: relative to its folder where it lies inside."""
        for folder in (self.folder, self.folder.resolve()):
            if path.is_relative_to(folder):
                return path.relative_to(folder).as_posix()
        return str(path)
