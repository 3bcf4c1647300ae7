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

Every assert has a score in [0, 1] (1 or 0 for yes/no checks; ``similar`` and
``python`` may give any score), a ``weight`` (default 1) and, for scored kinds,
a ``threshold`` the score must reach. ``not-`` before any kind inverts it (its
score becomes 1 - score). A row's score is the weighted mean of its asserts'.

``similar:<reference>`` compares the output with a reference by the cosine of
their character-trigram counts (case and runs of spaces ignored): no model and
no download, good at "says the same words", blind to paraphrase (default
threshold 0.75). ``python:<file.py>[:function]`` calls ``function(output,
context)`` (default ``get_assert``, as promptfoo names it) in a separate Python
process with a time limit; it returns a bool, a score, or ``{"pass", "score",
"reason"}``. ``latency:<ms>``, ``ttft:<ms>`` and ``tokens-per-second:<n>`` check
the row's timing. ``llm-rubric:<rubric>`` is judged by a model (the batch runner
asks it, see webui.batch.judge); the verdict and its reason are the result.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any, Mapping

import jsonschema

from webui.batch.errors import BatchInputError
from webui.batch.python_assert import PYTHON_TIMEOUT, check_python, run_python

TEXT_KINDS = ("contains", "icontains", "not-contains", "equals", "regex", "starts-with", "similar", "llm-rubric")
NUMBER_KINDS = ("latency", "ttft", "tokens-per-second")  # a number: milliseconds, or tokens per second
LIST_KINDS = ("contains-any", "contains-all", "icontains-any", "icontains-all")  # a list of texts
KINDS = (*TEXT_KINDS, *LIST_KINDS, "is-json", "max-length", "python", *NUMBER_KINDS)
SCORED_KINDS = ("similar", "python", "llm-rubric")  # may give a score in [0, 1], held against a threshold
DEFAULT_THRESHOLD = {"similar": 0.75, "python": 0.5}
LENGTH_UNITS = {"chars": "chars", "char": "chars", "characters": "chars", "character": "chars",
                "tokens": "tokens", "token": "tokens"}
EXCERPT = 60
_EXAMPLES = ("contains:Paris, icontains:paris, not-contains:London, equals:4, regex:^\\d+$, starts-with:The, "
             "is-json, is-json:{\"type\":\"object\"}, max-length:200, max-length:50 tokens, "
             "similar:The capital is Paris, python:checks.py, latency:5000, ttft:500, tokens-per-second:5, "
             "not-regex:^\\s*$")


@dataclass(frozen=True)
class AssertResult:
    """The outcome of one assert on one output; ``detail`` says why it failed ("" when it passed; a scored
    kind says its score either way)."""

    passed: bool
    detail: str = ""
    label: str = ""
    score: float | None = None
    """In [0, 1] for kinds that score; None: 1 if passed else 0."""
    weight: float = 1.0

    @property
    def value(self) -> float:
        return self.score if self.score is not None else float(self.passed)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"label": self.label, "passed": self.passed, "detail": self.detail}
        if self.score is not None:
            out["score"] = self.score
        if self.weight != 1.0:
            out["weight"] = self.weight
        return out


@dataclass(frozen=True)
class Observed:
    """What an assert looks at: the output, and how it was made."""

    output: str
    completion_tokens: int = 0
    ttft: float | None = None  # seconds
    tokens_per_second: float | None = None
    prompt: str = ""
    judged: Mapping[str, "Verdict"] = field(default_factory=dict)
    """llm-rubric verdicts by rubric: what the judge model said of this output."""


@dataclass(frozen=True)
class Verdict:
    """A judge model's verdict on one output against one rubric."""

    passed: bool
    score: float
    reason: str


def row_score(results: list[AssertResult]) -> float | None:
    """The weighted mean of the asserts' scores (None without asserts, or with no weight at all)."""
    total = sum(r.weight for r in results)
    return sum(r.value * r.weight for r in results) / total if results and total > 0 else None


