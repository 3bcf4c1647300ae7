"""javascript asserts and transforms, run in an embedded QuickJS engine (the ``quickjs`` package) with promptfoo's
calling convention.

A value is inline code or a file. Inline code on one line is an expression (``output.length < 100``; one that
starts with ``const``/``let``/``var`` declarations returns its last statement), on several lines a function
body with ``return``; it is called as ``(output, context, process)``. ``file://checks.js[:functionName]`` is a
CommonJS file (``module.exports = (output, context) => ...``, or an object of functions, or ``.default``).
``context`` is what promptfoo passes: ``{prompt, vars, test, config, ...}``. An assert returns a bool, a score
or ``{pass, score, reason}`` (read by :func:`webui.batch.asserts.python.script_result`); a transform returns the
new output. A promise is awaited.

Each call gets a fresh engine with a time limit and a memory limit, and nothing to reach files, the network or
other modules (``require`` and ``import`` fail with a message saying so; ``console`` output is dropped). An
error, a timeout or running out of memory is a :class:`~webui.batch.asserts.errors.ScriptError` naming the line and the
message, which the assert reports as its failure: a script can neither crash nor hang a batch.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any, Mapping

import quickjs

from webui.batch.asserts.errors import BatchInputError, ScriptError
from webui.batch.asserts.python import PYTHON_TIMEOUT, check_script_options, script_result

JS_TIMEOUT = PYTHON_TIMEOUT  # seconds a javascript assert may take, as a python one
JS_MEMORY = 128 << 20  # bytes one call's engine may allocate
JS_STACK = 1 << 20  # bytes of JavaScript stack (deep recursion is a RangeError, not a crash)
INLINE_NAME = "inline javascript"
JS_SUFFIXES = (".js", ".cjs")

_PRELUDE = """
var console = {log() {}, info() {}, warn() {}, error() {}, debug() {}};
function require(name) {
  throw new Error("require('" + name + "') is not available: javascript here runs without modules, files or network");
}
var process = {env: {}, mainModule: {require: require}};
var __state = {done: false};
function __settle(value) {
  Promise.resolve(value).then(function (v) { __state = {done: true, value: v}; },
                              function (e) { __state = {done: true, error: e}; });
}
function __outcome() {
  if (__state.error !== undefined) {
    var e = __state.error;
    return JSON.stringify({error: String(e) + "\\n" + ((e && e.stack) || "")});
  }
  var v = __state.value;
  return JSON.stringify({type: v === null ? "null" : typeof v, value: v === undefined ? null : v});
}
function __pick(exports, name, file) {
  if (name) {
    if (exports !== null && typeof exports === "object" && Object.prototype.hasOwnProperty.call(exports, name)
        && typeof exports[name] === "function") return exports[name];
    throw new Error(file + " has no exported function '" + name + "'");
  }
  if (typeof exports === "function") return exports;
  if (exports && typeof exports.default === "function") return exports.default;
  throw new Error(file + " must export a function (module.exports = (output, context) => ...)");
}
"""
_MODULE_HEAD = "(function (module, exports, require, process) {\n"
_MODULE_TAIL = "\n;return module.exports;})"
_FUNCTION_HEAD = "(function (output, context, process) {\n"
_FUNCTION_TAIL = "\n})"


def js_target(value: str) -> tuple[Path, str] | None:
    """(file, function name or "") of a ``file://`` value (``file://checks.js:isShort``); None: inline code."""
    text = value.strip()
    if not text.startswith("file://"):
        return None
    head, sep, tail = text.removeprefix("file://").rpartition(":")
    if sep and head.lower().endswith((*JS_SUFFIXES, ".mjs")) and "/" not in tail and "\\" not in tail:
        return Path(head).expanduser(), tail
    return Path(text.removeprefix("file://")).expanduser(), ""


