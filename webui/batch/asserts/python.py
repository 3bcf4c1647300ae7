"""python asserts and transforms: a function from a file the user names, or inline code, called on each output in
a separate Python process with a time limit.

promptfoo's convention: a file's ``get_assert(output, context)`` (``get_transform`` for a transform) returns a
bool, a score in [0, 1], or ``{"pass", "score", "reason"}``; inline code is an expression (``output.lower()
.startswith('x')``) or a multi-line function body with ``return``, run as ``main(output, context)``. What the
javascript kind (webui.batch.asserts.js) shares with this one lives here too: how a script's result becomes an outcome
(:func:`script_result`) and the options both take (:func:`check_script_options`).
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence

from webui.batch.asserts.errors import BatchInputError, ScriptError

PYTHON_TIMEOUT = 10.0  # seconds a python assert may take
INLINE_NAME = "inline python"
_FILE = re.compile(r"^[^\s'\"()]+\.py(:[A-Za-z_]\w*)?$")
_INLINE_HEADER = "import json\n\ndef main(output, context):\n"


def check_script_options(kind: str, options: Mapping[str, Any]) -> None:
    """A script assert's ``timeout`` (seconds in (0, 600]) and ``config`` (promptfoo's assert config: an object,
    passed to the script as ``context.config``)."""
    timeout = options.get("timeout", PYTHON_TIMEOUT)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= 600:
        raise BatchInputError(f"{kind}: timeout must be a number of seconds in (0, 600], got {timeout!r}")
    config = options.get("config", {})
    if not isinstance(config, Mapping):
        raise BatchInputError(f"{kind}: config must be a mapping (it is the script's context.config), "
                              f"got {config!r:.80}")


def check_python(value: Any, options: Mapping[str, Any]) -> None:
    """A python assert's file and function, or its inline code, and its options, checked before a batch runs."""
    if not isinstance(value, str) or not value.strip():
        raise BatchInputError("python needs a file or code, e.g. python:checks.py, python:checks.py:my_check or "
                              "python:len(output) < 100")
    if is_python_file(value):
        path, function = python_target(value)
        if not path.is_file():
            raise BatchInputError(f"python:{value}: there is no file {path}")
        if not function.isidentifier():
            raise BatchInputError(f"python:{value}: '{function}' is not a function name")
    else:
        try:
            compile(inline_python(value), INLINE_NAME, "exec")
        except SyntaxError as exc:
            raise BatchInputError(f"python: the inline code does not compile: {exc.msg} "
                                  f"(line {_user_line(value, exc.lineno or 0)})") from None
    check_script_options("python", options)


def is_python_file(value: str) -> bool:
    """Whether a python value names a file (``file://x.py``, ``x.py``, ``x.py:function``) rather than being code."""
    text = value.strip()
    return text.startswith("file://") or bool(_FILE.match(text))


def python_target(value: str, default: str = "get_assert") -> tuple[Path, str]:
    """(file, function) of a python file value: ``file.py`` (function ``default``) or ``file.py:function``."""
    text = value.strip().removeprefix("file://")
    head, sep, tail = text.rpartition(":")
    if sep and head.endswith(".py") and tail and "/" not in tail and "\\" not in tail:
        return Path(head).expanduser(), tail
    return Path(text).expanduser(), default


def inline_python(code: str) -> str:
    """Inline code as the module promptfoo makes of it: ``main(output, context)`` returning the expression, or,
    for several lines, with them as its body (indented by the code's own first indent, else four spaces)."""
    code = code.rstrip()
    if "\n" not in code:
        return f"{_INLINE_HEADER}    return {code.strip()}\n"
    found = re.search(r"^(?!\s*$)[ \t]+", code, re.MULTILINE)
    indent = found.group(0) if found else "    "
    return _INLINE_HEADER + "\n".join(indent + line for line in code.split("\n")) + "\n"


