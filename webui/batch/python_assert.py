"""python asserts: a function from a file the user names, called on each output in a separate Python process
with a time limit (promptfoo's convention: ``get_assert(output, context)`` returning a bool, a score in [0, 1],
or ``{"pass", "score", "reason"}``)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any, Mapping

from webui.batch.errors import BatchInputError

PYTHON_TIMEOUT = 10.0  # seconds a python assert may take


def check_python(value: Any, options: Mapping[str, Any]) -> None:
    """A python assert's file, function and time limit, checked before a batch runs."""
    if not isinstance(value, str) or not value.strip():
        raise BatchInputError("python needs a file, e.g. python:checks.py or python:checks.py:my_check")
    path, function = python_target(value)
    if not path.is_file():
        raise BatchInputError(f"python:{value}: there is no file {path}")
    if not function.isidentifier():
        raise BatchInputError(f"python:{value}: '{function}' is not a function name")
    timeout = options.get("timeout", PYTHON_TIMEOUT)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= 600:
        raise BatchInputError(f"python: timeout must be a number of seconds in (0, 600], got {timeout!r}")


def python_target(value: str) -> tuple[Path, str]:
    """(file, function) of a python assert: ``file.py`` (function get_assert) or ``file.py:function``."""
    text = value.strip().removeprefix("file://")
    head, sep, tail = text.rpartition(":")
    if sep and head.endswith(".py") and tail and "/" not in tail and "\\" not in tail:
        return Path(head).expanduser(), tail
    return Path(text).expanduser(), "get_assert"




_PYTHON_RUNNER = """
import importlib.util, json, sys
path, name = sys.argv[1], sys.argv[2]
spec = importlib.util.spec_from_file_location("workbench_assert", path)
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
given = json.load(sys.stdin)
result = getattr(module, name)(given["output"], given["context"])
print("\\x1eRESULT" + json.dumps(result))
"""


def run_python(value: str, timeout: float, output: str, context: dict[str, Any]
               ) -> tuple[bool, str, float | None, bool]:
    """Call the function ``value`` names on (output, context) in a separate process; (passed, why, score,
    whether the score against the threshold decides)."""
    path, function = python_target(value)
    try:
        done = subprocess.run([sys.executable, "-c", _PYTHON_RUNNER, str(path), function],
                              input=json.dumps({"output": output, "context": context}), capture_output=True,
                              text=True, timeout=timeout, cwd=path.parent if path.parent.is_dir() else None)
    except subprocess.TimeoutExpired:
        return False, f"{path.name}:{function} took more than {timeout:g} s and was stopped", 0.0, False
    marker = done.stdout.rfind("\x1eRESULT")
    if done.returncode != 0 or marker < 0:
        last = (done.stderr.strip().splitlines() or ["it printed no result"])[-1]
        last = last if len(last) <= 200 else last[:199] + "…"
        return False, f"{path.name}:{function} failed: {last}", 0.0, False
    try:
        result = json.loads(done.stdout[marker + len("\x1eRESULT"):])
    except ValueError:
        return False, f"{path.name}:{function} returned something that is not JSON", 0.0, False
    return _python_result(f"{path.name}:{function}", result)


def _python_result(name: str, result: Any) -> tuple[bool, str, float | None, bool]:
    """A python assert's return value: a bool, a score (held against the threshold), or {"pass", "score",
    "reason"} (its pass decides)."""
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
