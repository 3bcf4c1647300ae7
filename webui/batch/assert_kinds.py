"""The assert kinds: one :class:`AssertKind` each, in one table, :data:`ASSERT_KINDS`.

A kind's spec says what its value is (a
:class:`~webui.batch.assert_values.ValueForm`: a text, a pattern, a number, a
list of texts, an optional JSON schema, a length, a Python file), how it checks
an output, whether it scores (a score in [0, 1] held against a threshold) and
how promptfoo writes it. Parsing, validation, labels, the dict form, checking,
the promptfoo reader and the help of the Batch form and the CLI all read the
table, so a new kind is one entry (and its check).

``not-`` before a kind negates it (``Assert.negate``). ``not-contains`` is also
listed as a kind of its own, as people and older files write it; it is an entry
that only names ``contains`` negated (:attr:`AssertKind.negation_of`).
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, NamedTuple

import jsonschema
import yaml

from webui.batch.assert_values import (
    CODE, LENGTH, LIST, NUMBER, OPTIONAL_LIST, PATTERN, SCHEMA, TEXT, ValueForm, compiled, excerpt, schema_validator,
)
from webui.batch.errors import BatchInputError
from webui.batch.python_assert import PYTHON_TIMEOUT, run_python
from webui.batch.xml_checks import xml_inside, xml_problem

if TYPE_CHECKING:
    from webui.batch.asserts import Assert, Observed

SIMILAR_THRESHOLD = 0.75


class Outcome(NamedTuple):
    """What a kind's check says of one output: passed, why it failed, a score (None: yes/no check), and whether
    the score against the threshold decides."""

    passed: bool
    why: str
    score: float | None = None
    by_score: bool = False


# -- promptfoo's dict form: fields for parse_assert besides type and weight --------------------------------


def _promptfoo_value(item: Mapping[str, Any], base: Path) -> dict[str, Any]:
    return {"value": item.get("value"), **_promptfoo_threshold(item)}


def _promptfoo_threshold(item: Mapping[str, Any]) -> dict[str, Any]:
    return {"threshold": item["threshold"]} if item.get("threshold") is not None else {}


_QUOTED_ITEM = re.compile(r'(".*?"|[^,]+)(?=\s*,|\s*$)')
"""promptfoo's contains-any items in a text: comma-separated, a "quoted, item" kept whole."""


def _promptfoo_list(item: Mapping[str, Any], base: Path) -> dict[str, Any]:
    """A list kind's value as promptfoo reads it: a text is split on commas (contains-any keeps "quoted, items"
    whole), numbers in a list are texts."""
    value = item.get("value")
    if isinstance(value, str) and str(item.get("type")).removeprefix("not-") == "contains-any":
        value = [re.sub(r'^"|"$', "", v.strip()) for v in _QUOTED_ITEM.findall(value)]
    elif isinstance(value, str):
        value = [v.strip() for v in value.split(",")]
    elif isinstance(value, list):
        value = [_js_text(v) for v in value]
    return {"value": value, **_promptfoo_threshold(item)}


