"""Tool files: ``<user data>/tools/*.py`` in text-generation-webui's format, each with a ``tool`` dict (OpenAI's
function format) and an ``execute(arguments)`` function returning a string or anything JSON can write.

Every import of a tool file and every call runs in a new Python process (webui/tools/worker.py), not in the
server. That costs a process start per call (tens of milliseconds, next to seconds of generation), and a tool
keeps no state between calls, but it buys what a thread cannot: a time limit that really stops the tool
(the process group is killed; a thread would run on for ever), a tool that crashes, exits or leaks memory
takes only its own process with it, and the server never imports code from the folder. A file that hangs on
import is caught the same way when the folder is read.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from webui.tools.spec import (EMPTY_PARAMETERS, ToolProblem, ToolResult, ToolSpec, failed, spec_problem,
                              truncate)

WORKER = Path(__file__).with_name("worker.py")
IMPORTS_AT_ONCE = 8


@dataclass(frozen=True)
class _Stamp:
    mtime_ns: int
    size: int


class WorkerTimeout(Exception):
    pass


class WorkerDied(Exception):
    pass


class ToolFiles:
    """The tool files of one folder, read again only when a file changes (thread-safe)."""

    def __init__(self, folder: Path, *, import_timeout: float = 10.0) -> None:
        self.folder = Path(folder).absolute()
        self.import_timeout = import_timeout
        self._lock = threading.Lock()
        self._read: dict[Path, tuple[_Stamp, ToolSpec | ToolProblem]] = {}

    def scan(self) -> tuple[list[ToolSpec], list[ToolProblem]]:
        """The folder's tools, sorted by file name, and its files that give none (first file wins a name)."""
        paths = sorted(p for p in self.folder.glob("*.py") if not p.name.startswith(".") and p.is_file()) \
            if self.folder.is_dir() else []
        stamps = {p: _stamp(p) for p in paths}
        with self._lock:
            stale = [p for p in paths if p not in self._read or self._read[p][0] != stamps[p]]
            for path, entry in zip(stale, describe_files(stale, self.import_timeout)):
                self._read[path] = (stamps[path], entry)
            self._read = {p: self._read[p] for p in paths}
            entries = [self._read[p][1] for p in paths]
        specs: list[ToolSpec] = []
        problems: list[ToolProblem] = []
        taken: dict[str, str] = {}
        for entry in entries:
            if isinstance(entry, ToolProblem):
                problems.append(entry)
            elif entry.name in taken:
                problems.append(ToolProblem("file", entry.origin, f"the tool name {entry.name!r} is already taken by "
                                            f"{taken[entry.name]}; rename the function in one of the files"))
            else:
                taken[entry.name] = entry.origin
                specs.append(entry)
        return specs, problems


def describe_files(paths: list[Path], timeout: float) -> list[ToolSpec | ToolProblem]:
    """Each file's spec, or what is wrong with it; the files are imported side by side (a few at a time), each
    in its process, each batch within ``timeout`` seconds."""
    entries: list[ToolSpec | ToolProblem] = []
    for first in range(0, len(paths), IMPORTS_AT_ONCE):
        entries += _describe_batch(paths[first:first + IMPORTS_AT_ONCE], timeout)
    return entries


def _describe_batch(paths: list[Path], timeout: float) -> list[ToolSpec | ToolProblem]:
    started = [(path, _start({"op": "describe", "path": str(path)})) for path in paths]
    deadline = time.monotonic() + timeout
    entries: list[ToolSpec | ToolProblem] = []
    for path, process in started:
        try:
            reply = _finish(process, max(0.1, deadline - time.monotonic()))
        except WorkerTimeout:
            entries.append(ToolProblem("file", str(path), f"importing it took longer than {timeout:g} s, so it "
                                       "was stopped; it is tried again when the file changes"))
            continue
        except WorkerDied as e:
            entries.append(ToolProblem("file", str(path), f"importing it failed: {e}"))
            continue
        entries.append(_entry(path, reply))
    return entries


def _entry(path: Path, reply: dict[str, Any]) -> ToolSpec | ToolProblem:
    if not reply["ok"]:
        return ToolProblem("file", str(path), f"it cannot be imported: {reply['error']}"
                           if reply["stage"] == "import" else reply["error"])
    if not reply["has_tool"]:
        return ToolProblem("file", str(path), 'it has no `tool` dict; add tool = {"type": "function", '
                           '"function": {"name": ..., "description": ..., "parameters": {...}}}')
    problem = spec_problem(reply["tool"])
    if problem:
        return ToolProblem("file", str(path), problem)
    if not reply["has_execute"]:
        return ToolProblem("file", str(path), "it has no execute(arguments) function to run the tool")
    function = reply["tool"]["function"]
    return ToolSpec(function["name"], function.get("description", ""),
                    function.get("parameters", EMPTY_PARAMETERS), kind="file", origin=str(path))


def call_file_tool(spec: ToolSpec, arguments: dict[str, Any], timeout: float, max_chars: int) -> ToolResult:
    """Run the tool file's execute(arguments) in a process of its own, stopped after ``timeout`` seconds."""
    start = time.monotonic()
    request = {"op": "call", "path": spec.origin, "arguments": arguments, "max_chars": max_chars}
    try:
        reply = _finish(_start(request), timeout)
    except WorkerTimeout:
        return failed(spec.name, "timeout", f"the tool {spec.name!r} did not finish within {timeout:g} s and was "
                      "stopped", time.monotonic() - start)
    except WorkerDied as e:
        return failed(spec.name, "crashed", f"the tool {spec.name!r} crashed: {e}", time.monotonic() - start)
    seconds = time.monotonic() - start
    if not reply["ok"]:
        where = "importing its file" if reply["stage"] == "import" else "running it"
        return failed(spec.name, "failed", f"the tool {spec.name!r} failed while {where}: {reply['error']}",
                      seconds)
    text, cut = truncate(reply["text"], max_chars, reply["length"])
    return ToolResult(spec.name, text, None, seconds, cut)


@dataclass
class _Worker:
    process: subprocess.Popen[bytes]
    request: bytes


def _start(request: dict[str, Any]) -> _Worker:
    process = subprocess.Popen([sys.executable, str(WORKER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               start_new_session=True)  # a group of its own: a timeout stops its children too
    return _Worker(process, json.dumps(request).encode("utf-8"))


def _finish(worker: _Worker, timeout: float) -> dict[str, Any]:
    """The worker's reply; the worker and everything it started is killed when ``timeout`` runs out."""
    process = worker.process
    try:
        out, _ = process.communicate(worker.request, timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(process)
        try:
            process.communicate(timeout=5)
        except subprocess.TimeoutExpired:  # a child that left the group still holds the pipe: stop waiting
            process.stdout.close()  # type: ignore[union-attr]
            process.wait()
        raise WorkerTimeout() from None
    if not out:
        code = process.returncode
        how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
        raise WorkerDied(f"its process {how} without an answer (the server's log has its output)")
    return json.loads(out.decode("utf-8"))


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    if hasattr(os, "killpg"):
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:  # it ended on its own in the meantime
            pass
    else:
        process.kill()


def _stamp(path: Path) -> _Stamp:
    stat = path.stat()
    return _Stamp(stat.st_mtime_ns, stat.st_size)