def check_javascript(value: Any, options: Mapping[str, Any], kind: str = "javascript") -> None:
    """A javascript value (inline code that compiles, or an existing .js file and a function name) and its
    options, checked before a batch runs."""
    if not isinstance(value, str) or not value.strip():
        raise BatchInputError(f"{kind} needs code or a file, e.g. {kind}:output.length < 100 or "
                              f"{kind}:file://checks.js:isShort")
    target = js_target(value)
    if target is None:
        _compile(function_body(value) if kind == "javascript" else transform_body(value), kind)
    else:
        path, function = target
        if path.suffix.lower() == ".mjs":
            raise BatchInputError(f"{kind}:{value}: ES modules (.mjs) are not supported; write a CommonJS .js file "
                                  "(module.exports = (output, context) => ...)")
        if path.suffix.lower() not in JS_SUFFIXES:
            raise BatchInputError(f"{kind}:{value}: a javascript file must end in .js or .cjs")
        if not path.is_file():
            raise BatchInputError(f"{kind}:{value}: there is no file {path}")
        if function and not re.fullmatch(r"[A-Za-z_$][\w$]*", function):
            raise BatchInputError(f"{kind}:{value}: '{function}' is not a function name")
        try:
            source = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise BatchInputError(f"{kind}:{value}: cannot read {path}: {exc}") from None
        _compile(source, f"{kind}:{value}", _MODULE_HEAD, _MODULE_TAIL)
    check_script_options(kind, options)


def function_body(code: str) -> str:
    """An assert's inline code as a function body, as promptfoo builds it: several lines as they are; one line
    returns its expression, or, when it starts with declarations (``const s = output.trim(); s.length > 3``), the
    expression after its last statement."""
    code = code.rstrip()
    if "\n" in code:
        return code
    line = re.sub(r";+\s*$", "", code.strip())
    if not re.match(r"(const|let|var)\s", line):
        return f"return {line}"
    for at in (i for i in range(len(line) - 1, -1, -1) if line[i] == ";"):  # the last ; that ends a statement
        candidate = f"{line[:at + 1]} return {line[at + 1:].strip()}"
        if line[at + 1:].strip() and _compiles(line[:at + 1]) and _compiles(candidate):
            return candidate
    return line


def transform_body(code: str) -> str:
    """A transform's inline code as a function body, as promptfoo builds it: one line returns its expression."""
    code = code.rstrip()
    return code if "\n" in code else f"return {code.strip()}"


def _compiles(body: str) -> bool:
    try:
        _compile(body, "javascript")
    except BatchInputError:
        return False
    return True


def _compile(body: str, kind: str, head: str = _FUNCTION_HEAD, tail: str = _FUNCTION_TAIL) -> None:
    """Compile (not run) ``body`` wrapped in ``head`` and ``tail``; BatchInputError names the line when it does not
    compile."""
    context = _engine(JS_TIMEOUT)
    try:
        context.eval(head + body + tail)
    except quickjs.JSException as exc:
        raise BatchInputError(f"{kind}: the code does not compile: {_described(str(exc))}") from None


def _engine(timeout: float) -> Any:
    context = quickjs.Context()
    context.set_time_limit(timeout)
    context.set_memory_limit(JS_MEMORY)
    context.set_max_stack_size(JS_STACK)
    return context


def call_javascript(value: str, output: Any, context: Mapping[str, Any], timeout: float = JS_TIMEOUT,
                    transform: bool = False) -> tuple[str, str, Any]:
    """Run a javascript value (inline code or ``file://x.js[:function]``) on (output, context) in a fresh engine:
    (its name, the JavaScript type of what it returned, the value as JSON gives it). ScriptError on an error, a
    timeout or running out of memory."""
    target = js_target(value)
    if target is None:
        name, source = INLINE_NAME, _FUNCTION_HEAD + (transform_body if transform else function_body)(value) \
            + _FUNCTION_TAIL
        pick = "var __fn = __user;"
    else:
        path, function = target
        name = f"{path.name}:{function}" if function else path.name
        try:
            source = _MODULE_HEAD + path.read_text(encoding="utf-8") + _MODULE_TAIL
        except (OSError, UnicodeDecodeError) as exc:
            raise ScriptError(f"{name}: cannot read {path}: {exc}") from None
        pick = _module_pick(path, function)
    return _run(name, source, pick, [output, dict(context)], timeout, with_process=True)