def _js_text(value: Any) -> Any:
    """A number as JavaScript's String() writes it (15, 1.5; 2.0 as 2); anything else as given."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return value
    return str(int(value)) if float(value).is_integer() else str(value)


def _promptfoo_latency(item: Mapping[str, Any], base: Path) -> dict[str, Any]:
    return {"value": item.get("threshold")}  # promptfoo's latency (ms) and cost limits are its threshold


def _promptfoo_schema(item: Mapping[str, Any], base: Path) -> dict[str, Any]:
    """promptfoo reads a schema written as text with YAML (JSON being YAML too)."""
    value = item.get("value")
    if isinstance(value, str) and not value.startswith("file://"):
        try:
            value = yaml.safe_load(value)
        except yaml.YAMLError as exc:
            raise BatchInputError(f"{item.get('type')}: the schema is neither JSON nor YAML ({exc})") from None
    schema = {"schema": value} if value is not None else {}
    return {**schema, **_promptfoo_threshold(item)}


def _promptfoo_python(item: Mapping[str, Any], base: Path) -> dict[str, Any]:
    value = item.get("value")
    if not (isinstance(value, str) and value.startswith("file://")):
        raise BatchInputError("inline Python is not supported; put it in a file and write value: file://checks.py")
    return {"value": str(base / value.removeprefix("file://")), **_promptfoo_threshold(item)}


# -- the spec ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AssertKind:
    """One assert kind: its value, its check, and how it is written and explained."""

    name: str
    value: ValueForm
    check: Callable[[Assert, Observed], Outcome]
    """(the assert, what was observed) -> the outcome, before the threshold and ``not-``."""
    example: str = ""
    """A value, as written after ``kind:``, for error messages (``e.g. contains:Paris``)."""
    usage: str = ""
    """How the Batch form's help and the CLI's help write it (placeholders allowed); "": the name alone."""
    note: str = ""
    """A few words shown after the usage."""
    unit: str = ""
    """What a number value counts (number kinds)."""
    scored: bool = False
    """Whether it gives a score in [0, 1] that a threshold decides (its detail is shown even when it passes)."""
    threshold: float = 0.5
    """The score that passes when the assert gives none."""
    negated_why: Callable[[Assert, Observed], str] | None = None
    """Why ``not-<kind>`` failed; None: "the output passes <kind>:<value>"."""
    promptfoo: Callable[[Mapping[str, Any], Path], dict[str, Any]] | None = _promptfoo_value
    """promptfoo's assert (a dict; ``file://`` paths relative to the folder) -> the dict form's fields besides
    type and weight; None: a type promptfoo has not, or not as we run it."""
    negation_of: str = ""
    """Set on a name that only stands for ``not-<negation_of>`` (``not-contains``)."""


# -- checks -------------------------------------------------------------------------------------------


def _contains(a: Assert, seen: Observed) -> Outcome:
    return Outcome(str(a.value) in seen.output, f"output does not contain '{a.value}'")


def _contains_at(a: Assert, seen: Observed) -> str:
    return f"output contains '{a.value}' (at character {seen.output.find(str(a.value))})"


def _icontains(a: Assert, seen: Observed) -> Outcome:
    return Outcome(str(a.value).casefold() in seen.output.casefold(),
                   f"output does not contain '{a.value}' (ignoring case)")


def _equals(a: Assert, seen: Observed) -> Outcome:
    out = seen.output.strip()
    return Outcome(out == a.value, f"output is '{excerpt(out)}', expected '{a.value}'")


def _starts_with(a: Assert, seen: Observed) -> Outcome:
    start = seen.output.lstrip()
    return Outcome(start.startswith(str(a.value)),
                   f"output starts with '{excerpt(start, len(str(a.value)) + 20)}', expected '{a.value}'")


def _regex(a: Assert, seen: Observed) -> Outcome:
    return Outcome(compiled(str(a.value)).search(seen.output) is not None,
                   f"output does not match the regex {a.value}")


def _contains_list(every: bool, fold: bool) -> Callable[[Assert, Observed], Outcome]:
    """The check of a list kind: ``every`` text (else any) must be in the output, ``fold``: ignoring case."""
    def check(a: Assert, seen: Observed) -> Outcome:
        texts, out = list(a.value), seen.output
        found = [t for t in texts if (t.casefold() in out.casefold() if fold else t in out)]
        if not every:
            return Outcome(bool(found), f"output contains none of {', '.join(repr(t) for t in texts)}")
        missing = [t for t in texts if t not in found]
        return Outcome(not missing, f"output lacks {', '.join(repr(t) for t in missing)}")
    return check


def _not_json(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _is_json(a: Assert, seen: Observed) -> Outcome:
    try:
        data = json.loads(seen.output.strip(), parse_constant=_not_json)  # NaN, Infinity: Python's, not JSON
    except json.JSONDecodeError as exc:
        return Outcome(False, f"output is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})")
    except ValueError as exc:
        return Outcome(False, f"output is not valid JSON ({exc})")
    if a.value is None:
        return Outcome(True, "")
    error = jsonschema.exceptions.best_match(schema_validator(str(a.value)).iter_errors(data))
    if error is None:
        return Outcome(True, "")
    path = getattr(error, "json_path", "$")
    return Outcome(False, f"output JSON does not match the schema: {error.message}"
                   + (f" (at {path})" if path != "$" else ""))


def _contains_json(a: Assert, seen: Observed) -> Outcome:
    """promptfoo's contains-json: some JSON object in the output (each ``{`` tried as a start) parses, and matches
    the schema when one is given."""
    decoder, out, found = json.JSONDecoder(parse_constant=_not_json), seen.output, []
    for start in (i for i, ch in enumerate(out) if ch == "{"):
        try:
            found.append(decoder.raw_decode(out, start)[0])
        except ValueError:
            continue
    if not found:
        return Outcome(False, "output contains no valid JSON object")
    if a.value is None:
        return Outcome(True, "")
    validator = schema_validator(str(a.value))
    errors = [jsonschema.exceptions.best_match(validator.iter_errors(data)) for data in found]
    if any(error is None for error in errors):
        return Outcome(True, "")
    return Outcome(False, f"no JSON object in the output matches the schema: {errors[0].message if errors[0] else ''}")


def _word_count(a: Assert, seen: Observed) -> Outcome:
    """promptfoo's word-count with a number: exactly that many words (runs of non-space)."""
    words = len(seen.output.split())
    return Outcome(words == int(float(a.value)), f"output has {words} words, expected {float(a.value):g}")


