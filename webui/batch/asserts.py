"""Checks on one generated output: contains, regex, is-json (with a schema), max-length, ...

An :class:`Assert` is written in a compact ``kind:value`` form in prompt files
and the UI (``contains:Paris``, ``max-length:50 tokens``, ``is-json``) or as a
dict in JSONL (``{"type": "contains", "value": "Paris"}``). Everything is
validated when the assert is made (a bad regex or JSON schema fails before a
batch runs), and :meth:`Assert.check` says why an output failed.

Text comparisons are case-sensitive, except ``icontains``. ``equals`` and
``starts-with`` ignore whitespace around the output (models often start with a
space or end with a newline); ``regex`` uses :func:`re.search`, so anchor it
with ``^``/``$`` to match the whole output.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Mapping

import jsonschema

from webui.batch.errors import BatchInputError

TEXT_KINDS = ("contains", "icontains", "not-contains", "equals", "regex", "starts-with")
KINDS = (*TEXT_KINDS, "is-json", "max-length")
LENGTH_UNITS = {"chars": "chars", "char": "chars", "characters": "chars", "character": "chars",
                "tokens": "tokens", "token": "tokens"}
EXCERPT = 60
_EXAMPLES = ("contains:Paris, icontains:paris, not-contains:London, equals:4, regex:^\\d+$, starts-with:The, "
             "is-json, is-json:{\"type\":\"object\"}, max-length:200, max-length:50 tokens")


@dataclass(frozen=True)
class AssertResult:
    """The outcome of one assert on one output; ``detail`` says why it failed ("" when it passed)."""

    passed: bool
    detail: str = ""
    label: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "passed": self.passed, "detail": self.detail}


@dataclass(frozen=True)
class Assert:
    """One check. ``value``: the text for text kinds, the limit (int) for max-length, the
    schema as JSON text (or None) for is-json. ``options``: ``{"unit": "chars"|"tokens"}``
    for max-length. Validated on construction."""

    kind: str
    value: str | int | None = None
    options: Mapping[str, str] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise BatchInputError(f"unknown assert kind '{self.kind}'; kinds: {', '.join(KINDS)}")
        extra = set(self.options) - ({"unit"} if self.kind == "max-length" else set())
        if extra:
            raise BatchInputError(f"{self.kind}: unknown option(s) {', '.join(sorted(map(str, extra)))}")
        if self.kind in TEXT_KINDS:
            _check_text_value(self.kind, self.value)
            if self.kind == "regex":
                _compile(self.value)
        elif self.kind == "is-json":
            if self.value is not None:
                if not isinstance(self.value, str):
                    raise BatchInputError(f"is-json: the schema must be JSON text, got {self.value!r}")
                object.__setattr__(self, "value", _schema_text(self.value))
        else:
            _check_max_length(self.value, self.options)
            object.__setattr__(self, "options", {"unit": self.options.get("unit", "chars")})

    @property
    def label(self) -> str:
        return assert_label(self)

    @property
    def unit(self) -> str:
        return self.options.get("unit", "chars")

    def to_dict(self) -> dict[str, Any]:
        """The JSONL form, which :func:`parse_assert` reads back."""
        if self.kind == "max-length":
            return {"type": self.kind, "value": self.value, "unit": self.unit}
        if self.kind == "is-json":
            return {"type": self.kind} if self.value is None else {"type": self.kind, "schema": json.loads(self.value)}
        return {"type": self.kind, "value": self.value}

    def check(self, output: str, completion_tokens: int) -> AssertResult:
        """Run the check on ``output`` (``completion_tokens`` serves ``max-length ... tokens``)."""
        passed, detail = _CHECKS[self.kind](self, output, completion_tokens)
        return AssertResult(passed, "" if passed else detail, self.label)


def assert_label(item: Assert) -> str:
    """A short display form, the compact spec (``contains:Paris``, ``max-length:50 tokens``)."""
    if item.kind == "is-json":
        return "is-json" if item.value is None else f"is-json:{item.value}"
    if item.kind == "max-length":
        return f"max-length:{item.value}" + (" tokens" if item.unit == "tokens" else "")
    return f"{item.kind}:{_one_line(str(item.value))}"


def parse_assert(spec: str | Mapping[str, Any] | Assert) -> Assert:
    """An :class:`Assert` from the compact string form or the JSONL dict form.

    Raises BatchInputError naming the problem: an unknown kind (with the list of
    kinds), an invalid regex or JSON schema, a bad max-length.
    """
    if isinstance(spec, Assert):
        return spec
    if isinstance(spec, Mapping):
        return _from_dict(spec)
    if not isinstance(spec, str):
        raise BatchInputError(f"an assert must be a string like 'contains:Paris' or an object like "
                              f"{{\"type\": \"contains\", \"value\": \"Paris\"}}, got {spec!r}")
    text = spec.strip()
    kind, sep, value = text.partition(":")
    kind = kind.strip().lower()
    if kind not in KINDS:
        raise BatchInputError(f"unknown assert '{_excerpt(text)}'; write kind:value with kind one of "
                              f"{', '.join(KINDS)} (e.g. {_EXAMPLES})")
    value = value.strip()
    if kind == "is-json":
        return Assert(kind, value or None)
    if kind == "max-length":
        return _parse_max_length(value)
    if not sep or not value:
        raise BatchInputError(f"{kind} needs a value, e.g. {kind}:{_EXAMPLE_VALUES[kind]}")
    return Assert(kind, value)


def parse_asserts(specs: Any, where: str = "") -> list[Assert]:
    """A list of asserts from a list, one string or dict, or None; errors are prefixed with ``where``."""
    if specs is None or specs == "":
        return []
    items = specs if isinstance(specs, list) else [specs]
    out = []
    for item in items:
        try:
            out.append(parse_assert(item))
        except BatchInputError as exc:
            raise BatchInputError(f"{where}: {exc}" if where else str(exc)) from None
    return out


def check_all(asserts: list[Assert], output: str, completion_tokens: int) -> list[AssertResult]:
    return [a.check(output, completion_tokens) for a in asserts]


# -- parsing helpers -----------------------------------------------------------

_EXAMPLE_VALUES = {"contains": "Paris", "icontains": "paris", "not-contains": "London", "equals": "4",
                   "regex": "^\\d+$", "starts-with": "The"}
_DICT_KEYS = {"type", "kind", "value", "schema", "unit"}


def _from_dict(spec: Mapping[str, Any]) -> Assert:
    unknown = set(spec) - _DICT_KEYS
    if unknown:
        raise BatchInputError(f"assert {json.dumps(dict(spec), ensure_ascii=False)[:120]} has unknown key(s) "
                              f"{', '.join(sorted(map(str, unknown)))}; keys: type, value (schema for is-json, "
                              "unit for max-length)")
    kind = spec.get("type", spec.get("kind"))
    if not isinstance(kind, str) or kind.strip().lower() not in KINDS:
        raise BatchInputError(f"assert {json.dumps(dict(spec), ensure_ascii=False)[:120]} needs \"type\" "
                              f"set to one of {', '.join(KINDS)}")
    kind = kind.strip().lower()
    value = spec.get("schema", spec.get("value"))
    if kind == "is-json":
        if value is None or value == "":
            return Assert(kind)
        return Assert(kind, value if isinstance(value, str) else _dump_schema(value))
    if kind == "max-length":
        unit = spec.get("unit")
        if isinstance(value, str):
            return _parse_max_length(value if unit is None else f"{value} {unit}")
        return Assert(kind, value, {"unit": LENGTH_UNITS.get(str(unit).lower(), str(unit))} if unit else {})
    if value is None:
        raise BatchInputError(f"{kind} needs a \"value\", e.g. {{\"type\": \"{kind}\", "
                              f"\"value\": \"{_EXAMPLE_VALUES[kind]}\"}}")
    return Assert(kind, value if isinstance(value, str) else json.dumps(value, ensure_ascii=False))


def _parse_max_length(value: str) -> Assert:
    number, _, unit = value.strip().partition(" ")
    unit = unit.strip().lower()
    if not (number.isascii() and number.isdigit()):
        raise BatchInputError(f"max-length needs a whole number of characters or tokens, e.g. max-length:200 or "
                              f"max-length:50 tokens; got '{value}'")
    if unit and unit not in LENGTH_UNITS:
        raise BatchInputError(f"max-length: unknown unit '{unit}'; use chars or tokens (e.g. max-length:50 tokens)")
    return Assert("max-length", int(number), {"unit": LENGTH_UNITS[unit]} if unit else {})


def _check_text_value(kind: str, value: Any) -> None:
    if not isinstance(value, str) or value == "":
        raise BatchInputError(f"{kind} needs a non-empty text value, e.g. {kind}:{_EXAMPLE_VALUES[kind]}; "
                              f"got {value!r}")


def _check_max_length(value: Any, options: Mapping[str, str]) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise BatchInputError(f"max-length needs a whole number >= 0, got {value!r}")
    unit = options.get("unit", "chars")
    if unit not in ("chars", "tokens"):
        raise BatchInputError(f"max-length: unknown unit '{unit}'; use chars or tokens (e.g. max-length:50 tokens)")


def _schema_text(text: str) -> str:
    try:
        schema = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BatchInputError(f"is-json: the schema is not valid JSON ({exc.msg} at column {exc.colno}): "
                              f"{_excerpt(text)}") from None
    return _dump_schema(schema)


def _dump_schema(schema: Any) -> str:
    text = json.dumps(schema, ensure_ascii=False, separators=(",", ":"))
    _schema_validator(text)
    return text


@lru_cache(maxsize=256)
def _schema_validator(text: str) -> Any:
    schema = json.loads(text)
    if not isinstance(schema, (dict, bool)):
        raise BatchInputError(f"is-json: a JSON schema must be a JSON object, got {type(schema).__name__}: "
                              f"{_excerpt(text)}")
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(schema)
    except jsonschema.exceptions.SchemaError as exc:
        where = "/".join(str(p) for p in exc.path)
        raise BatchInputError(f"is-json: invalid JSON schema: {exc.message}"
                              + (f" (at {where})" if where else "")) from None
    return cls(schema)


@lru_cache(maxsize=256)
def _compile(pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise BatchInputError(f"regex:{pattern}: invalid regular expression: {exc}") from None


def _one_line(text: str) -> str:
    return text.replace("\n", "\\n")


def _excerpt(text: str, limit: int = EXCERPT) -> str:
    text = _one_line(text)
    return text if len(text) <= limit else text[:limit - 1] + "…"


# -- checks: each returns (passed, why it failed) -----------------------------------

def _contains(a: Assert, out: str, _: int) -> tuple[bool, str]:
    return a.value in out, f"output does not contain '{a.value}'"


def _icontains(a: Assert, out: str, _: int) -> tuple[bool, str]:
    return str(a.value).casefold() in out.casefold(), f"output does not contain '{a.value}' (ignoring case)"


def _not_contains(a: Assert, out: str, _: int) -> tuple[bool, str]:
    at = out.find(str(a.value))
    return at < 0, f"output contains '{a.value}' (at character {at})"


def _equals(a: Assert, out: str, _: int) -> tuple[bool, str]:
    return out.strip() == a.value, f"output is '{_excerpt(out.strip())}', expected '{a.value}'"


def _starts_with(a: Assert, out: str, _: int) -> tuple[bool, str]:
    start = out.lstrip()
    return start.startswith(str(a.value)), (f"output starts with '{_excerpt(start, len(str(a.value)) + 20)}', "
                                            f"expected '{a.value}'")


def _regex(a: Assert, out: str, _: int) -> tuple[bool, str]:
    return _compile(str(a.value)).search(out) is not None, f"output does not match the regex {a.value}"


def _is_json(a: Assert, out: str, _: int) -> tuple[bool, str]:
    try:
        data = json.loads(out.strip())
    except json.JSONDecodeError as exc:
        return False, f"output is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
    if a.value is None:
        return True, ""
    error = jsonschema.exceptions.best_match(_schema_validator(str(a.value)).iter_errors(data))
    if error is None:
        return True, ""
    path = getattr(error, "json_path", "$")
    return False, f"output JSON does not match the schema: {error.message}" + (f" (at {path})" if path != "$" else "")


def _check_length(a: Assert, out: str, tokens: int) -> tuple[bool, str]:
    size, what = (tokens, "tokens") if a.unit == "tokens" else (len(out), "characters")
    return size <= int(a.value), f"output has {size} {what}, more than {a.value}"  # type: ignore[arg-type]


_CHECKS = {"contains": _contains, "icontains": _icontains, "not-contains": _not_contains, "equals": _equals,
           "starts-with": _starts_with, "regex": _regex, "is-json": _is_json, "max-length": _check_length}
