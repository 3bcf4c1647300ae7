"""Runs a tool file in a process of its own (started by webui/tools/files.py, one process per request).

    python worker.py  < {"op": "describe", "path": "..."}
    python worker.py  < {"op": "call", "path": "...", "arguments": {...}, "max_chars": 20000}

It imports the file under a name of its own (``workbench_tool_<hash>``, never the file's name) and writes one
JSON reply to what was stdout when it started. Whatever the tool prints goes to stderr (the server's log), so
it can never garble the reply. Standard library only, and this folder is taken off sys.path first, so nothing
here can shadow a module a tool imports.
"""

import sys

del sys.path[0]  # this folder (webui/tools/): keep its module names out of the tool's imports

import hashlib  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import traceback  # noqa: E402
from types import ModuleType  # noqa: E402
from typing import Any  # noqa: E402

TRACEBACK_CHARS = 4000


def main() -> None:
    reply_fd = os.dup(1)
    os.dup2(2, 1)  # the tool's prints (Python's and C's alike) land on stderr
    request = json.loads(sys.stdin.buffer.read())
    reply = handle(request)
    with os.fdopen(reply_fd, "w", encoding="utf-8") as out:
        json.dump(reply, out, ensure_ascii=False)


def handle(request: dict) -> dict:
    try:
        module = load(request["path"])
    except BaseException as e:  # noqa: BLE001 - whatever the import raised (SystemExit too) is the reply
        return failure("import", e)
    if request["op"] == "describe":
        return describe(module)
    try:
        value = module.execute(request["arguments"])
    except BaseException as e:  # noqa: BLE001 - reported to the caller with its traceback
        return failure("execute", e)
    text = value_text(value)
    return {"ok": True, "text": text[:request["max_chars"]], "length": len(text)}


def load(path: str) -> ModuleType:
    name = "workbench_tool_" + hashlib.sha1(path.encode("utf-8")).hexdigest()[:16]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path} cannot be imported as a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and typing look a class's module up by name while it executes
    spec.loader.exec_module(module)
    return module


def describe(module: ModuleType) -> dict:
    tool = getattr(module, "tool", None)
    execute = getattr(module, "execute", None)
    try:
        json.dumps(tool)
    except (TypeError, ValueError) as e:
        return {"ok": False, "stage": "describe", "error": f"the `tool` dict cannot be written as JSON: {e}"}
    return {"ok": True, "tool": tool, "has_tool": hasattr(module, "tool"), "has_execute": callable(execute)}


def value_text(value: Any) -> str:
    """As webui.tools.spec.result_text (kept apart: this script imports nothing of ours)."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(value)


def failure(stage: str, error: BaseException) -> dict:
    if isinstance(error, SystemExit):
        message = f"the tool called exit({error.code!r})"
    else:
        message = "".join(traceback.format_exception_only(type(error), error)).strip()
    trace = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    return {"ok": False, "stage": stage, "error": message, "traceback": trace[-TRACEBACK_CHARS:]}


if __name__ == "__main__":
    main()
