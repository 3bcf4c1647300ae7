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
score becomes 1 - score). A row's score is the weighted mean of its asserts'. An assert of
weight 0 only measures: it is counted as passed, as promptfoo counts it.

``similar:<reference>`` compares the output with a reference by the cosine of
their embeddings when the run has a model that gives them (the runner computes
them before the asserts run and hands them in ``Observed.embeddings``), else by
the cosine of their character-trigram counts (case and runs of spaces ignored):
no model and no download, good at "says the same words", blind to paraphrase.
The detail says which was used; the default threshold is promptfoo's 0.75.
``python:<file.py>[:function]`` calls ``function(output, context)`` (default
``get_assert``, as promptfoo names it) in a separate Python process with a time
limit; ``python:<code>`` runs inline code (an expression, or
a body with ``return``); it returns a bool, a score, or ``{"pass", "score",
"reason"}``. ``javascript:<code>`` and ``javascript:file://<file.js>[:function]``
do the same in JavaScript (webui.batch.asserts.js). Both get promptfoo's ``context``
(prompt, vars, test, config). An assert's ``transform`` (dict form) rewrites the
output before it is checked (webui.batch.asserts.transform). ``latency:<ms>``, ``ttft:<ms>`` and
``tokens-per-second:<n>`` check
the row's timing. ``llm-rubric:<rubric>`` and promptfoo's other model-graded kinds
(factuality, g-eval, context-*, select-best, answer-relevance...:
webui.batch.asserts.graded) are judged by a model (the batch runner asks it, see
webui.batch.run.judge); the verdict and its reason are the result, and one the judge
could not give fails, negated or not.

promptfoo's deterministic kinds run as promptfoo 0.115 runs them: ``levenshtein``,
``rouge-n``, ``bleu``, ``gleu`` (webui.batch.asserts.text_metrics), ``is-sql``,
``contains-sql``, ``is-html``, ``contains-html``, ``is-refusal`` and the OpenAI
tool and function call checks (webui.batch.asserts.output_checks), ``finish-reason``, and
``perplexity``/``perplexity-score`` on the chosen tokens' logprobs, which the
runner asks the engine for only when a prompt has such an assert; ``meteor``
(webui.batch.asserts.meteor: nltk and WordNet 3.0, ``launch.py install meteor``) and
``classifier`` (webui.batch.asserts.classify: a local text-classification model).

Each kind is one spec in :data:`webui.batch.asserts.kinds.ASSERT_KINDS`; everything
here reads that table.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Sequence

from webui.batch.asserts.kinds import ASSERT_KINDS, AssertKind
from webui.batch.promptfoo.dialect import DIALECT
from webui.batch.promptfoo.kinds import check_of, form_of
from webui.batch.asserts.values import excerpt
from webui.batch.asserts.errors import BatchInputError, ScriptError
from webui.batch.asserts.graded import GRADED, verdict_key
from webui.batch.asserts.graded_value import own_provider_refused
from webui.batch.asserts.js import js_target
from webui.batch.asserts.python import is_python_file
from webui.batch.asserts.transform import check_transforms, transformed
from webui.batch.asserts.types import AssertResult, Observed

__all__ = ["KINDS", "Assert", "assert_label", "check_all", "named_file", "parse_assert", "parse_asserts",
           "with_transforms"]

KINDS = tuple(ASSERT_KINDS)
"""The kind names, in the table's order."""
_EXAMPLES = ("contains:Paris, icontains:paris, not-contains:London, equals:4, regex:^\\d+$, starts-with:The, "
             "is-json, is-json:{\"type\":\"object\"}, max-length:200, max-length:50 tokens, "
             "similar:The capital is Paris, python:checks.py, latency:5000, ttft:500, tokens-per-second:5, "
             "not-regex:^\\s*$")
_DICT_KEYS = ("type", "kind", "value", "weight", "threshold", "transform", "metric", "dialect")
DIALECTS = ("", DIALECT)
"""The dict form's keys every kind takes; a kind's value form adds its own (schema, unit, timeout)."""