def _is_xml(a: Assert, seen: Observed) -> Outcome:
    why = xml_problem(seen.output, a.value)
    return Outcome(not why, why)


def _contains_xml(a: Assert, seen: Observed) -> Outcome:
    candidates = xml_inside(seen.output)
    whys = [xml_problem(text, a.value) for text in candidates]
    if any(not why for why in whys):
        return Outcome(True, "")
    return Outcome(False, f"no XML element in the output passes: {whys[0]}" if whys else "output contains no XML")


def _max_length(a: Assert, seen: Observed) -> Outcome:
    tokens = a.options.get("unit") == "tokens"
    size, what = (seen.completion_tokens, "tokens") if tokens else (len(seen.output), "characters")
    return Outcome(size <= int(a.value), f"output has {size} {what}, more than {a.value}")


def _similar(a: Assert, seen: Observed) -> Outcome:
    return Outcome(True, "similarity to the reference", similarity(seen.output, str(a.value)), True)


def _python(a: Assert, seen: Observed) -> Outcome:
    """As promptfoo: a bare score passes above 0, or at the threshold when one is set; a threshold also fails a
    {pass, score} result whose score is below it."""
    context = {"prompt": seen.prompt, "completion_tokens": seen.completion_tokens, "ttft": seen.ttft,
               "tokens_per_second": seen.tokens_per_second}
    outcome = Outcome(*run_python(str(a.value), float(a.options.get("timeout", PYTHON_TIMEOUT)), seen.output,
                                  context))
    if outcome.by_score and a.threshold is None and outcome.score is not None:
        return outcome._replace(passed=outcome.score > 0, why=f"{outcome.why} (score {outcome.score:.2f}, "
                                "needs more than 0)", by_score=False)
    if not outcome.by_score and a.threshold is not None and outcome.score is not None \
            and outcome.score < a.threshold:
        return outcome._replace(passed=False, why=f"{outcome.why} (score {outcome.score:.2f}, needs {a.threshold:g})")
    return outcome


def _llm_rubric(a: Assert, seen: Observed) -> Outcome:
    verdict = seen.judged.get(str(a.value))
    if verdict is None:
        return Outcome(False, "no judge verdict (the judge did not run or its answer could not be read)", 0.0)
    return Outcome(verdict.passed, f"judge: {verdict.reason}", verdict.score, a.threshold is not None)


def _untimed(a: Assert) -> Outcome:
    return Outcome(False, f"{a.kind}: this row has no timing recorded")


def _latency(a: Assert, seen: Observed) -> Outcome:
    if seen.ttft is None or not seen.tokens_per_second:
        return _untimed(a)
    ms = (seen.ttft + seen.completion_tokens / float(seen.tokens_per_second)) * 1000
    limit = float(a.value)
    return Outcome(ms <= limit, f"took {ms:.0f} ms, more than {limit:g} ms")


def _cost(a: Assert, seen: Observed) -> Outcome:
    """promptfoo's cost: a local model costs nothing, so the output always costs 0 and passes any limit."""
    return Outcome(True, "cost 0 (a local model is not billed)")


def _ttft(a: Assert, seen: Observed) -> Outcome:
    if seen.ttft is None:
        return _untimed(a)
    limit, ms = float(a.value), seen.ttft * 1000
    return Outcome(ms <= limit, f"first token after {ms:.0f} ms, more than {limit:g} ms")


def _tokens_per_second(a: Assert, seen: Observed) -> Outcome:
    if seen.ttft is None or not seen.tokens_per_second:
        return _untimed(a)
    limit, tps = float(a.value), float(seen.tokens_per_second)
    return Outcome(tps >= limit, f"{tps:.1f} tokens/s, fewer than {limit:g}")


# -- the table ----------------------------------------------------------------------------------------