@dataclass(frozen=True)
class Assert:
    """One check. ``value``: the text for text kinds, the limit (int) for max-length, the
    schema as JSON text (or None) for is-json. ``options``: ``{"unit": "chars"|"tokens"}``
    for max-length. Validated on construction."""

    kind: str
    value: str | int | float | None = None
    options: Mapping[str, Any] = field(default_factory=dict, hash=False)
    negate: bool = False
    weight: float = 1.0
    threshold: float | None = None
    """For scored kinds: the score that passes (None: the kind's default)."""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise BatchInputError(f"unknown assert kind '{self.kind}'; kinds: {', '.join(KINDS)}")
        allowed = {"max-length": {"unit"}, "python": {"timeout"}}.get(self.kind, set())
        extra = set(self.options) - allowed
        if extra:
            raise BatchInputError(f"{self.kind}: unknown option(s) {', '.join(sorted(map(str, extra)))}")
        _check_weight(self.kind, self.weight, self.threshold)
        if self.kind in TEXT_KINDS:
            _check_text_value(self.kind, self.value)
            if self.kind == "regex":
                _compile(self.value)
        elif self.kind == "is-json":
            if self.value is not None:
                if not isinstance(self.value, str):
                    raise BatchInputError(f"is-json: the schema must be JSON text, got {self.value!r}")
                object.__setattr__(self, "value", _schema_text(self.value))
        elif self.kind == "python":
            check_python(self.value, self.options)
        elif self.kind in NUMBER_KINDS:
            _number(self.kind, self.value)
        elif self.kind in LIST_KINDS:
            object.__setattr__(self, "value", _text_list(self.kind, self.value))
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
        kind = f"not-{self.kind}" if self.negate else self.kind
        if self.kind == "max-length":
            out: dict[str, Any] = {"type": kind, "value": self.value, "unit": self.unit}
        elif self.kind == "is-json":
            out = {"type": kind} if self.value is None else {"type": kind, "schema": json.loads(str(self.value))}
        elif self.kind in LIST_KINDS:
            out = {"type": kind, "value": json.loads(str(self.value))}
        else:
            out = {"type": kind, "value": self.value, **({"timeout": self.options["timeout"]}
                                                         if "timeout" in self.options else {})}
        if self.weight != 1.0:
            out["weight"] = self.weight
        if self.threshold is not None:
            out["threshold"] = self.threshold
        return out

    @property
    def pass_at(self) -> float:
        return self.threshold if self.threshold is not None else DEFAULT_THRESHOLD.get(self.kind, 0.5)

    def check(self, seen: Observed | str, completion_tokens: int = 0) -> AssertResult:
        """Run the check (an output alone, or what was observed of it: tokens, timing)."""
        if isinstance(seen, str):
            seen = Observed(seen, completion_tokens)
        passed, detail, score, by_score = _run(self, seen)
        if by_score and score is not None:
            passed = score >= self.pass_at
            detail = f"{detail} (score {score:.2f}, needs {self.pass_at:g})".strip()
        if self.negate:
            passed = not passed
            score = None if score is None else 1.0 - score
            detail = detail if passed or self.kind in SCORED_KINDS else f"the output passes {assert_label(self)[4:]}"
        shown = detail if (not passed or self.kind in SCORED_KINDS) else ""
        return AssertResult(passed, shown, self.label, score, self.weight)


def assert_label(item: Assert) -> str:
    """A short display form, the compact spec (``contains:Paris``, ``max-length:50 tokens``)."""
    kind = f"not-{item.kind}" if item.negate else item.kind
    if item.kind == "is-json":
        return kind if item.value is None else f"{kind}:{item.value}"
    if item.kind == "max-length":
        return f"{kind}:{item.value}" + (" tokens" if item.unit == "tokens" else "")
    if item.kind in LIST_KINDS:
        return f"{kind}:{_one_line(','.join(json.loads(str(item.value))))}"
    if item.kind in NUMBER_KINDS:
        number = float(item.value)  # type: ignore[arg-type]
        return f"{kind}:{int(number) if number.is_integer() else number}"
    return f"{kind}:{_one_line(str(item.value))}"


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
    kind, negate = _kind(kind)
    if kind is None:
        raise BatchInputError(f"unknown assert '{_excerpt(text)}'; write kind:value with kind one of "
                              f"{', '.join(KINDS)}, or not- before one (e.g. {_EXAMPLES})")
    value = value.strip()
    if kind == "is-json":
        return Assert(kind, value or None, negate=negate)
    if kind == "max-length":
        return replace(_parse_max_length(value), negate=negate)
    if not sep or not value:
        raise BatchInputError(f"{kind} needs a value, e.g. {kind}:{_EXAMPLE_VALUES[kind]}")
    if kind in NUMBER_KINDS:
        return Assert(kind, _number(kind, value), negate=negate)
    if kind in LIST_KINDS:
        return Assert(kind, [v.strip() for v in value.split(",")], negate=negate)
    return Assert(kind, value, negate=negate)


