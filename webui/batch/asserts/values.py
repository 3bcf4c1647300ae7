"""How an assert kind's value is held, read and written: one :class:`ValueForm` per shape of value.

A text, a regular expression, a number, a list of texts, an optional JSON
schema, a length in characters or tokens, a script (Python or JavaScript), one or more reference
texts, JSON a kind validates, a word count or range, or no value: each form checks the
value when an assert is made, reads it from the compact ``kind:value`` text and
from the dict form, and writes it back in both, so the two forms round-trip.
Error messages name the kind as written and its example value.
"""

from __future__ import annotations

import json
import math
import re
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Callable, Mapping

import jsonschema
import regex

from webui.batch.asserts.errors import BatchInputError
from webui.batch.asserts.js import check_javascript
from webui.batch.asserts.js_regex import js_regex_problem
from webui.batch.asserts.python import check_python

if TYPE_CHECKING:
    from webui.batch.asserts.types import AssertData, KindData

LENGTH_UNITS = {"chars": "chars", "char": "chars", "characters": "chars", "character": "chars",
                "tokens": "tokens", "token": "tokens"}
EXCERPT = 60


class ValueForm:
    """How a kind's value is held, read and written. This base is the text form (``contains:Paris``): a
    non-empty text; in the dict form, ``value``, where JSON that is not text becomes JSON text."""

    name = "text"
    options: frozenset[str] = frozenset()
    """The ``Assert.options`` keys it takes."""
    keys: tuple[str, ...] = ()
    """The dict form's keys it reads besides type, value, weight and threshold."""

    def hold(self, kind: KindData, value: Any, options: Mapping[str, Any]) -> tuple[Any, Mapping[str, Any]]:
        """The value and options as an Assert holds them; BatchInputError when they are not valid."""
        if not isinstance(value, str) or value == "":
            raise BatchInputError(f"{kind.name} needs a non-empty text value, e.g. {kind.name}:{kind.example}; "
                                  f"got {value!r}")
        return value, options

    def read(self, kind: KindData, text: str) -> tuple[Any, dict[str, Any]]:
        """(value, options) from the text after ``kind:`` (spaces around it stripped)."""
        return _needed(kind, text), {}

    def read_dict(self, kind: KindData, value: Any, given: Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
        """(value, options) from the dict form: ``value`` is its schema or value key, ``given`` the whole dict."""
        value = _needed_in_dict(kind, value)
        return (value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)), {}

    def write(self, item: AssertData) -> str | None:
        """The value as written after ``kind:`` (None: the kind alone)."""
        return _one_line(str(item.value))

    def write_dict(self, item: AssertData) -> dict[str, Any]:
        """The dict form's keys besides type, weight and threshold."""
        return {"value": item.value}


class PatternValue(ValueForm):
    """A regular expression, compiled when the assert is made."""

    name = "pattern"

    def hold(self, kind: KindData, value: Any, options: Mapping[str, Any]) -> tuple[Any, Mapping[str, Any]]:
        value, options = super().hold(kind, value, options)
        compiled(value)
        return value, options


class JsPatternValue(ValueForm):
    """A JavaScript regular expression (promptfoo's regex), checked with ``new RegExp`` when the assert is made."""

    name = "JavaScript pattern"

    def hold(self, kind: KindData, value: Any, options: Mapping[str, Any]) -> tuple[Any, Mapping[str, Any]]:
        value, options = super().hold(kind, value, options)
        why = js_regex_problem(value)
        if why:
            raise BatchInputError(f"regex:{value}: not a JavaScript regular expression, as promptfoo reads regex "
                                  f"values ({why})")
        return value, options