def _spelling(name: str, of: AssertKind, example: str) -> AssertKind:
    """A name of its own for ``not-<of>``: parsed to ``of`` with negate=True."""
    return replace(of, name=name, example=example, negation_of=of.name, promptfoo=None, usage="", note="")


_CONTAINS = AssertKind("contains", TEXT, _contains, "Paris", negated_why=_contains_at)

ASSERT_KINDS: dict[str, AssertKind] = {kind.name: kind for kind in (
    _CONTAINS,
    AssertKind("icontains", TEXT, _icontains, "paris"),
    _spelling("not-contains", _CONTAINS, "London"),
    AssertKind("equals", TEXT, _equals, "4"),
    AssertKind("regex", PATTERN, _regex, "^\\d+$"),
    AssertKind("starts-with", TEXT, _starts_with, "The"),
    AssertKind("similar", TEXT, _similar, "The capital of France is Paris", usage="similar:text",
               note=f"score ≥ {SIMILAR_THRESHOLD:g}", scored=True, threshold=SIMILAR_THRESHOLD),
    AssertKind("llm-rubric", TEXT, _llm_rubric, "The answer is polite and names a city",
               usage="llm-rubric:text", note="judged by a loaded model or a server", scored=True),
    AssertKind("contains-any", LIST, _contains_list(every=False, fold=False), "Paris,Lyon", usage="contains-any:a,b",
               promptfoo=_promptfoo_list),
    AssertKind("contains-all", LIST, _contains_list(every=True, fold=False), "Paris,France", usage="contains-all:a,b",
               promptfoo=_promptfoo_list),
    AssertKind("icontains-any", LIST, _contains_list(every=False, fold=True), "paris,lyon", usage="icontains-any:a,b",
               promptfoo=_promptfoo_list),
    AssertKind("icontains-all", LIST, _contains_list(every=True, fold=True), "paris,france", usage="icontains-all:a,b",
               promptfoo=_promptfoo_list),
    AssertKind("is-json", SCHEMA, _is_json, '{"type":"object"}', usage="is-json[:schema]", promptfoo=_promptfoo_schema),
    AssertKind("contains-json", SCHEMA, _contains_json, '{"type":"object"}', usage="contains-json[:schema]",
               promptfoo=_promptfoo_schema),
    AssertKind("is-xml", OPTIONAL_LIST, _is_xml, "analysis.summary", usage="is-xml[:root.element,...]"),
    AssertKind("contains-xml", OPTIONAL_LIST, _contains_xml, "analysis", usage="contains-xml[:root.element,...]"),
    AssertKind("word-count", NUMBER, _word_count, "12", usage="word-count:N", unit="words"),
    AssertKind("max-length", LENGTH, _max_length, "50 tokens", usage="max-length:N [tokens]", promptfoo=None),
    AssertKind("python", CODE, _python, "checks.py:get_assert", usage="python:file.py[:function]",
               scored=True, promptfoo=_promptfoo_python),
    AssertKind("latency", NUMBER, _latency, "5000", usage="latency:ms", unit="milliseconds",
               promptfoo=_promptfoo_latency),
    AssertKind("cost", NUMBER, _cost, "0.01", usage="cost:dollars", unit="dollars",
               note="always 0 here: a local model is not billed", promptfoo=_promptfoo_latency),
    AssertKind("ttft", NUMBER, _ttft, "500", usage="ttft:ms", unit="milliseconds", promptfoo=None),
    AssertKind("tokens-per-second", NUMBER, _tokens_per_second, "5", usage="tokens-per-second:N",
               unit="tokens per second", promptfoo=None),
)}
"""Every assert kind by name, in the order the help and error messages list them."""


def kinds_help() -> str:
    """The kinds as the Batch form and the CLI list them: ``contains, ..., max-length:N [tokens], ...``."""
    return ", ".join((kind.usage or kind.name) + (f" ({kind.note})" if kind.note else "")
                     for kind in ASSERT_KINDS.values() if not kind.negation_of)


def _trigrams(text: str) -> Counter:
    text = " ".join(text.casefold().split())
    return Counter(text[i:i + 3] for i in range(max(1, len(text) - 2)))


def similarity(a: str, b: str) -> float:
    """Cosine similarity of two texts' character-trigram counts (case and runs of spaces ignored), in [0, 1]."""
    ca, cb = _trigrams(a), _trigrams(b)
    dot = sum(n * cb[g] for g, n in ca.items())
    norm = math.sqrt(sum(n * n for n in ca.values()) * sum(n * n for n in cb.values()))
    return dot / norm if norm else float(a.strip() == b.strip())
