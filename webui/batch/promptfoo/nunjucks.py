"""promptfoo's Nunjucks templating for prompts: filters, ``{% if %}``, ``{% for %}``, in a sandboxed jinja2.

promptfoo renders prompts with Nunjucks, whose syntax is jinja2's for what prompts
use: ``{{ name | upper }}``, ``{{ items | join(", ") }}``, ``{{ x | default("n/a") }}``,
``{% if %}``/``{% for %}`` and comments. A template that uses any of that is
rendered here by :class:`jinja2.sandbox.SandboxedEnvironment` (no attribute
tricks reach Python internals) with :class:`jinja2.StrictUndefined`, so a missing
var is an error naming it, as for plain ``{{ name }}`` templates; Nunjucks'
``dump`` filter (JSON) and promptfoo's ``load`` (JSON text parsed) are added, and a suite's own
``nunjucksFilters`` (JavaScript files, run in the javascript asserts' sandbox: :func:`custom_filters`). Vars are
texts; one holding a JSON list or
object (a YAML list of numbers, a .json file) is that list or object here, so
loops and ``.key`` work, and printed as is it is its text.
"""

from __future__ import annotations

import contextlib
import contextvars
import ctypes
import json
import re
import threading
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

from jinja2 import StrictUndefined, TemplateError, TemplateSyntaxError, UndefinedError
from jinja2.exceptions import SecurityError, TemplateRuntimeError
from jinja2.sandbox import SandboxedEnvironment

from webui.batch.asserts.errors import BatchInputError, ScriptError
from webui.batch.asserts.js import call_javascript_file
from webui.safeload import load_json

_TAG = re.compile(r"\{%|\{#")
PLACEHOLDER = re.compile(r"\{\{(.*?)\}\}", re.DOTALL)
"""A ``{{ ... }}`` placeholder; group 1 is what it holds."""
_EXPRESSION = re.compile(r"[|()\[\].'\"+~]")
_UNDEFINED = re.compile(r"^'([^']+)' is undefined$")
RENDER_SECONDS = 5.0  # one prompt's render
MAX_TEXT = 10_000_000  # items one * may make
MAX_EXPONENT = 10_000


def is_nunjucks(template: str, variables: Mapping[str, str]) -> bool:
    """Whether ``template`` needs Nunjucks: a ``{% %}`` tag or ``{# #}`` comment, or a placeholder holding an
    expression (a filter, a call, an attribute) rather than a var's name."""
    if _TAG.search(template):
        return True
    return any(name not in variables and _EXPRESSION.search(name)
               for name in (m.group(1).strip() for m in PLACEHOLDER.finditer(template)))


_FILTERS: contextvars.ContextVar[Mapping[str, Path]] = contextvars.ContextVar("nunjucks_filters", default={})


@contextlib.contextmanager
def custom_filters(filters: Mapping[str, Path]) -> Iterator[None]:
    """promptfoo's ``nunjucksFilters`` ({name: a CommonJS .js file exporting the filter function}) available to the
    templates rendered inside: each call runs the function in the same sandbox as javascript asserts
    (:func:`webui.batch.asserts.js.call_javascript_file`)."""
    token = _FILTERS.set(dict(filters))
    try:
        yield
    finally:
        _FILTERS.reset(token)


def _js_filter(name: str, path: Path) -> Callable[..., Any]:
    def run(*args: Any) -> Any:
        try:
            _, kind, value = call_javascript_file(path, [_plain(a) for a in args])
        except ScriptError as exc:
            raise TemplateRuntimeError(f"the filter {name} ({path.name}): {exc}") from None
        if kind in ("undefined", "null"):
            return ""  # Nunjucks prints nothing for them
        return _held(value) if isinstance(value, (list, dict)) else value
    return run


def _plain(value: Any) -> Any:
    """A template value as JSON gives it to JavaScript (an undefined one as null)."""
    if isinstance(value, (str, int, float, bool, list, dict)) or value is None:
        return value
    return None if isinstance(value, StrictUndefined) else str(value)


def _environment() -> SandboxedEnvironment:
    filters = _FILTERS.get()
    if not filters:
        return _ENV
    env = _ENV.overlay()
    env.filters.update({name: _js_filter(name, path) for name, path in filters.items()})
    return env