def _kind(given: Any) -> tuple[str | None, bool]:
    """(kind, negated) of a written kind: a kind, or not- before one; (None, False) when it is neither."""
    kind = str(given).strip().lower()
    if kind in KINDS:
        return kind, False
    if kind.startswith("not-") and kind[4:] in KINDS and kind[4:] != "not-contains":
        return kind[4:], True
    return None, False


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

_EXAMPLE_VALUES = {"contains-any": "Paris,Lyon", "contains-all": "Paris,France", "icontains-any": "paris,lyon",
                   "icontains-all": "paris,france", "contains": "Paris", "icontains": "paris", "not-contains": "London", "equals": "4",
                   "regex": "^\\d+$", "starts-with": "The", "similar": "The capital of France is Paris",
                   "python": "checks.py:get_assert", "llm-rubric": "The answer is polite and names a city", "latency": "5000", "ttft": "500", "tokens-per-second": "5"}
_DICT_KEYS = {"type", "kind", "value", "schema", "unit", "weight", "threshold", "timeout"}


def _from_dict(spec: Mapping[str, Any]) -> Assert:
    unknown = set(spec) - _DICT_KEYS
    shown = json.dumps(dict(spec), ensure_ascii=False, default=str)[:120]
    if unknown:
        raise BatchInputError(f"assert {shown} has unknown key(s) {', '.join(sorted(map(str, unknown)))}; keys: "
                              "type, value (schema for is-json, unit for max-length, timeout for python), weight, "
                              "threshold")
    kind, negate = _kind(spec.get("type", spec.get("kind")))
    if kind is None:
        raise BatchInputError(f"assert {shown} needs \"type\" set to one of {', '.join(KINDS)} (or not- before one)")
    extra = {k: spec[k] for k in ("weight", "threshold") if spec.get(k) is not None}
    value = spec.get("schema", spec.get("value"))
    if kind == "is-json":
        if value is None or value == "":
            return Assert(kind, negate=negate, **extra)
        return Assert(kind, value if isinstance(value, str) else _dump_schema(value), negate=negate, **extra)
    if kind == "max-length":
        unit = spec.get("unit")
        if isinstance(value, str):
            made = _parse_max_length(value if unit is None else f"{value} {unit}")
        else:
            made = Assert(kind, value, {"unit": LENGTH_UNITS.get(str(unit).lower(), str(unit))} if unit else {})
        return replace(made, negate=negate, **extra)
    if value is None:
        raise BatchInputError(f"{kind} needs a \"value\", e.g. {{\"type\": \"{kind}\", "
                              f"\"value\": \"{_EXAMPLE_VALUES[kind]}\"}}")
    if kind in NUMBER_KINDS:
        return Assert(kind, _number(kind, value), negate=negate, **extra)
    if kind in LIST_KINDS:
        return Assert(kind, value, negate=negate, **extra)
    options = {"timeout": spec["timeout"]} if kind == "python" and spec.get("timeout") is not None else {}
    return Assert(kind, value if isinstance(value, str) else json.dumps(value, ensure_ascii=False), options,
                  negate=negate, **extra)


def _parse_max_length(value: str) -> Assert:
    number, _, unit = value.strip().partition(" ")
    unit = unit.strip().lower()
    if not (number.isascii() and number.isdigit()):
        raise BatchInputError(f"max-length needs a whole number of characters or tokens, e.g. max-length:200 or "
                              f"max-length:50 tokens; got '{value}'")
    if unit and unit not in LENGTH_UNITS:
        raise BatchInputError(f"max-length: unknown unit '{unit}'; use chars or tokens (e.g. max-length:50 tokens)")
    return Assert("max-length", int(number), {"unit": LENGTH_UNITS[unit]} if unit else {})


def _check_weight(kind: str, weight: Any, threshold: Any) -> None:
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight) or weight < 0:
        raise BatchInputError(f"{kind}: weight must be a number >= 0, got {weight!r}")
    if threshold is not None and (isinstance(threshold, bool) or not isinstance(threshold, (int, float))
                                  or not 0 <= threshold <= 1):
        raise BatchInputError(f"{kind}: threshold must be a score between 0 and 1, got {threshold!r}")