class EqualsValue(ValueForm):
    """A text, or an object or list (the dict form's JSON value), held as JSON text with ``options["json"]``:
    then the output is compared as parsed JSON."""

    name = "text or JSON"
    options = frozenset({"json"})

    def hold(self, kind: KindData, value: Any, options: Mapping[str, Any]) -> tuple[Any, Mapping[str, Any]]:
        if options.get("json"):
            try:
                json.loads(value)
            except (TypeError, ValueError):
                raise BatchInputError(f"{kind.name}: a JSON value must be JSON text, got {value!r}") from None
            return value, options
        return super().hold(kind, value, options)

    def read_dict(self, kind: KindData, value: Any, given: Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
        if isinstance(value, (dict, list)):
            return json.dumps(value, ensure_ascii=False), {"json": True}
        return super().read_dict(kind, value, given)

    def write_dict(self, item: AssertData) -> dict[str, Any]:
        return {"value": json.loads(item.value) if item.options.get("json") else item.value}


class NumberValue(ValueForm):
    """A number >= 0 of the kind's unit (``latency:5000``)."""

    name = "number"

    def hold(self, kind: KindData, value: Any, options: Mapping[str, Any]) -> tuple[Any, Mapping[str, Any]]:
        _number(kind, value)
        return value, options

    def read(self, kind: KindData, text: str) -> tuple[Any, dict[str, Any]]:
        return _number(kind, _needed(kind, text)), {}

    def read_dict(self, kind: KindData, value: Any, given: Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
        return _number(kind, _needed_in_dict(kind, value)), {}

    def write(self, item: AssertData) -> str | None:
        number = float(item.value)
        return str(int(number) if number.is_integer() else number)


class ListValue(ValueForm):
    """Non-empty texts (``contains-any:Paris,Lyon``; a JSON list in the dict form), held as a tuple."""

    name = "list"

    def hold(self, kind: KindData, value: Any, options: Mapping[str, Any]) -> tuple[Any, Mapping[str, Any]]:
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError:
                value = [value]
        if isinstance(value, tuple):
            value = list(value)
        if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
            raise BatchInputError(f"{kind.name} needs a list of non-empty texts, e.g. {kind.name}:Paris,Lyon; "
                                  f"got {value!r}")
        return tuple(value), options

    def read(self, kind: KindData, text: str) -> tuple[Any, dict[str, Any]]:
        return [v.strip() for v in _needed(kind, text).split(",")], {}

    def read_dict(self, kind: KindData, value: Any, given: Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
        return _needed_in_dict(kind, value), {}

    def write(self, item: AssertData) -> str | None:
        return _one_line(",".join(item.value))

    def write_dict(self, item: AssertData) -> dict[str, Any]:
        return {"value": list(item.value)}


class SchemaValue(ValueForm):
    """An optional JSON schema (``is-json``, ``is-json:{"type": "object"}``), held as compact JSON text."""

    name = "schema"
    keys = ("schema",)

    def hold(self, kind: KindData, value: Any, options: Mapping[str, Any]) -> tuple[Any, Mapping[str, Any]]:
        if value is None:
            return value, options
        if not isinstance(value, str):
            raise BatchInputError(f"is-json: the schema must be JSON text, got {value!r}")
        return _schema_text(value), options

    def read(self, kind: KindData, text: str) -> tuple[Any, dict[str, Any]]:
        return text or None, {}

    def read_dict(self, kind: KindData, value: Any, given: Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
        if value is None or value == "":
            return None, {}
        return (value if isinstance(value, str) else _dump_schema(value)), {}

    def write(self, item: AssertData) -> str | None:
        return None if item.value is None else str(item.value)

    def write_dict(self, item: AssertData) -> dict[str, Any]:
        return {} if item.value is None else {"schema": json.loads(str(item.value))}


class LengthValue(ValueForm):
    """A whole number of characters or tokens (``max-length:200``, ``max-length:50 tokens``)."""

    name = "length"
    options = frozenset({"unit"})
    keys = ("unit",)

    def hold(self, kind: KindData, value: Any, options: Mapping[str, Any]) -> tuple[Any, Mapping[str, Any]]:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise BatchInputError(f"max-length needs a whole number >= 0, got {value!r}")
        unit = options.get("unit", "chars")
        if unit not in ("chars", "tokens"):
            raise BatchInputError(f"max-length: unknown unit '{unit}'; use chars or tokens (e.g. max-length:50 "
                                  "tokens)")
        return value, {"unit": unit}

    def read(self, kind: KindData, text: str) -> tuple[Any, dict[str, Any]]:
        number, _, unit = text.strip().partition(" ")
        unit = unit.strip().lower()
        if not (number.isascii() and number.isdigit()):
            raise BatchInputError(f"max-length needs a whole number of characters or tokens, e.g. max-length:200 "
                                  f"or max-length:50 tokens; got '{text}'")
        if unit and unit not in LENGTH_UNITS:
            raise BatchInputError(f"max-length: unknown unit '{unit}'; use chars or tokens (e.g. max-length:50 "
                                  "tokens)")
        return int(number), ({"unit": LENGTH_UNITS[unit]} if unit else {})

    def read_dict(self, kind: KindData, value: Any, given: Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
        unit = given.get("unit")
        if isinstance(value, str):
            return self.read(kind, value if unit is None else f"{value} {unit}")
        return value, ({"unit": LENGTH_UNITS.get(str(unit).lower(), str(unit))} if unit else {})

    def write(self, item: AssertData) -> str | None:
        return f"{item.value}" + (" tokens" if item.options.get("unit") == "tokens" else "")

    def write_dict(self, item: AssertData) -> dict[str, Any]:
        return {"value": item.value, "unit": item.options.get("unit", "chars")}


class CodeValue(ValueForm):
    """A script: a Python file and function (``python:checks.py[:function]``) or inline code (``python:len(output)
    < 100``, ``javascript:output.length < 100``, ``javascript:file://checks.js``), with an optional ``timeout``
    in seconds and promptfoo's ``config`` (an object the script sees as ``context.config``)."""

    name = "code"
    options = frozenset({"timeout", "config"})
    keys = ("timeout", "config")

    def __init__(self, check: Callable[[Any, Mapping[str, Any]], None]) -> None:
        self.check = check

    def hold(self, kind: KindData, value: Any, options: Mapping[str, Any]) -> tuple[Any, Mapping[str, Any]]:
        self.check(value, options)
        return value, options

    def read_dict(self, kind: KindData, value: Any, given: Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
        value, _ = super().read_dict(kind, value, given)
        return value, {key: given[key] for key in self.keys if given.get(key) is not None}

    def write_dict(self, item: AssertData) -> dict[str, Any]:
        return {"value": item.value, **{key: item.options[key] for key in self.keys if key in item.options}}


class OptionalListValue(ListValue):
    """A list of texts or nothing (``is-xml``, ``is-xml:analysis.summary,analysis.score``), held as a tuple or
    None."""

    name = "optional list"

    def hold(self, kind: KindData, value: Any, options: Mapping[str, Any]) -> tuple[Any, Mapping[str, Any]]:
        return (None, options) if value is None else super().hold(kind, value, options)

    def read(self, kind: KindData, text: str) -> tuple[Any, dict[str, Any]]:
        return (super().read(kind, text) if text else (None, {}))

    def read_dict(self, kind: KindData, value: Any, given: Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
        """promptfoo writes the list as comma-separated text, a list, or ``{requiredElements: [...]}``."""
        if isinstance(value, Mapping):
            value = value.get("requiredElements")
        if value is None or value == "":
            return None, {}
        return ([v.strip() for v in value.split(",")] if isinstance(value, str) else value), {}

    def write(self, item: AssertData) -> str | None:
        return None if item.value is None else super().write(item)

    def write_dict(self, item: AssertData) -> dict[str, Any]:
        return {} if item.value is None else super().write_dict(item)


class NoValue(ValueForm):
    """No value: the kind alone (``is-refusal``, ``perplexity``)."""

    name = "none"

    def hold(self, kind: KindData, value: Any, options: Mapping[str, Any]) -> tuple[Any, Mapping[str, Any]]:
        if value is not None:
            raise BatchInputError(f"{kind.name} takes no value (write {kind.usage or kind.name}), got {value!r}")
        return None, options

    def read(self, kind: KindData, text: str) -> tuple[Any, dict[str, Any]]:
        return text or None, {}

    def read_dict(self, kind: KindData, value: Any, given: Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
        return (None if value == "" else value), {}

    def write(self, item: AssertData) -> str | None:
        return None

    def write_dict(self, item: AssertData) -> dict[str, Any]:
        return {}


class ReferencesValue(ValueForm):
    """One reference text (``bleu:The cat sat on the mat``) or several (a JSON list, in either form), held as
    the text or a tuple of texts."""

    name = "references"

    def hold(self, kind: KindData, value: Any, options: Mapping[str, Any]) -> tuple[Any, Mapping[str, Any]]:
        if isinstance(value, (list, tuple)) and value and all(isinstance(v, str) and v.strip() for v in value):
            return tuple(value), options
        if isinstance(value, str) and value.strip():
            return value, options
        raise BatchInputError(f"{kind.name} needs a reference text or a list of them, e.g. {kind.name}:{kind.example}"
                              f" or {{\"type\": \"{kind.name}\", \"value\": [\"one\", \"another\"]}}; got {value!r}")

    def read(self, kind: KindData, text: str) -> tuple[Any, dict[str, Any]]:
        text = _needed(kind, text)
        if text.startswith("["):
            try:
                return json.loads(text), {}
            except json.JSONDecodeError:
                pass
        return text, {}

    def read_dict(self, kind: KindData, value: Any, given: Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
        return _needed_in_dict(kind, value), {}

    def write(self, item: AssertData) -> str | None:
        return _one_line(item.value if isinstance(item.value, str) else json.dumps(list(item.value),
                                                                                  ensure_ascii=False))

    def write_dict(self, item: AssertData) -> dict[str, Any]:
        return {"value": item.value if isinstance(item.value, str) else list(item.value)}


class JsonValue(ValueForm):
    """A JSON value that ``check`` validates (it raises BatchInputError naming the problem), held as compact JSON
    text; ``optional``: the kind alone is allowed (held as None)."""

    name = "json"

    def __init__(self, check: Callable[[str, Any], None], optional: bool) -> None:
        self.check, self.optional = check, optional

    def hold(self, kind: KindData, value: Any, options: Mapping[str, Any]) -> tuple[Any, Mapping[str, Any]]:
        if value is None and self.optional:
            return None, options
        if not isinstance(value, str):
            raise BatchInputError(f"{kind.name} needs JSON text, e.g. {kind.name}:{kind.example}; got {value!r}")
        try:
            data = json.loads(value)
        except json.JSONDecodeError as exc:
            raise BatchInputError(f"{kind.name}: the value is not valid JSON ({exc.msg} at column {exc.colno}): "
                                  f"{excerpt(value)}; e.g. {kind.name}:{kind.example}") from None
        self.check(kind.name, data)
        return json.dumps(data, ensure_ascii=False, separators=(",", ":")), options

    def read(self, kind: KindData, text: str) -> tuple[Any, dict[str, Any]]:
        return (text or None) if self.optional else _needed(kind, text), {}

    def read_dict(self, kind: KindData, value: Any, given: Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
        if (value is None or value == "") and self.optional:
            return None, {}
        value = _needed_in_dict(kind, value)
        return (value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)), {}

    def write(self, item: AssertData) -> str | None:
        return None if item.value is None else str(item.value)

    def write_dict(self, item: AssertData) -> dict[str, Any]:
        return {} if item.value is None else {"value": json.loads(str(item.value))}


class WordCountValue(NumberValue):
    """An exact number of words (``word-count:12``) or a range, both ends included (``word-count:5-20``, at
    least ``5-``, at most ``-20``; ``{"min": 5, "max": 20}`` in the dict form), held as a number or a
    (min, max) tuple with None for an open end."""

    name = "word count"

    def hold(self, kind: KindData, value: Any, options: Mapping[str, Any]) -> tuple[Any, Mapping[str, Any]]:
        if isinstance(value, Mapping):
            extra = set(value) - {"min", "max"}
            if extra:
                raise BatchInputError(f"{kind.name}: unknown key(s) {', '.join(sorted(map(str, extra)))}; "
                                      "write {\"min\": N, \"max\": N} (either may be left out)")
            value = (value.get("min"), value.get("max"))
        if not isinstance(value, tuple):
            return super().hold(kind, value, options)
        low, high = (None if v is None else _number(kind, v) for v in value)
        if low is None and high is None:
            raise BatchInputError(f"{kind.name} needs a number of words or a min and/or a max, e.g. "
                                  f"{kind.name}:12 or {kind.name}:5-20")
        if low is not None and high is not None and low > high:
            raise BatchInputError(f"{kind.name}: the minimum ({low:g}) is more than the maximum ({high:g})")
        return (low, high), options

    def read(self, kind: KindData, text: str) -> tuple[Any, dict[str, Any]]:
        low, dash, high = _needed(kind, text).partition("-")
        if not dash:
            return super().read(kind, text)
        return (low.strip() or None, high.strip() or None), {}

    def read_dict(self, kind: KindData, value: Any, given: Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
        return (value, {}) if isinstance(value, Mapping) else super().read_dict(kind, value, given)

    def write(self, item: AssertData) -> str | None:
        if not isinstance(item.value, tuple):
            return super().write(item)
        return "-".join("" if v is None else f"{v:g}" for v in item.value)

    def write_dict(self, item: AssertData) -> dict[str, Any]:
        if not isinstance(item.value, tuple):
            return super().write_dict(item)
        return {"value": {k: v for k, v in zip(("min", "max"), item.value) if v is not None}}


TEXT, PATTERN, NUMBER, LIST, SCHEMA, LENGTH = (ValueForm(), PatternValue(), NumberValue(), ListValue(),
                                               SchemaValue(), LengthValue())
JS_PATTERN, EQUALS = JsPatternValue(), EqualsValue()
CODE, JS_CODE = CodeValue(check_python), CodeValue(check_javascript)
OPTIONAL_LIST = OptionalListValue()
NONE, REFERENCES, WORD_COUNT = NoValue(), ReferencesValue(), WordCountValue()


def _needed(kind: KindData, text: str) -> str:
    if not text:
        raise BatchInputError(f"{kind.name} needs a value, e.g. {kind.name}:{kind.example}")
    return text


def _needed_in_dict(kind: KindData, value: Any) -> Any:
    if value is None:
        raise BatchInputError(f"{kind.name} needs a \"value\", e.g. {{\"type\": \"{kind.name}\", "
                              f"\"value\": \"{kind.example}\"}}")
    return value


def _number(kind: KindData, value: Any) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if not math.isfinite(number) or number < 0:
        raise BatchInputError(f"{kind.name} needs a number of {kind.unit} >= 0, e.g. {kind.name}:{kind.example}; "
                              f"got {value!r}")
    return number


# -- helpers ------------------------------------------------------------------------------------------


def _schema_text(text: str) -> str:
    try:
        schema = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BatchInputError(f"is-json: the schema is not valid JSON ({exc.msg} at column {exc.colno}): "
                              f"{excerpt(text)}") from None
    return _dump_schema(schema)


def _dump_schema(schema: Any) -> str:
    text = json.dumps(schema, ensure_ascii=False, separators=(",", ":"))
    schema_validator(text)
    return text


def schema_problem(schema: str, data: Any) -> str:
    """Why ``data`` does not match the JSON schema (compact JSON text), with where in it; "": it matches."""
    error = jsonschema.exceptions.best_match(schema_validator(schema).iter_errors(data))
    if error is None:
        return ""
    path = getattr(error, "json_path", "$")
    return error.message + (f" (at {path})" if path != "$" else "")


def same_json(a: Any, b: Any) -> bool:
    """Whether two parsed JSON values are deeply equal as JavaScript's isDeepStrictEqual says: key order aside,
    1 and 1.0 the same number, but true never 1."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_json(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_json(x, y) for x, y in zip(a, b))
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    return type(a) is type(b) and a == b


@lru_cache(maxsize=256)
def schema_validator(text: str) -> Any:
    schema = json.loads(text)
    if not isinstance(schema, (dict, bool)):
        raise BatchInputError(f"is-json: a JSON schema must be a JSON object, got {type(schema).__name__}: "
                              f"{excerpt(text)}")
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(schema)
    except jsonschema.exceptions.SchemaError as exc:
        where = "/".join(str(p) for p in exc.path)
        raise BatchInputError(f"is-json: invalid JSON schema: {exc.message}"
                              + (f" (at {where})" if where else "")) from None
    return cls(schema)


REGEX_SECONDS = 5.0  # one match of our own regex assert (promptfoo's: webui/batch/asserts/js_regex.py)


@lru_cache(maxsize=256)
def compiled(pattern: str) -> regex.Pattern[str]:
    """Our regex assert's pattern: Python's ``re`` syntax (checked by ``re``), matched by the ``regex`` module in
    its ``re``-compatible V0 mode, which takes a time limit per match: a catastrophic pattern cannot hold a worker
    (#43)."""
    try:
        re.compile(pattern)
        return regex.compile(pattern, regex.V0)
    except (re.error, regex.error) as exc:
        raise BatchInputError(f"regex:{pattern}: invalid regular expression: {exc}") from None


def _one_line(text: str) -> str:
    return text.replace("\n", "\\n")


def excerpt(text: str, limit: int = EXCERPT) -> str:
    """``text`` on one line, cut to ``limit`` characters."""
    text = _one_line(text)
    return text if len(text) <= limit else text[:limit - 1] + "…"