def call_javascript_file(path: Path, args: list[Any], timeout: float = JS_TIMEOUT) -> tuple[str, str, Any]:
    """Call the function a CommonJS file exports (``module.exports = function (str) {...}``, as promptfoo's custom
    Nunjucks filters are written) with ``args`` in a fresh engine, as :func:`call_javascript` runs an assert:
    (its name, the JavaScript type of what it returned, the value as JSON gives it)."""
    try:
        source = _MODULE_HEAD + path.read_text(encoding="utf-8") + _MODULE_TAIL
    except (OSError, UnicodeDecodeError) as exc:
        raise ScriptError(f"{path.name}: cannot read {path}: {exc}") from None
    return _run(path.name, source, _module_pick(path, ""), list(args), timeout, with_process=False)


def _module_pick(path: Path, function: str) -> str:
    return (f"var __module = {{exports: {{}}}};"
            f"var __fn = __pick(__user(__module, __module.exports, require, process), "
            f"{json.dumps(function)}, {json.dumps(path.name)});")


def _run(name: str, source: str, pick: str, args: list[Any], timeout: float, with_process: bool
         ) -> tuple[str, str, Any]:
    """Evaluate ``source`` as ``__user``, pick ``__fn`` with ``pick`` and call it with ``args`` (and ``process``
    after them where ``with_process``), awaiting a promise; ScriptError on an error, a timeout or running out of
    memory."""
    engine = _engine(timeout)
    deadline = time.monotonic() + timeout
    try:
        engine.eval(_PRELUDE)
        engine.set("__args", json.dumps(args, ensure_ascii=False))
        engine.eval("var __user = " + source)
        engine.eval(pick + "var __given = JSON.parse(__args);"
                    + ("__given.push(process);" if with_process else "")
                    + "__settle(__fn.apply(null, __given));")
        while engine.eval("!__state.done") and time.monotonic() < deadline:
            if not engine.execute_pending_job():
                raise ScriptError(f"{name} returned a promise that never settled")
        if engine.eval("!__state.done"):
            raise ScriptError(f"{name} took more than {timeout:g} s and was stopped")
        outcome = json.loads(engine.eval("__outcome()"))
    except quickjs.StackOverflow:
        raise ScriptError(f"{name} failed: too much recursion (the stack overflowed)") from None
    except quickjs.JSException as exc:
        raise ScriptError(_failure(name, str(exc), timeout)) from None
    if "error" in outcome:
        raise ScriptError(_failure(name, outcome["error"], timeout))
    return name, outcome["type"], outcome.get("value")  # a function or a symbol has no JSON: None


def _failure(name: str, text: str, timeout: float) -> str:
    if text.startswith("InternalError: interrupted"):
        return f"{name} took more than {timeout:g} s and was stopped"
    if text.startswith("InternalError: out of memory"):
        return f"{name} ran out of memory (the limit is {JS_MEMORY >> 20} MiB) and was stopped"
    return f"{name} failed: {_described(text)}"


def _described(text: str) -> str:
    """A QuickJS error's first line, and the line of the user's code it was thrown at (the top of its stack;
    QuickJS gives none for arrow functions)."""
    lines = text.strip().splitlines() or ["an error without a message"]
    message = lines[0] if len(lines[0]) <= 200 else lines[0][:199] + "…"
    found = re.search(r"<input>:(\d+)", lines[1]) if len(lines) > 1 else None  # where it was thrown, when known
    if found is None or re.search(r"at (__settle|__pick|__outcome|require|<eval>) ", lines[1]):
        return message
    return f"{message} (line {max(1, int(found.group(1)) - 1)})"


def run_javascript(value: str, timeout: float, output: Any, context: Mapping[str, Any]
                   ) -> tuple[bool, str, float | None, bool]:
    """Run a javascript assert on (output, context); (passed, why, score, whether the score against the
    threshold decides)."""
    try:
        name, kind, result = call_javascript(value, output, context, timeout)
    except ScriptError as exc:
        return False, str(exc), 0.0, False
    if kind in ("undefined", "null"):
        return False, f"{name} returned nothing ({kind}); return true/false, a score, or {{pass, score, " \
                      f"reason}}", 0.0, False
    return script_result(name, result)