@dataclass(frozen=True)
class Assert:
    """One check. ``kind`` names its spec in ASSERT_KINDS, whose value form says what ``value`` holds: a text,
    a number, a tuple of texts (list kinds), the schema as compact JSON text or None (is-json), the limit
    (max-length, with ``options["unit"]`` chars or tokens), a file (python, with ``options["timeout"]``).
    Validated on construction; ``not-contains`` becomes ``contains`` with ``negate``."""

    kind: str
    value: Any = None
    options: Mapping[str, Any] = field(default_factory=dict, hash=False)
    negate: bool = False
    weight: float = 1.0
    threshold: float | None = None
    """For scored kinds: the score that passes (None: the kind's default)."""
    transform: tuple[str, ...] = ()
    """Code that rewrites the output before the check, in order (webui.batch.asserts.transform); the dict form's
    ``transform``."""
    metric: str | None = None
    """A promptfoo metric name: the export's namedScores gives each metric its asserts' summed scores."""
    dialect: str = ""
    """"promptfoo": read from a promptfoo file, so checked as promptfoo 0.115 checks it where ours differs
    (webui.batch.promptfoo.dialect); "": ours."""

    def __post_init__(self) -> None:
        spec = ASSERT_KINDS.get(self.kind)
        if spec is None:
            raise BatchInputError(f"unknown assert kind '{self.kind}'; kinds: {', '.join(ASSERT_KINDS)}")
        if spec.refused:
            raise BatchInputError(spec.refused)
        extra = set(self.options) - spec.value.options
        if extra:
            raise BatchInputError(f"{self.kind}: unknown option(s) {', '.join(sorted(map(str, extra)))}")
        _check_weight(spec, self.weight, self.threshold)
        if self.dialect not in DIALECTS:
            raise BatchInputError(f"{self.kind}: dialect must be \"{DIALECT}\" or left out, got {self.dialect!r}")
        object.__setattr__(self, "transform", check_transforms(self.transform))
        value, options = form_of(spec, self.dialect).hold(spec, self.value, self.options)
        object.__setattr__(self, "value", value)
        object.__setattr__(self, "options", options)
        if spec.negation_of:
            object.__setattr__(self, "kind", spec.negation_of)
            object.__setattr__(self, "negate", not self.negate)

    @property
    def spec(self) -> AssertKind:
        return ASSERT_KINDS[self.kind]

    @property
    def label(self) -> str:
        return assert_label(self)

    @property
    def unit(self) -> str:
        return self.options.get("unit", "chars")

    @property
    def written_kind(self) -> str:
        """The kind as the compact and dict forms write it: ``not-`` before it when negated."""
        return f"not-{self.kind}" if self.negate else self.kind

    def to_dict(self) -> dict[str, Any]:
        """The JSONL form, which :func:`parse_assert` reads back."""
        out: dict[str, Any] = {"type": self.written_kind, **self.spec.value.write_dict(self)}
        if self.weight != 1.0:
            out["weight"] = self.weight
        if self.threshold is not None:
            out["threshold"] = self.threshold
        if self.transform:
            out["transform"] = self.transform[0] if len(self.transform) == 1 else list(self.transform)
        if self.metric is not None:
            out["metric"] = self.metric
        if self.dialect:
            out["dialect"] = self.dialect
        return out

    @property
    def pass_at(self) -> float:
        return self.threshold if self.threshold is not None else self.spec.threshold

    def _unscored(self, seen: Observed) -> bool:
        """Whether this is a graded assert the judge could not score (it could not answer, or answer-relevance
        had no embeddings): it fails, negated or not, whatever the threshold."""
        verdict = seen.judged.get(verdict_key(self)) if self.kind in GRADED else None
        return verdict is not None and verdict.unscored

    def check(self, seen: Observed | str, completion_tokens: int = 0) -> AssertResult:
        """Run the check (an output alone, or what was observed of it: tokens, timing)."""
        if isinstance(seen, str):
            seen = Observed(seen, completion_tokens)
        spec = self.spec
        if self.transform:
            try:
                seen = transformed(self.transform, seen)
            except ScriptError as exc:
                return AssertResult(False, f"transform: {exc}", self.label, 0.0 if spec.scored else None,
                                    self.weight)
        passed, detail, score, by_score, broken = check_of(spec, self.dialect)(self, seen)
        if by_score and score is not None:
            passed = score >= self.pass_at
            detail = f"{detail} (score {score:.2f}, needs {self.pass_at:g})".strip()
        if self.negate and not broken and not self._unscored(seen):
            passed = not passed
            score = None if score is None else 1.0 - score
            if not passed and not spec.scored:
                detail = spec.negated_why(self, seen) if spec.negated_why else \
                    f"the output passes {assert_label(self)[4:]}"
        forced = self.weight == 0 and not passed  # as promptfoo: weight 0 only measures, it never fails a row
        if forced:
            passed, detail = True, f"weight 0, counted as passed: {detail}"
        shown = detail if (not passed or spec.scored or forced) else ""
        return AssertResult(passed, shown, self.label, score, self.weight)


def assert_label(item: Assert) -> str:
    """A short display form, the compact spec (``contains:Paris``, ``max-length:50 tokens``)."""
    text = item.spec.value.write(item)
    return item.written_kind if text is None else f"{item.written_kind}:{text}"


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
    written, _, value = text.partition(":")
    kind, negate = _kind(written)
    if kind is None:
        raise BatchInputError(f"unknown assert '{excerpt(text)}'; write kind:value with kind one of "
                              f"{', '.join(ASSERT_KINDS)}, or not- before one (e.g. {_EXAMPLES})")
    value, options = kind.value.read(kind, value.strip())
    return Assert(kind.name, value, options, negate=negate)


def _kind(given: Any) -> tuple[AssertKind | None, bool]:
    """(kind, negated) of a written kind: a kind, or not- before one; (None, False) when it is neither."""
    name = str(given).strip().lower()
    if name in ASSERT_KINDS:
        return ASSERT_KINDS[name], False
    plain = ASSERT_KINDS.get(name[4:]) if name.startswith("not-") else None
    if plain is not None and not plain.negation_of:
        return plain, True
    return None, False