def render_nunjucks(template: str, variables: Mapping[str, str], *, where: str = "", noun: str = "variable") -> str:
    """``template`` rendered with ``variables``; a missing var, a syntax error or a forbidden operation is a
    BatchInputError that says where."""
    prefix = f"{where}: " if where else ""
    try:
        compiled = _environment().from_string(template)
        return _within(RENDER_SECONDS, compiled.render, {name: _value(value) for name, value in variables.items()})
    except RenderTimeout:
        raise BatchInputError(f"{prefix}template: rendering took more than {RENDER_SECONDS:g} s and was stopped "
                              "(a loop over loops?); render fewer items") from None
    except RecursionError:
        raise BatchInputError(f"{prefix}template: it calls itself without end (a macro that calls itself?)") from None
    except MemoryError:
        raise BatchInputError(f"{prefix}template: rendering it needs more memory than there is") from None
    except UndefinedError as exc:
        missing = _UNDEFINED.match(str(exc.message))
        have = ", ".join(variables) or "none"
        if missing:
            raise BatchInputError(f"{prefix}the template uses {{{{{missing.group(1)}}}}}, but the row has no "
                                  f"'{missing.group(1)}' {noun}; {noun}s: {have}") from None
        said = str(exc.message).replace(f"{__name__}._JsonDict object", "JSON object") \
            .replace(f"{__name__}._JsonList object", "JSON list")
        raise BatchInputError(f"{prefix}template: {said} ({noun}s: {have})") from None
    except TemplateSyntaxError as exc:
        hint = ""
        if str(exc.message).startswith("No filter named"):
            hint = ("; a custom filter is a JavaScript file named in the suite's nunjucksFilters "
                    "({name: file://filter.js}), as promptfoo reads them")
        raise BatchInputError(f"{prefix}template line {exc.lineno}: {exc.message}{hint}") from None
    except TemplateError as exc:  # e.g. the sandbox refusing an unsafe attribute
        raise BatchInputError(f"{prefix}template: {exc.message or type(exc).__name__}") from None
    except (TypeError, ValueError) as exc:  # a filter given the wrong kind of value (int("x"), ...)
        raise BatchInputError(f"{prefix}template: {exc}") from None


def _dump(value: Any, indent: int | None = None) -> str:
    """Nunjucks' dump: the value as JSON (a var's text as a JSON string)."""
    return json.dumps(value, ensure_ascii=False, indent=indent)


class _JsonList(list):
    """A var holding a JSON list: iterable as its items, printed as the var's text."""

    text = ""

    def __str__(self) -> str:
        return self.text


class _JsonDict(dict):
    """A var holding a JSON object: its keys readable as ``.key``, printed as the var's text."""

    text = ""

    def __str__(self) -> str:
        return self.text


def _value(text: str) -> Any:
    stripped = text.strip()
    if not stripped.startswith(("[", "{")):
        return text
    try:
        data = load_json(stripped)  # a bomb is a text here: DataTooLarge is a ValueError
    except ValueError:
        return text
    return _held(data, text) if isinstance(data, (list, dict)) else text


def _held(data: Any, text: str | None = None) -> Any:
    """JSON data with its lists and objects (nested ones too) printable as their JSON text."""
    if isinstance(data, list):
        held: _JsonList | _JsonDict = _JsonList(_held(item) for item in data)
    elif isinstance(data, dict):
        held = _JsonDict({key: _held(item) for key, item in data.items()})
    else:
        return data
    held.text = json.dumps(data, ensure_ascii=False) if text is None else text
    return held


class RenderTimeout(Exception):
    """Raised inside a render that ran past its time limit."""


def _within(seconds: float, render: Callable[[dict[str, Any]], str], context: dict[str, Any]) -> str:
    """``render(context)`` in a thread of its own; past ``seconds`` RenderTimeout is raised inside it (rendering is
    Python code, which takes the exception at its next step) and here. A template is code from the suite's author:
    loops over loops could otherwise hold the worker forever (#43)."""
    result: list[str] = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            result.append(render(context))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller below, whatever it is
            failed.append(exc)

    worker = threading.Thread(target=run, name="nunjucks-render", daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive() and worker.ident is not None:
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(worker.ident), ctypes.py_object(RenderTimeout))
        worker.join()
    if failed:
        raise failed[0]
    return result[0]


class _Sandbox(SandboxedEnvironment):
    """jinja2's sandbox, with the operators that make one huge value from small ones held to a size: ``"x" * n`` and
    ``[..] * n`` to :data:`MAX_TEXT` items, ``a ** b`` to exponents up to :data:`MAX_EXPONENT` (one such step is a
    single C call that no time limit can stop)."""

    intercepted_binops = frozenset({"*", "**"})

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        if operator == "**" and isinstance(right, (int, float)) and abs(right) > MAX_EXPONENT \
                and isinstance(left, (int, float)) and abs(left) > 1:
            raise SecurityError(f"{left!r} ** {right!r}: exponents above {MAX_EXPONENT} are not computed here")
        if operator == "*":
            sized, times = (left, right) if isinstance(right, int) else (right, left)
            if isinstance(sized, (str, list, tuple)) and isinstance(times, int) and len(sized) * times > MAX_TEXT:
                raise SecurityError(f"repeating a text or list {times:,} times would make more than {MAX_TEXT:,} "
                                    "items")
        return super().call_binop(context, operator, left, right)


_ENV = _Sandbox(undefined=StrictUndefined, autoescape=False, keep_trailing_newline=True)
_ENV.filters["dump"] = _dump


def _load(value: Any) -> Any:
    """promptfoo's built-in ``load`` filter: a var's JSON text parsed (``{{ (config | load).tone }}``)."""
    if isinstance(value, (_JsonList, _JsonDict)):
        return value  # a var holding JSON is its data already
    try:
        data = load_json(str(value))
    except ValueError as exc:
        raise TemplateRuntimeError(f"load: {str(value)[:60]!r} is not JSON ({exc})") from None
    return _held(data) if isinstance(data, (list, dict)) else data


_ENV.filters["load"] = _load