def _user_line(code: str, line: int) -> int:
    """The line of the user's inline code that line ``line`` of :func:`inline_python`'s module is."""
    return 1 if "\n" not in code.rstrip() else max(1, line - _INLINE_HEADER.count("\n"))


_PYTHON_RUNNER = """
import importlib.util, json, sys, types
path, name = sys.argv[1], sys.argv[2]
given = json.load(sys.stdin)
if given["code"] is None:
    spec = importlib.util.spec_from_file_location("workbench_assert", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
else:
    module = types.ModuleType("workbench_assert")
    exec(compile(given["code"], path, "exec"), module.__dict__)
result = getattr(module, name)(*given["args"])
print("\\x1eRESULT" + json.dumps(result))
"""


def call_python(value: str, args: Sequence[Any], timeout: float, default: str = "get_assert") -> tuple[str, Any]:
    """Call the function a file value names (``default`` when it names none), or run inline code, on ``args`` in
    a separate process: (the script's name, its result). ScriptError says what went wrong."""
    if is_python_file(value):
        path, function = python_target(value, default)
        name, code, cwd, where = f"{path.name}:{function}", None, path.parent, str(path)
    else:
        name, code, cwd, where, function = INLINE_NAME, inline_python(value), None, INLINE_NAME, "main"
    try:
        done = subprocess.run([sys.executable, "-c", _PYTHON_RUNNER, where, function],
                              input=json.dumps({"args": list(args), "code": code}), capture_output=True, text=True,
                              timeout=timeout, cwd=cwd if cwd is not None and cwd.is_dir() else None)
    except subprocess.TimeoutExpired:
        raise ScriptError(f"{name} took more than {timeout:g} s and was stopped") from None
    marker = done.stdout.rfind("\x1eRESULT")
    if done.returncode != 0 or marker < 0:
        last = (done.stderr.strip().splitlines() or ["it printed no result"])[-1]
        last = last if len(last) <= 200 else last[:199] + "…"
        lines = re.findall(r'File "inline python", line (\d+)', done.stderr) if code is not None else []
        at = f" (line {_user_line(value, int(lines[-1]))})" if lines else ""
        raise ScriptError(f"{name} failed: {last}{at}")
    try:
        return name, json.loads(done.stdout[marker + len("\x1eRESULT"):])
    except ValueError:
        raise ScriptError(f"{name} returned something that is not JSON") from None


def run_python(value: str, timeout: float, output: Any, context: dict[str, Any]
               ) -> tuple[bool, str, float | None, bool]:
    """Run the python assert ``value`` (a file's function or inline code) on (output, context) in a separate
    process; (passed, why, score, whether the score against the threshold decides)."""
    try:
        return script_result(*call_python(value, [output, context], timeout))
    except ScriptError as exc:
        return False, str(exc), 0.0, False


def script_result(name: str, result: Any) -> tuple[bool, str, float | None, bool]:
    """A python or javascript assert's return value: a bool, a score (held against the threshold), or {"pass",
    "score", "reason"} (its pass decides); (passed, why, score, whether the score against the threshold decides)."""
    if isinstance(result, str) and result.lower() in ("true", "false"):  # promptfoo reads these texts as bools
        result = result.lower() == "true"
    if isinstance(result, bool):
        return result, f"{name} returned {str(result).lower()}", float(result), False
    if isinstance(result, (int, float)) and math.isfinite(result):
        return True, f"{name} scored it", max(0.0, min(1.0, float(result))), True
    passed = result.get("pass", result.get("pass_")) if isinstance(result, dict) else None
    if isinstance(result, dict) and isinstance(passed, bool):
        score = result.get("score")
        score = max(0.0, min(1.0, float(score))) if isinstance(score, (int, float)) and not isinstance(
            score, bool) else float(passed)
        reason = str(result.get("reason") or f"{name} returned pass {str(passed).lower()}")
        return passed, reason, score, False
    return False, f"{name} must return true/false, a score, or {{\"pass\", \"score\", \"reason\"}}; got " \
                  f"{json.dumps(result, default=str)[:80]}", 0.0, False
