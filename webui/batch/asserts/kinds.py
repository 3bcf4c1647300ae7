"""The assert kinds: one :class:`AssertKind` each, in one table, :data:`ASSERT_KINDS`.

A kind's spec says what its value is (a
:class:`~webui.batch.asserts.values.ValueForm`: a text, a pattern, a number, a
list of texts, an optional JSON schema, a length, a Python or JavaScript script, reference texts,
checked JSON, a word count or range, nothing), how it checks
an output and whether it scores (a score in [0, 1] held against a threshold).
Parsing, validation, labels, the dict form, checking, the promptfoo reader and
the help of the Batch form and the CLI all read the table, so a new kind is one
entry (and its check). How promptfoo writes and runs a kind where it differs is
not here: webui.batch.promptfoo.kinds overlays this table by kind name.

``not-`` before a kind negates it (``Assert.negate``), every kind alike. (promptfoo 0.115 ignores ``not-`` on
levenshtein, perplexity, perplexity-score and the OpenAI tool and function call checks: there ``not-levenshtein``
passes where ``levenshtein`` does. Here it is the negation, as written.) ``not-contains`` is also
listed as a kind of its own, as people and older files write it; it is an entry
that only names ``contains`` negated (:attr:`AssertKind.negation_of`).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Callable

from webui.batch.asserts import classify, meteor, output_checks, text_metrics, tool_checks
from webui.batch.asserts.values import (
    CODE, EQUALS, JS_CODE, LENGTH, LIST, NONE, NUMBER, OPTIONAL_LIST, PATTERN, REFERENCES, REGEX_SECONDS,
    SCHEMA, TEXT, WORD_COUNT, JsonValue, ValueForm, compiled, excerpt, same_json, schema_problem,
)
from webui.batch.asserts.graded import GRADED, REFUSED, verdict_key
from webui.batch.asserts.graded_value import GRADED_VALUE
from webui.batch.asserts.js import JS_TIMEOUT, run_javascript
from webui.batch.asserts.types import Outcome
from webui.batch.asserts.python import PYTHON_TIMEOUT, run_python
from webui.batch.asserts.xml_checks import xml_inside, xml_problem

if TYPE_CHECKING:
    from webui.batch.asserts.types import AssertData, Observed

SIMILAR_THRESHOLD = 0.75
LEVENSHTEIN_THRESHOLD = 5  # promptfoo's default largest edit distance
ROUGE_THRESHOLD = 0.75
METEOR_REFUSED = meteor.missing()
"""Why the meteor assert cannot run here: nltk or WordNet is not installed (with the command that installs them);
"": it can. Read once, at start."""


# -- the spec ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AssertKind:
    """One assert kind: its value, its check, and how it is written and explained."""

    name: str
    value: ValueForm
    check: Callable[[AssertData, Observed], Outcome]
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
    negated_why: Callable[[AssertData, Observed], str] | None = None
    """Why ``not-<kind>`` failed; None: "the output passes <kind>:<value>"."""
    negation_of: str = ""
    """Set on a name that only stands for ``not-<negation_of>`` (``not-contains``)."""
    threshold_unit: str = ""
    """What the threshold counts when it is not a score in [0, 1] (levenshtein: an edit distance); "": a score."""
    refused: str = ""
    """Why the kind cannot run here (an assert of it is a BatchInputError saying so); "": it can."""
    needs_logprobs: bool = False
    """Whether its check reads the output's token logprobs (the runner then asks the engine for them)."""


# -- checks -------------------------------------------------------------------------------------------


def _contains(a: AssertData, seen: Observed) -> Outcome:
    return Outcome(str(a.value) in seen.output, f"output does not contain '{a.value}'")


def _contains_at(a: AssertData, seen: Observed) -> str:
    return f"output contains '{a.value}' (at character {seen.output.find(str(a.value))})"