def _number(kind: str, value: Any) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if not math.isfinite(number) or number < 0:
        unit = "tokens per second" if kind == "tokens-per-second" else "milliseconds"
        raise BatchInputError(f"{kind} needs a number of {unit} >= 0, e.g. {kind}:{_EXAMPLE_VALUES[kind]}; "
                              f"got {value!r}")
    return number


def _text_list(kind: str, value: Any) -> str:
    """A list kind's texts (a list, or JSON text of one) as compact JSON text."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            value = [value]
    if isinstance(value, tuple):
        value = list(value)
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
        raise BatchInputError(f"{kind} needs a list of non-empty texts, e.g. {kind}:Paris,Lyon; got {value!r}")
    return json.dumps(value, ensure_ascii=False)


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


# -- checks: each returns (passed, why it failed); _run adds scored kinds' scores ---------

def _run(a: Assert, seen: Observed) -> tuple[bool, str, float | None, bool]:
    """(passed, why, score, whether the score against the threshold decides)."""
    if a.kind == "similar":
        score = similarity(seen.output, str(a.value))
        return True, "similarity to the reference", score, True
    if a.kind == "python":
        context = {"prompt": seen.prompt, "completion_tokens": seen.completion_tokens, "ttft": seen.ttft,
                   "tokens_per_second": seen.tokens_per_second}
        return run_python(str(a.value), float(a.options.get("timeout", PYTHON_TIMEOUT)), seen.output, context)
    if a.kind == "llm-rubric":
        verdict = seen.judged.get(str(a.value))
        if verdict is None:
            return False, "no judge verdict (the judge did not run or its answer could not be read)", 0.0, False
        return verdict.passed, f"judge: {verdict.reason}", verdict.score, a.threshold is not None
    if a.kind in NUMBER_KINDS:
        return (*_timing(a, seen), None, False)
    return (*_CHECKS[a.kind](a, seen.output, seen.completion_tokens), None, False)


def _trigrams(text: str) -> Counter:
    text = " ".join(text.casefold().split())
    return Counter(text[i:i + 3] for i in range(max(1, len(text) - 2)))


def similarity(a: str, b: str) -> float:
    """Cosine similarity of two texts' character-trigram counts (case and runs of spaces ignored), in [0, 1]."""
    ca, cb = _trigrams(a), _trigrams(b)
    dot = sum(n * cb[g] for g, n in ca.items())
    norm = math.sqrt(sum(n * n for n in ca.values()) * sum(n * n for n in cb.values()))
    return dot / norm if norm else float(a.strip() == b.strip())


def _timing(a: Assert, seen: Observed) -> tuple[bool, str]:
    limit = float(a.value)  # type: ignore[arg-type]
    if seen.ttft is None or (a.kind != "ttft" and not seen.tokens_per_second):
        return False, f"{a.kind}: this row has no timing recorded"
    if a.kind == "ttft":
        ms = seen.ttft * 1000
        return ms <= limit, f"first token after {ms:.0f} ms, more than {limit:g} ms"
    if a.kind == "tokens-per-second":
        tps = float(seen.tokens_per_second or 0)
        return tps >= limit, f"{tps:.1f} tokens/s, fewer than {limit:g}"
    ms = (seen.ttft + seen.completion_tokens / float(seen.tokens_per_second or 1)) * 1000
    return ms <= limit, f"took {ms:.0f} ms, more than {limit:g} ms"


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


def _contains_list(a: Assert, out: str, _: int) -> tuple[bool, str]:
    texts = json.loads(str(a.value))
    fold = a.kind.startswith("i")
    found = [t for t in texts if (t.casefold() in out.casefold() if fold else t in out)]
    if a.kind.endswith("-any"):
        return bool(found), f"output contains none of {', '.join(repr(t) for t in texts)}"
    missing = [t for t in texts if t not in found]
    return not missing, f"output lacks {', '.join(repr(t) for t in missing)}"


_CHECKS = {"contains-any": _contains_list, "contains-all": _contains_list, "icontains-any": _contains_list,
           "icontains-all": _contains_list, "contains": _contains, "icontains": _icontains, "not-contains": _not_contains, "equals": _equals,
           "starts-with": _starts_with, "regex": _regex, "is-json": _is_json, "max-length": _check_length}