FILES_REFUSED = ("names a file ({name}); on this server an assert written in the Batch tab or in a prompt file "
                 "cannot read files: write its code inline, or upload a promptfooconfig.yaml together with the "
                 "files it reads")


def parse_asserts(specs: Any, where: str = "", files_allowed: bool = True) -> list[Assert]:
    """A list of asserts from a list, one string or dict, or None; errors are prefixed with ``where``.
    ``files_allowed`` False (a server listening beyond this machine): an assert whose code is a file is refused
    before the file is looked at."""
    if specs is None or specs == "":
        return []
    items = specs if isinstance(specs, list) else [specs]
    out = []
    for item in items:
        try:
            name = None if files_allowed else named_file(item)
            if name is not None:
                raise BatchInputError(f"{excerpt(str(item))} " + FILES_REFUSED.format(name=name))
            out.append(parse_assert(item))
        except BatchInputError as exc:
            raise BatchInputError(f"{where}: {exc}" if where else str(exc)) from None
    return out


def named_file(spec: Any) -> str | None:
    """The file a written assert (compact or dict form) runs as code (a javascript or python file, a transform
    file), else None."""
    if isinstance(spec, Mapping):
        kind, value, transform = str(spec.get("type", "")), spec.get("value"), spec.get("transform")
    elif isinstance(spec, str):
        (kind, _, value), transform = spec.strip().partition(":"), None
    else:
        return None
    kind = kind.strip().lower().removeprefix("not-")
    transforms = [transform] if isinstance(transform, str) else transform if isinstance(transform, list) else []
    named = [t for t in transforms if isinstance(t, str) and t.strip().startswith("file://")]
    if isinstance(value, str) and ((kind == "python" and is_python_file(value))
                                   or (kind == "javascript" and js_target(value) is not None)):
        named.insert(0, value)
    return named[0].strip() if named else None


def with_transforms(asserts: Sequence[Assert], transforms: Sequence[str]) -> list[Assert]:
    """``asserts`` with ``transforms`` applied before each one's own."""
    if not transforms:
        return list(asserts)
    return [replace(a, transform=(*transforms, *a.transform)) for a in asserts]


def check_all(asserts: list[Assert], output: str, completion_tokens: int) -> list[AssertResult]:
    return [a.check(output, completion_tokens) for a in asserts]


def _from_dict(spec: Mapping[str, Any]) -> Assert:
    kinds = [k for k in ASSERT_KINDS.values() if k.value.keys and not k.negation_of]
    unknown = set(spec) - {*_DICT_KEYS, *(key for k in kinds for key in k.value.keys)}
    shown = json.dumps(dict(spec), ensure_ascii=False, default=str)[:120]
    if unknown:
        own = ", ".join(f"{key} for {k.name}" for k in kinds for key in k.value.keys)
        raise BatchInputError(f"assert {shown} has unknown key(s) {', '.join(sorted(map(str, unknown)))}; keys: "
                              f"type, value ({own}), weight, threshold, transform, metric, dialect")
    kind, negate = _kind(spec.get("type", spec.get("kind")))
    if kind is None:
        raise BatchInputError(f"assert {shown} needs \"type\" set to one of {', '.join(ASSERT_KINDS)} "
                              "(or not- before one)")
    foreign = set(spec) - {*_DICT_KEYS, *kind.value.keys}
    if "provider" in foreign and kind.name in GRADED:  # promptfoo's grading provider: the run's judge grades here
        raise BatchInputError(own_provider_refused(kind.name))
    if foreign:
        takers = ", ".join(sorted({k.name for k in kinds if foreign & set(k.value.keys)}))
        raise BatchInputError(f"assert {shown}: {', '.join(sorted(map(str, foreign)))} applies to {takers}, "
                              f"not to {kind.name}")
    extra = {k: spec[k] for k in ("weight", "threshold", "transform", "dialect") if spec.get(k) is not None}
    if spec.get("metric") is not None:
        if not isinstance(spec["metric"], str) or not spec["metric"].strip():
            raise BatchInputError(f"assert {shown}: metric must be a name (text)")
        extra["metric"] = spec["metric"]
    value, options = kind.value.read_dict(kind, spec.get("schema", spec.get("value")), spec)
    return Assert(kind.name, value, options, negate=negate, **extra)


def _check_weight(spec: AssertKind, weight: Any, threshold: Any) -> None:
    kind = spec.name
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight) or weight < 0:
        raise BatchInputError(f"{kind}: weight must be a number >= 0, got {weight!r}")
    if threshold is None:
        return
    number = not isinstance(threshold, bool) and isinstance(threshold, (int, float)) and math.isfinite(threshold)
    if spec.threshold_unit and not (number and threshold >= 0):
        raise BatchInputError(f"{kind}: threshold must be a number of {spec.threshold_unit} >= 0, got {threshold!r}")
    if not spec.threshold_unit and not (number and 0 <= threshold <= 1):
        raise BatchInputError(f"{kind}: threshold must be a score between 0 and 1, got {threshold!r}")