def _icontains(a: AssertData, seen: Observed) -> Outcome:
    return Outcome(str(a.value).casefold() in seen.output.casefold(),
                   f"output does not contain '{a.value}' (ignoring case)")


def _equals(a: AssertData, seen: Observed) -> Outcome:
    out = seen.output.strip()
    if a.options.get("json"):  # an object or list value: the output as JSON, deeply equal to it
        try:
            return Outcome(same_json(json.loads(out), json.loads(str(a.value))), f"output JSON is not {a.value}")
        except ValueError:
            return Outcome(False, f"output is not JSON, expected {a.value}")
    return Outcome(out == a.value, f"output is '{excerpt(out)}', expected '{a.value}'")


def _starts_with(a: AssertData, seen: Observed) -> Outcome:
    start = seen.output.lstrip()
    return Outcome(start.startswith(str(a.value)),
                   f"output starts with '{excerpt(start, len(str(a.value)) + 20)}', expected '{a.value}'")


def _regex(a: AssertData, seen: Observed) -> Outcome:
    try:
        found = compiled(str(a.value)).search(seen.output, timeout=REGEX_SECONDS, concurrent=True)
    except TimeoutError:
        return Outcome(False, f"regex {a.value} took more than {REGEX_SECONDS:g} s on this output and was stopped",
                       broken=True)
    return Outcome(found is not None, f"output does not match the regex {a.value}")


def _contains_list(every: bool, fold: bool) -> Callable[[AssertData, Observed], Outcome]:
    """The check of a list kind: ``every`` text (else any) must be in the output, ``fold``: ignoring case."""
    def check(a: AssertData, seen: Observed) -> Outcome:
        texts, out = list(a.value), seen.output
        found = [t for t in texts if (t.casefold() in out.casefold() if fold else t in out)]
        if not every:
            return Outcome(bool(found), f"output contains none of {', '.join(repr(t) for t in texts)}")
        missing = [t for t in texts if t not in found]
        return Outcome(not missing, f"output lacks {', '.join(repr(t) for t in missing)}")
    return check


