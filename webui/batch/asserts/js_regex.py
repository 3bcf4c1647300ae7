"""promptfoo's regex asserts: JavaScript's ``RegExp``, exactly, with a time limit.

A pattern is checked when the assert is made (:func:`js_regex_problem`: QuickJS compiles it, which cannot hang).
Matching runs in QuickJS too, but its regex engine cannot be interrupted, so a catastrophic pattern
(``^(a+)+$`` on a long non-match) would hang whoever runs it: matches run in one helper process, started on first
use and kept; one that runs past its time limit is killed (and the next match starts a fresh one), and the assert
fails saying so.
"""

from __future__ import annotations

import atexit
import json
import select
import subprocess
import sys
import threading
from typing import IO, Any

import quickjs

from webui.batch.asserts.errors import ScriptError

REGEX_TIMEOUT = 5.0  # seconds one match may take

_MATCHER = r"""
import json, sys
import quickjs
context = quickjs.Context()
for line in sys.stdin:
    pattern, text = json.loads(line)
    try:
        answer = {"match": bool(context.eval("new RegExp(%s).test(%s)" % (json.dumps(pattern), json.dumps(text))))}
    except quickjs.JSException as exc:
        answer = {"error": str(exc).splitlines()[0]}
    sys.stdout.write(json.dumps(answer) + "\n")
    sys.stdout.flush()
"""


def js_regex_problem(pattern: str) -> str:
    """Why ``pattern`` is not a JavaScript regular expression (``new RegExp(pattern)`` throws); "": it is one."""
    try:
        quickjs.Context().eval(f"new RegExp({json.dumps(pattern)}); null")
    except quickjs.JSException as exc:
        return str(exc).splitlines()[0]
    return ""


class _Matcher:
    """The helper process that runs matches, one at a time."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.process: subprocess.Popen[str] | None = None
        atexit.register(self.stop)

    def test(self, pattern: str, text: str, timeout: float) -> bool:
        with self.lock:
            process = self._started()
            stdin, stdout = _pipe(process.stdin), _pipe(process.stdout)
            try:
                stdin.write(json.dumps([pattern, text]) + "\n")
                stdin.flush()
                ready = select.select([stdout], [], [], timeout)[0]
            except (BrokenPipeError, ValueError):
                ready = []
            line = stdout.readline() if ready else ""
            if not line:
                self.stop()
                raise ScriptError(f"regex {pattern} took more than {timeout:g} s on this output and was stopped"
                                  if not ready else f"regex {pattern}: the matcher process ended")
        answer = json.loads(line)
        if "error" in answer:
            raise ScriptError(f"regex {pattern}: {answer['error']}")
        return bool(answer["match"])

    def _started(self) -> subprocess.Popen[str]:
        if self.process is None or self.process.poll() is not None:
            self.process = subprocess.Popen([sys.executable, "-c", _MATCHER], stdin=subprocess.PIPE,
                                            stdout=subprocess.PIPE, text=True, encoding="utf-8", bufsize=1)
        return self.process

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()


def _pipe(stream: IO[Any] | None) -> IO[Any]:
    assert stream is not None
    return stream


_MATCHER_PROCESS = _Matcher()


def js_regex_test(pattern: str, text: str, timeout: float = REGEX_TIMEOUT) -> bool:
    """``new RegExp(pattern).test(text)`` with JavaScript's semantics exactly (``$`` only at the very end, ``\\d``
    only 0-9, ``(?<name>...)`` groups); ScriptError for a pattern JavaScript refuses or a match that runs past
    ``timeout`` seconds."""
    return _MATCHER_PROCESS.test(pattern, text, timeout)
