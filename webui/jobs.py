"""Long commands run for the UI in a subprocess (installing a backend, quantizing a model), one at a time.

The command's output is kept (its last lines) so the page can show progress while
it runs; the workbench keeps serving meanwhile.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass

from webui import bootstrap

TAIL_LINES = 40


class JobBusy(RuntimeError):
    pass


@dataclass
class JobUpdate:
    log: str  # the command's last lines
    elapsed: float
    returncode: int | None  # None while it runs

    @property
    def ok(self) -> bool:
        return self.returncode == 0


def launch_command(*args: str) -> list[str]:
    """``python launch.py ARGS`` with the venv's Python (what a user would type)."""
    python = str(bootstrap.venv_python()) if bootstrap.venv_python().exists() else sys.executable
    return [python, str(bootstrap.ROOT / "launch.py"), *args]


class JobRunner:
    """Runs one command at a time; ``run`` yields the output's tail every ``every`` seconds until it ends."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.current: str | None = None
        self._proc: subprocess.Popen | None = None

    def stop(self) -> None:
        """End the running command (the workbench is shutting down); nothing is left running unseen."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()

    def run(self, argv: list[str], every: float = 1.0, env: dict[str, str] | None = None) -> Iterator[JobUpdate]:
        if not self._lock.acquire(blocking=False):
            raise JobBusy(f"another job is running ({self.current}); wait for it to finish")
        try:
            self.current = " ".join(argv[1:])
            yield from self._run(argv, every, env)
        finally:
            self.current = None
            self._lock.release()

    def _run(self, argv: list[str], every: float, env: dict[str, str] | None) -> Iterator[JobUpdate]:
        lines: deque[str] = deque(maxlen=TAIL_LINES)
        start = time.monotonic()
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
                                cwd=bootstrap.ROOT, env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
                                errors="replace")
        self._proc = proc
        output = proc.stdout
        assert output is not None, "stdout=PIPE"
        reader = threading.Thread(target=lambda: lines.extend(output), daemon=True)
        reader.start()
        try:
            while proc.poll() is None:
                yield JobUpdate("".join(lines), time.monotonic() - start, None)
                time.sleep(every)
        except GeneratorExit:  # the page went away: stop the command rather than leave it running unseen
            proc.terminate()
            proc.wait(timeout=30)
            raise
        reader.join(timeout=5)
        self._proc = None
        yield JobUpdate("".join(lines), time.monotonic() - start, proc.returncode)