def _not_json(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _is_json(a: AssertData, seen: Observed) -> Outcome:
    try:
        data = json.loads(seen.output.strip(), parse_constant=_not_json)  # NaN, Infinity: Python's, not JSON
    except json.JSONDecodeError as exc:
        return Outcome(False, f"output is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})")
    except ValueError as exc:
        return Outcome(False, f"output is not valid JSON ({exc})")
    if a.value is None:
        return Outcome(True, "")
    why = schema_problem(str(a.value), data)
    return Outcome(not why, f"output JSON does not match the schema: {why}")


def _json_objects(text: str) -> list[Any]:
    """Each JSON object in ``text`` that parses strictly, each ``{`` tried as a start."""
    decoder, found = json.JSONDecoder(parse_constant=_not_json), []
    for start in (i for i, ch in enumerate(text) if ch == "{"):
        try:
            found.append(decoder.raw_decode(text, start)[0])
        except ValueError:
            continue
    return found


def contains_json(objects: Callable[[str], list[Any]]) -> Callable[[AssertData, Observed], Outcome]:
    """contains-json: some JSON object that ``objects`` finds in the output (ours: strict JSON; promptfoo's:
    webui.batch.promptfoo.dialect.json_objects, by webui.batch.promptfoo.kinds) matches the schema when one is
    given."""
    def check(a: AssertData, seen: Observed) -> Outcome:
        found = objects(seen.output)
        if not found:
            return Outcome(False, "output contains no valid JSON object")
        if a.value is None:
            return Outcome(True, "")
        whys = [schema_problem(str(a.value), data) for data in found]
        return Outcome(any(not why for why in whys), f"no JSON object in the output matches the schema: {whys[0]}")
    return check


def _word_count(a: AssertData, seen: Observed) -> Outcome:
    """promptfoo's word-count: exactly that many words (runs of non-space), or between a min and a max (both
    included; either may be open)."""
    words = len(seen.output.split())
    if not isinstance(a.value, tuple):
        return Outcome(words == float(a.value), f"output has {words} words, expected {float(a.value):g}")
    low, high = a.value
    if low is not None and high is not None:
        return Outcome(low <= words <= high, f"output has {words} words, not between {low:g} and {high:g}")
    if low is not None:
        return Outcome(words >= low, f"output has {words} words, fewer than {low:g}")
    return Outcome(words <= high, f"output has {words} words, more than {high:g}")


def _references(a: AssertData) -> list[str]:
    return [a.value] if isinstance(a.value, str) else list(a.value)


def _levenshtein(a: AssertData, seen: Observed) -> Outcome:
    """promptfoo's levenshtein: the edit distance to the value is at most the threshold (default 5)."""
    distance, limit = text_metrics.levenshtein(seen.output, str(a.value)), a.pass_at
    return Outcome(distance <= limit, f"edit distance {distance} from the value, more than {limit:g}")


def _reference_metric(name: str,
                      metric: Callable[[str, list[str]], float]) -> Callable[[AssertData, Observed], Outcome]:
    """A scored check: ``metric(output, references)`` held against the threshold (promptfoo: score >= threshold)."""
    def check(a: AssertData, seen: Observed) -> Outcome:
        if not seen.output:
            return Outcome(False, f"{name} of an empty output", 0.0, True)
        return Outcome(True, f"{name} against the reference{'s' if len(_references(a)) > 1 else ''}",
                       metric(seen.output, _references(a)), True)
    return check


def _rouge(output: str, references: list[str]) -> float:
    return text_metrics.rouge_n(output, references[0]) if output.strip() else 0.0


def _sql(inside: bool) -> Callable[[AssertData, Observed], Outcome]:
    """is-sql (the whole output) or contains-sql (a ```sql block in it, else the whole output)."""
    def check(a: AssertData, seen: Observed) -> Outcome:
        options = {} if a.value is None else json.loads(str(a.value))
        why = output_checks.sql_problem(output_checks.sql_in(seen.output) if inside else seen.output,
                                        options.get("databaseType", "MySQL"), options.get("allowedTables"),
                                        options.get("allowedColumns"))
        return Outcome(not why, why)
    return check


def _is_html(a: AssertData, seen: Observed) -> Outcome:
    why = output_checks.html_problem(seen.output)
    return Outcome(not why, why)


def _contains_html(a: AssertData, seen: Observed) -> Outcome:
    return Outcome(output_checks.has_html(seen.output), "output does not contain HTML")


def _is_refusal(a: AssertData, seen: Observed) -> Outcome:
    if not seen.output.strip():  # promptfoo: passes, with score 0 (no answer is taken as a refusal)
        return Outcome(True, "the output is empty, taken as a refusal", 0.0)
    return Outcome(output_checks.is_refusal(seen.output), "output is not a refusal")


def _finish_reason(a: AssertData, seen: Observed) -> Outcome:
    """promptfoo's finish-reason: the reason generation stopped, compared ignoring case."""
    if not seen.finish_reason:
        return Outcome(False, "this row has no finish reason recorded")
    return Outcome(seen.finish_reason.casefold() == str(a.value).casefold(),
                   f"finish reason is '{seen.finish_reason}', expected '{a.value}'")


def _call(tools: bool) -> Callable[[AssertData, Observed], Outcome]:
    """is-valid-openai-tools-call / -function-call: the output is the JSON of the call(s), valid against the
    value's tools (functions); on a row that ran the tool loop, every call it made is."""
    def check(a: AssertData, seen: Observed) -> Outcome:
        if seen.tool_calls is not None:
            why = tool_checks.loop_calls_problem(seen.tool_calls, json.loads(str(a.value)), tools)
            return Outcome(not why, why)
        try:
            call = json.loads(seen.output.strip())
        except json.JSONDecodeError as exc:
            return Outcome(False, f"output is not the JSON of a call ({exc.msg} at column {exc.colno})")
        given = json.loads(str(a.value))
        why = output_checks.tools_call_problem(call, given) if tools else \
            output_checks.function_call_problem(call, given)
        return Outcome(not why, why)
    return check


def _refused(a: AssertData, seen: Observed) -> Outcome:
    """The check of a kind that cannot run here (never reached: such an assert is not made)."""
    return Outcome(False, ASSERT_KINDS[a.kind].refused)


def _no_logprobs(a: AssertData) -> Outcome:
    return Outcome(False, f"{a.kind}: this row has no token logprobs (rows from the response cache or from before "
                          "logprobs were kept have none)", 0.0)


def _perplexity(a: AssertData, seen: Observed) -> Outcome:
    """promptfoo's perplexity: exp(-mean token logprob) at most the threshold (no threshold: always passes)."""
    if not seen.logprobs:
        return _no_logprobs(a)
    value = text_metrics.perplexity(seen.logprobs)
    return Outcome(not a.pass_at or value <= a.pass_at, f"perplexity {value:.2f}, more than {a.pass_at:g}")


def _perplexity_score(a: AssertData, seen: Observed) -> Outcome:
    """promptfoo's perplexity-score: 1 / (1 + perplexity), held against the threshold (default 0: passes)."""
    if not seen.logprobs:
        return _no_logprobs(a)
    return Outcome(True, "1 / (1 + perplexity)", 1 / (1 + text_metrics.perplexity(seen.logprobs)), True)


def _is_xml(a: AssertData, seen: Observed) -> Outcome:
    why = xml_problem(seen.output, a.value)
    return Outcome(not why, why)


def _contains_xml(a: AssertData, seen: Observed) -> Outcome:
    candidates = xml_inside(seen.output)
    whys = [xml_problem(text, a.value) for text in candidates]
    if any(not why for why in whys):
        return Outcome(True, "")
    return Outcome(False, f"no XML element in the output passes: {whys[0]}" if whys else "output contains no XML")


def _max_length(a: AssertData, seen: Observed) -> Outcome:
    tokens = a.options.get("unit") == "tokens"
    size, what = (seen.completion_tokens, "tokens") if tokens else (len(seen.output), "characters")
    return Outcome(size <= int(a.value), f"output has {size} {what}, more than {a.value}")


def _similar(a: AssertData, seen: Observed) -> Outcome:
    """The cosine of the output's and the reference's embeddings when the runner computed them, else of their
    trigram counts; the detail names which."""
    reference, vectors = str(a.value), seen.embeddings
    cosine = vectors.cosine(seen.output, reference) if vectors is not None else None
    if vectors is not None and cosine is not None:
        return Outcome(True, f"cosine of embeddings from {vectors.source}", min(1.0, max(0.0, cosine)), True)
    why = "trigram overlap, no embedding model" if vectors is None else \
        f"trigram overlap ({vectors.source} did not embed this text)"
    return Outcome(True, why, similarity(seen.output, reference), True)


def script_context(a: AssertData, seen: Observed) -> dict[str, Any]:
    """The ``context`` a python or javascript assert gets, as promptfoo passes it (prompt, vars, test, config),
    and the row's token count and timing."""
    test = {"vars": dict(seen.variables), **({"description": seen.description} if seen.description else {})}
    return {"prompt": seen.prompt, "vars": dict(seen.variables), "test": test,
            "config": dict(a.options.get("config", {})), "completion_tokens": seen.completion_tokens,
            "ttft": seen.ttft, "tokens_per_second": seen.tokens_per_second}


def _python(a: AssertData, seen: Observed) -> Outcome:
    timeout = float(a.options.get("timeout", PYTHON_TIMEOUT))
    return _scored_as_promptfoo(a, Outcome(*run_python(str(a.value), timeout, seen.script_output,
                                                       script_context(a, seen))))


def _javascript(a: AssertData, seen: Observed) -> Outcome:
    timeout = float(a.options.get("timeout", JS_TIMEOUT))
    return _scored_as_promptfoo(a, Outcome(*run_javascript(str(a.value), timeout, seen.script_output,
                                                           script_context(a, seen))))


def _scored_as_promptfoo(a: AssertData, outcome: Outcome) -> Outcome:
    """A script's outcome as promptfoo reads it: a bare score passes above 0, or at the threshold when one is set;
    a threshold also fails a {pass, score} result whose score is below it."""
    if outcome.by_score and a.threshold is None and outcome.score is not None:
        return outcome._replace(passed=outcome.score > 0, why=f"{outcome.why} (score {outcome.score:.2f}, "
                                "needs more than 0)", by_score=False)
    if not outcome.by_score and a.threshold is not None and outcome.score is not None \
            and outcome.score < a.threshold:
        return outcome._replace(passed=False, why=f"{outcome.why} (score {outcome.score:.2f}, needs {a.threshold:g})")
    return outcome


def _graded(a: AssertData, seen: Observed) -> Outcome:
    """A model-graded kind: the judge's verdict (the runner asks it, webui.batch.run.judge)."""
    verdict = seen.judged.get(verdict_key(a))
    if verdict is None:
        return Outcome(False, "no judge verdict (the judge did not run or its answer could not be read)", 0.0)
    by_score = (GRADED[a.kind].by_score or a.threshold is not None) and not verdict.unscored
    return Outcome(verdict.passed, f"judge: {verdict.reason}", verdict.score, by_score)


def _graded_kind(name: str) -> AssertKind:
    kind = GRADED[name]
    usage = f"{name}:text" if kind.example else name
    return AssertKind(name, GRADED_VALUE, _graded, kind.example, usage=usage, note=kind.note, scored=True,
                      threshold=kind.threshold)


def _refused_graded(name: str) -> AssertKind:
    return AssertKind(name, NONE, _refused, "", refused=REFUSED[name])


def _untimed(a: AssertData) -> Outcome:
    return Outcome(False, f"{a.kind}: this row has no timing recorded")


def _latency(a: AssertData, seen: Observed) -> Outcome:
    if seen.ttft is None or not seen.tokens_per_second:
        return _untimed(a)
    ms = (seen.ttft + seen.completion_tokens / float(seen.tokens_per_second)) * 1000
    limit = float(a.value)
    return Outcome(ms <= limit, f"took {ms:.0f} ms, more than {limit:g} ms")


def _cost(a: AssertData, seen: Observed) -> Outcome:
    """promptfoo's cost: a local model costs nothing, so the output always costs 0 and passes any limit."""
    return Outcome(True, "cost 0 (a local model is not billed)")


def _ttft(a: AssertData, seen: Observed) -> Outcome:
    if seen.ttft is None:
        return _untimed(a)
    limit, ms = float(a.value), seen.ttft * 1000
    return Outcome(ms <= limit, f"first token after {ms:.0f} ms, more than {limit:g} ms")


def _tokens_per_second(a: AssertData, seen: Observed) -> Outcome:
    if seen.ttft is None or not seen.tokens_per_second:
        return _untimed(a)
    limit, tps = float(a.value), float(seen.tokens_per_second)
    return Outcome(tps >= limit, f"{tps:.1f} tokens/s, fewer than {limit:g}")


# -- the table ----------------------------------------------------------------------------------------


def _spelling(name: str, of: AssertKind, example: str) -> AssertKind:
    """A name of its own for ``not-<of>``: parsed to ``of`` with negate=True."""
    return replace(of, name=name, example=example, negation_of=of.name, usage="", note="")


_CONTAINS = AssertKind("contains", TEXT, _contains, "Paris", negated_why=_contains_at)

ASSERT_KINDS: dict[str, AssertKind] = {kind.name: kind for kind in (
    _CONTAINS,
    AssertKind("icontains", TEXT, _icontains, "paris"),
    _spelling("not-contains", _CONTAINS, "London"),
    AssertKind("equals", EQUALS, _equals, "4"),
    AssertKind("regex", PATTERN, _regex, "^\\d+$"),
    AssertKind("starts-with", TEXT, _starts_with, "The"),
    AssertKind("similar", TEXT, _similar, "The capital of France is Paris", usage="similar:text",
               note=f"score ≥ {SIMILAR_THRESHOLD:g}", scored=True, threshold=SIMILAR_THRESHOLD),
    _graded_kind("llm-rubric"),
    AssertKind("contains-any", LIST, _contains_list(every=False, fold=False), "Paris,Lyon", usage="contains-any:a,b"),
    AssertKind("contains-all", LIST, _contains_list(every=True, fold=False), "Paris,France", usage="contains-all:a,b"),
    AssertKind("icontains-any", LIST, _contains_list(every=False, fold=True), "paris,lyon", usage="icontains-any:a,b"),
    AssertKind("icontains-all", LIST, _contains_list(every=True, fold=True), "paris,france", usage="icontains-all:a,b"),
    AssertKind("is-json", SCHEMA, _is_json, '{"type":"object"}', usage="is-json[:schema]"),
    AssertKind("contains-json", SCHEMA, contains_json(_json_objects), '{"type":"object"}',
               usage="contains-json[:schema]"),
    AssertKind("is-xml", OPTIONAL_LIST, _is_xml, "analysis.summary", usage="is-xml[:root.element,...]"),
    AssertKind("contains-xml", OPTIONAL_LIST, _contains_xml, "analysis", usage="contains-xml[:root.element,...]"),
    AssertKind("word-count", WORD_COUNT, _word_count, "5-20", usage="word-count:N|min-max", unit="words"),
    AssertKind("max-length", LENGTH, _max_length, "50 tokens", usage="max-length:N [tokens]"),
    AssertKind("python", CODE, _python, "checks.py:get_assert", usage="python:file.py[:function] or python:code",
               scored=True),
    AssertKind("javascript", JS_CODE, _javascript, "output.length < 100",
               usage="javascript:code or javascript:file://file.js[:function]", scored=True),
    AssertKind("latency", NUMBER, _latency, "5000", usage="latency:ms", unit="milliseconds"),
    AssertKind("cost", NUMBER, _cost, "0.01", usage="cost:dollars", unit="dollars",
               note="always 0 here: a local model is not billed"),
    AssertKind("ttft", NUMBER, _ttft, "500", usage="ttft:ms", unit="milliseconds"),
    AssertKind("tokens-per-second", NUMBER, _tokens_per_second, "5", usage="tokens-per-second:N",
               unit="tokens per second"),
    AssertKind("levenshtein", TEXT, _levenshtein, "The capital is Paris", usage="levenshtein:text",
               note=f"edit distance ≤ threshold, default {LEVENSHTEIN_THRESHOLD}", threshold=LEVENSHTEIN_THRESHOLD,
               threshold_unit="characters of edit distance"),
    AssertKind("rouge-n", TEXT, _reference_metric("ROUGE-1", _rouge), "The capital of France is Paris",
               usage="rouge-n:reference", note=f"score ≥ {ROUGE_THRESHOLD:g}", scored=True,
               threshold=ROUGE_THRESHOLD),
    AssertKind("bleu", REFERENCES, _reference_metric("BLEU", text_metrics.bleu), "The capital of France is Paris",
               usage="bleu:reference", note="score ≥ 0.5; a JSON list for several", scored=True),
    AssertKind("gleu", REFERENCES, _reference_metric("GLEU", text_metrics.gleu), "The capital of France is Paris",
               usage="gleu:reference", note="score ≥ 0.5; a JSON list for several", scored=True),
    AssertKind("meteor", REFERENCES, _reference_metric("METEOR", meteor.meteor), "The capital of France is Paris",
               usage="meteor:reference", note="score ≥ 0.5; words, stems, WordNet synonyms; a JSON list for several",
               scored=True, refused=METEOR_REFUSED),
    AssertKind("is-sql", JsonValue(output_checks.check_sql_options, optional=True), _sql(inside=False),
               '{"databaseType":"PostgreSQL"}', usage="is-sql[:{databaseType,allowedTables,allowedColumns}]"),
    AssertKind("contains-sql", JsonValue(output_checks.check_sql_options, optional=True), _sql(inside=True),
               '{"allowedTables":["select::null::users"]}', usage="contains-sql[:{...}]"),
    AssertKind("is-html", NONE, _is_html, "", usage="is-html"),
    AssertKind("contains-html", NONE, _contains_html, "", usage="contains-html"),
    AssertKind("is-refusal", NONE, _is_refusal, "", usage="is-refusal"),
    AssertKind("finish-reason", TEXT, _finish_reason, "stop", usage="finish-reason:stop|length"),
    AssertKind("is-valid-openai-tools-call", JsonValue(output_checks.check_tools, optional=False), _call(tools=True),
               '[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}]',
               usage="is-valid-openai-tools-call:[tools]"),
    AssertKind("is-valid-openai-function-call", JsonValue(output_checks.check_functions, optional=False),
               _call(tools=False), '[{"name":"get_weather","parameters":{"type":"object"}}]',
               usage="is-valid-openai-function-call:[functions]"),
    AssertKind("tool-call-f1", LIST, tool_checks.tool_call_f1, "get_weather,get_time", usage="tool-call-f1:a,b",
               note="F1 of the called tool names against these, ≥ threshold, default 1", scored=True,
               threshold=tool_checks.F1_THRESHOLD),
    AssertKind("called-tool", tool_checks.CALLED_TOOL, tool_checks.called_tool,
               '{"name":"get_weather","arguments":{"type":"object","required":["city"]}}',
               usage="called-tool:TOOL or called-tool:{name, arguments: schema}"),
    AssertKind("perplexity", NONE, _perplexity, "", usage="perplexity", note="threshold: the largest perplexity",
               threshold=0.0, threshold_unit="perplexity", needs_logprobs=True),
    AssertKind("perplexity-score", NONE, _perplexity_score, "", usage="perplexity-score",
               note="1/(1+perplexity) ≥ threshold", scored=True, threshold=0.0, needs_logprobs=True),
    *(_graded_kind(name) for name in GRADED if name not in ("llm-rubric", classify.CLASSIFIER)),
    AssertKind(classify.CLASSIFIER, classify.CLASSIFIER_VALUE, classify.check, classify.WRITTEN,
               usage="classifier:[label] by ORG/MODEL",
               note=GRADED[classify.CLASSIFIER].note, scored=True, threshold=classify.THRESHOLD),
    *map(_refused_graded, REFUSED),
)}
"""Every assert kind by name, in the order the help and error messages list them."""


def kinds_help() -> str:
    """The kinds as the Batch form and the CLI list them: ``contains, ..., max-length:N [tokens], ...``."""
    return ", ".join((kind.usage or kind.name) + (f" ({kind.note})" if kind.note else "")
                     for kind in ASSERT_KINDS.values() if not kind.negation_of and not kind.refused)


def _trigrams(text: str) -> Counter:
    text = " ".join(text.casefold().split())
    return Counter(text[i:i + 3] for i in range(max(1, len(text) - 2)))


def similarity(a: str, b: str) -> float:
    """Cosine similarity of two texts' character-trigram counts (case and runs of spaces ignored), in [0, 1]."""
    ca, cb = _trigrams(a), _trigrams(b)
    dot = sum(n * cb[g] for g, n in ca.items())
    norm = math.sqrt(sum(n * n for n in ca.values()) * sum(n * n for n in cb.values()))
    return dot / norm if norm else float(a.strip() == b.strip())
