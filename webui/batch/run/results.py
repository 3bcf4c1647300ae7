"""Batch results as plain data: one ResultRow per cell, per-setting summaries, pivots, comparisons.

A ResultRow holds only what a cell produced and how (no run id, no timestamps),
so rows from different runs can be compared and exported alike.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from statistics import fmean
from typing import TYPE_CHECKING, Any, Iterable, Mapping, NamedTuple, Sequence

from webui.batch.asserts.graded import COMPARING
from webui.batch.asserts.types import AssertResult, Observed, row_score
from webui.batch.asserts.errors import BatchInputError
from webui.batch.run.grid import Cell
from webui.chat.tool_loop import ToolStep, history_of

if TYPE_CHECKING:
    from webui.embeddings import TextEmbeddings
    from webui.store.batch_runs import RanOn

SAMPLE_SEPARATOR = "\n\n---\n\n"
PROMPT_LABEL_LENGTH = 60


@dataclass(frozen=True)
class ResultRow:
    """What one cell produced. ``passed`` is None when the prompt has no asserts; a cell that
    failed with ``error`` has passed False (when it has asserts) and no assert results."""

    prompt_index: int
    prompt_id: str
    prompt: str
    setting: str
    params: dict[str, Any] = field(hash=False)
    sample: int
    seed: int
    output: str
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    ttft: float | None = None
    tokens_per_second: float | None = None
    asserts: list[AssertResult] = field(default_factory=list, hash=False)
    passed: bool | None = None
    error: str | None = None
    cached_tokens: int = 0  # prompt tokens the prefix cache served (rows stored before it existed: 0)
    score: float | None = None  # the asserts' weighted mean score (None: no asserts, or rows from before scores)
    from_cache: bool = False  # taken from the response cache (the same request ran before), not generated now
    review: dict[str, str] | None = field(default=None, hash=False)
    """A person's verdict: {"verdict": "good" or "bad", "note": text}; None: not reviewed."""
    model: str | None = None
    """The id of the loaded model that made it (webui.models.model_id: NAME, or NAME@loader off the model's default
    loader); rows stored before runs had several models: None."""
    loader: str | None = None  # the loader it ran on (rows stored before rows kept it: None)
    load_options: dict[str, Any] | None = field(default=None, hash=False)
    """The loader's options the model was loaded with (loaders/options.py); rows stored before: None."""
    output_json: bool = False
    """The output is the JSON text of a value the provider returned instead of text (a promptfoo provider's tool
    calls): promptfoo's export writes the value itself."""
    tool_steps: list[dict[str, Any]] | None = field(default=None, hash=False)
    """The steps of the row's tool loop (webui.chat.tool_loop.ToolStep.to_dict(): the model's text and its calls,
    each with its arguments, result, error and time), its output being the final answer; None: no loop ran."""

    def __post_init__(self) -> None:
        if self.error == "":
            object.__setattr__(self, "error", None)

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        d["asserts"] = [a.to_dict() for a in self.asserts]
        if self.tool_steps is None:  # rows without a tool loop keep the shape they always had
            del d["tool_steps"]
        return d

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "") -> "ResultRow":
        """The inverse of :meth:`to_dict`; missing or mistyped fields are a BatchInputError."""
        prefix = f"{where}: " if where else ""
        names = [f.name for f in dataclasses.fields(cls)]
        missing = [n for n in names if n not in data and n not in _OPTIONAL]
        if missing:
            raise BatchInputError(f"{prefix}missing field(s) {', '.join(missing)}")
        values = {n: data.get(n, _OPTIONAL.get(n)) for n in names}
        values["asserts"] = _assert_results(data["asserts"], prefix)
        values["review"] = check_review(values["review"], prefix)
        values["tool_steps"] = _tool_steps(values["tool_steps"], prefix)
        _check_types(values, prefix)
        return cls(**values)


def _assert_results(items: Any, prefix: str) -> list[AssertResult]:
    def number(value: Any) -> bool:
        return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool))

    def ok(a: Any) -> bool:
        return (isinstance(a, Mapping) and isinstance(a.get("label"), str) and isinstance(a.get("passed"), bool)
                and isinstance(a.get("detail", ""), str) and number(a.get("score")) and number(a.get("weight")))

    if not isinstance(items, list) or not all(ok(a) for a in items):
        raise BatchInputError(f"{prefix}asserts must be a list of {{\"label\": text, \"passed\": true/false, "
                              f"\"detail\": text, \"score\": number, \"weight\": number}}, got {items!r:.200}")
    return [AssertResult(a["passed"], a.get("detail", ""), a["label"],
                         None if a.get("score") is None else float(a["score"]), float(a.get("weight", 1.0)))
            for a in items]


_OPTIONAL = {"cached_tokens": 0, "score": None, "review": None, "from_cache": False, "model": None, "loader": None,
             "load_options": None, "output_json": False, "tool_steps": None}
REVIEW_VERDICTS = ("good", "bad")  # fields added later, so rows stored or exported before them still load
_TYPES: dict[str, tuple[type, ...]] = {
    "prompt_index": (int,), "prompt_id": (str,), "prompt": (str,), "setting": (str,), "params": (dict,),
    "sample": (int,), "seed": (int,), "output": (str,), "finish_reason": (str,), "prompt_tokens": (int,),
    "completion_tokens": (int,), "cached_tokens": (int,), "ttft": (int, float, type(None)),
    "tokens_per_second": (int, float, type(None)), "score": (int, float, type(None)),
    "passed": (bool, type(None)), "error": (str, type(None)), "from_cache": (bool,), "model": (str, type(None)),
    "loader": (str, type(None)), "load_options": (dict, type(None)), "output_json": (bool,),
    "tool_steps": (list, type(None)),
}


def _tool_steps(steps: Any, prefix: str) -> list[dict[str, Any]] | None:
    """Stored tool steps, checked by reading them as ToolSteps."""
    if steps is None:
        return None
    try:
        return [ToolStep.from_dict(s).to_dict() for s in steps]
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise BatchInputError(f"{prefix}tool_steps must be a list of {{\"text\", \"calls\": [{{\"id\", \"name\", "
                              f"\"arguments\", \"result\", ...}}]}} ({type(exc).__name__}: {exc})") from None


def step_calls(steps: list[dict[str, Any]] | None) -> tuple[dict[str, Any], ...] | None:
    """The calls a tool loop made, every step's, as OpenAI writes them (what call asserts read); None: no loop."""
    if steps is None:
        return None
    return tuple(call for m in history_of([ToolStep.from_dict(s) for s in steps]) if m["role"] == "assistant"
                 for call in m["tool_calls"])


def check_review(review: Any, prefix: str = "") -> dict[str, str] | None:
    """A review as stored: None, or {"verdict": "good"|"bad", "note": text}."""
    if review is None:
        return None
    if not isinstance(review, Mapping) or review.get("verdict") not in REVIEW_VERDICTS \
            or not isinstance(review.get("note", ""), str):
        raise BatchInputError(f"{prefix}review must be {{\"verdict\": \"good\" or \"bad\", \"note\": text}}, "
                              f"got {review!r:.120}")
    return {"verdict": review["verdict"], "note": review.get("note", "")}


def _check_types(values: dict[str, Any], prefix: str) -> None:
    for name, types in _TYPES.items():
        value = values[name]
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            raise BatchInputError(f"{prefix}{name} has the wrong type: {value!r}")
    for name in ("ttft", "tokens_per_second", "score"):
        if isinstance(values[name], int):
            values[name] = float(values[name])


def asserts_pass(results: Sequence[AssertResult], sets: Sequence[tuple[Sequence[int], float]] = ()) -> bool:
    """Whether a row's asserts pass it: each one outside a set with a threshold, and each such set by its asserts'
    weighted score against its threshold (promptfoo's assert-set ``threshold``)."""
    grouped = {i for members, _ in sets for i in members}
    return all(r.passed for i, r in enumerate(results) if i not in grouped) and all(
        (row_score([results[i] for i in members]) or 0.0) >= limit for members, limit in sets)


@dataclass(frozen=True)
class Generated:
    """What a cell's model gave: the reply ``result_for`` checks and keeps (the response cache keeps the fields in
    RESPONSE_FIELDS of it)."""

    output: str
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0  # prompt tokens the prefix cache served
    ttft: float | None = None
    tokens_per_second: float | None = None
    error: str | None = None
    output_value: Any = None
    """The output as the provider returns it when that is not text (Observed.output_value); None: text."""
    tool_steps: list[dict[str, Any]] | None = None
    """The row's tool loop (ResultRow.tool_steps); None: no loop ran."""
    logprobs: tuple[float, ...] = ()
    """The chosen tokens' logprobs, for perplexity asserts (not stored in the row)."""

    def response(self) -> dict[str, Any]:
        """The fields the response cache keeps."""
        return {k: getattr(self, k) for k in RESPONSE_FIELDS}

    @classmethod
    def from_response(cls, data: Mapping[str, Any]) -> "Generated":
        """A reply the response cache kept (entries from before ``cached_tokens``: 0)."""
        return cls(str(data["output"]), str(data["finish_reason"]), int(data["prompt_tokens"]),
                   int(data["completion_tokens"]), int(data.get("cached_tokens", 0)), data.get("ttft"),
                   data.get("tokens_per_second"))


RESPONSE_FIELDS = ("output", "finish_reason", "prompt_tokens", "completion_tokens", "cached_tokens", "ttft",
                   "tokens_per_second")


def result_for(cell: Cell, made: Generated, ran: RanOn | None = None, *, from_cache: bool = False,
               judged: Mapping[str, Any] | None = None, embeddings: TextEmbeddings | None = None) -> ResultRow:
    """Check ``cell``'s asserts on what its model ``made`` and make its ResultRow (asserts are not run on an error).
    ``ran``: the model it ran on (None: not known); ``from_cache``: ``made`` came from the response cache;
    ``judged``: the judge's verdicts, for graded asserts; ``embeddings``: the output's and the references' vectors,
    for similar asserts."""
    error = made.error or None
    seen = Observed(made.output, made.completion_tokens, made.ttft, made.tokens_per_second, cell.row.text,
                    judged or {}, cell.row.variables, str((cell.row.origin or {}).get("description") or ""),
                    made.finish_reason, tuple(made.logprobs), embeddings, made.output_value,
                    step_calls(made.tool_steps))
    asserts = [] if error else [a.check(seen) for a in cell.row.asserts]
    score, passed = _outcome(cell, asserts, error)
    return ResultRow(
        prompt_index=cell.row.index, prompt_id=cell.row.id, prompt=cell.row.text, setting=cell.setting.label,
        params=cell.params.to_dict(), sample=cell.sample, seed=cell.seed, output=made.output,
        finish_reason=made.finish_reason, prompt_tokens=made.prompt_tokens, completion_tokens=made.completion_tokens,
        ttft=made.ttft, tokens_per_second=made.tokens_per_second, cached_tokens=made.cached_tokens, asserts=asserts,
        passed=passed, error=error, score=score, from_cache=from_cache, model=ran.model if ran else None,
        loader=ran.loader if ran else None,
        load_options=None if ran is None or ran.load_options is None else dict(ran.load_options),
        output_json=made.output_value is not None, tool_steps=made.tool_steps)


def _outcome(cell: Cell, asserts: list[AssertResult], error: str | None) -> tuple[float | None, bool | None]:
    """A row's (score, passed) from its asserts' results."""
    score = (0.0 if error else row_score(asserts)) if cell.row.asserts else None
    if not cell.row.asserts:
        return score, None
    if cell.row.threshold is not None:  # promptfoo's test threshold: the weighted score decides
        return score, error is None and (score if score is not None else 0.0) >= cell.row.threshold
    return score, error is None and asserts_pass(asserts, cell.row.sets)


def rejudged(row: ResultRow, cell: Cell, judged: Mapping[str, Any]) -> ResultRow:
    """``row`` with its select-best and max-score asserts checked again with the verdicts ``judged`` (given once
    every output of the test is known), and its score and pass with them."""
    if row.error:
        return row
    seen = Observed(row.output, row.completion_tokens, row.ttft, row.tokens_per_second, cell.row.text, judged,
                    cell.row.variables, str((cell.row.origin or {}).get("description") or ""), row.finish_reason,
                    tool_calls=step_calls(row.tool_steps))
    asserts = [a.check(seen) if a.kind in COMPARING else result
               for a, result in zip(cell.row.asserts, row.asserts)]
    score, passed = _outcome(cell, asserts, None)
    return dataclasses.replace(row, asserts=asserts, score=score, passed=passed)


# -- summaries -----------------------------------------------------------------------

@dataclass(frozen=True)
class SettingSummary:
    """Pass counts and speed for one setting; ``pass_rate`` is None when no row had asserts."""

    label: str
    rows: int
    passed: int
    failed: int
    pass_rate: float | None
    mean_tokens_per_second: float | None
    mean_ttft: float | None
    errors: int = 0
    mean_score: float | None = None
    pass_interval: tuple[float, float] | None = None
    """95% Wilson interval of the pass rate, when the run drew more than one sample per prompt."""
    good: int = 0
    bad: int = 0
    """Rows a person marked good / bad."""


def summarize(rows: Iterable[ResultRow]) -> list[SettingSummary]:
    """One summary per setting, in the order settings first appear, then, when the rows come from several
    models, one per model over all its settings ("model=NAME (all settings)"). Errors count as failures."""
    rows = list(rows)
    groups: dict[str, list[ResultRow]] = {}
    for row in rows:
        groups.setdefault(row.setting, []).append(row)
    models: dict[str, list[ResultRow]] = {}
    for row in rows:
        if row.model is not None:
            models.setdefault(f"model={row.model} (all settings)", []).append(row)
    if len(models) > 1:
        groups.update(models)
    return [_summary(label, group) for label, group in groups.items()]


def _summary(label: str, group: list[ResultRow]) -> SettingSummary:
    passed = sum(1 for r in group if r.passed is True)
    failed = sum(1 for r in group if r.passed is False)
    ok = [r for r in group if r.error is None]
    sampled = any(r.sample > 0 for r in group)
    return SettingSummary(
        label, len(group), passed, failed, passed / (passed + failed) if passed + failed else None,
        _mean(r.tokens_per_second for r in ok), _mean(r.ttft for r in ok),
        sum(1 for r in group if r.error is not None), _mean(r.score for r in group),
        wilson(passed, passed + failed) if sampled and passed + failed else None,
        sum(1 for r in group if (r.review or {}).get("verdict") == "good"),
        sum(1 for r in group if (r.review or {}).get("verdict") == "bad"))


def wilson(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of a proportion (95% by default): sound for small n and rates near 0 or 1."""
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def _mean(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return fmean(present) if present else None


def prompt_label(row: ResultRow, length: int = PROMPT_LABEL_LENGTH) -> str:
    """``id: first line of the prompt…`` for tables."""
    text = " ".join(row.prompt.split())
    text = text if len(text) <= length else text[:length - 1] + "…"
    return f"{row.prompt_id}: {text}"


def cell_text(row: ResultRow) -> str:
    """The output as a table shows it (an error shows as ``[error: ...]``)."""
    return f"[error: {row.error}]" if row.error is not None else row.output


def pivot(rows: Iterable[ResultRow], separator: str = SAMPLE_SEPARATOR
          ) -> tuple[list[str], list[str], list[list[str]]]:
    """(prompt labels, setting labels, matrix[prompt][setting]) of outputs, samples joined by ``separator``
    in sample order; a missing cell is ""."""
    rows = list(rows)
    prompts: dict[int, str] = {}
    settings: dict[str, None] = {}
    for row in sorted(rows, key=lambda r: r.prompt_index):
        prompts.setdefault(row.prompt_index, prompt_label(row))
    for row in rows:
        settings.setdefault(row.setting, None)
    p_at = {index: i for i, index in enumerate(prompts)}
    s_at = {label: j for j, label in enumerate(settings)}
    cells: list[list[list[ResultRow]]] = [[[] for _ in settings] for _ in prompts]
    for row in rows:
        cells[p_at[row.prompt_index]][s_at[row.setting]].append(row)
    matrix = [[separator.join(cell_text(r) for r in sorted(c, key=lambda r: r.sample)) for c in line]
              for line in cells]
    return list(prompts.values()), list(settings), matrix


class Comparison(NamedTuple):
    """One (prompt, sample) in two result sets; an output is None where that side lacks it."""

    prompt: str
    sample: int
    output_a: str | None
    output_b: str | None
    same: bool


def compare(rows_a: Sequence[ResultRow], rows_b: Sequence[ResultRow]) -> list[Comparison]:
    """Pair rows by (prompt_index, sample), e.g. one setting against another or one run against another.

    Each side must hold one row per key (pass one setting's rows); pairs come sorted by key.
    """
    a, b = _by_key(rows_a, "a"), _by_key(rows_b, "b")
    out = []
    for key in sorted(a.keys() | b.keys()):
        ra, rb = a.get(key), b.get(key)
        prompt = (ra or rb).prompt  # type: ignore[union-attr]
        out_a = cell_text(ra) if ra else None
        out_b = cell_text(rb) if rb else None
        out.append(Comparison(prompt, key[1], out_a, out_b, ra is not None and rb is not None and out_a == out_b))
    return out


def _by_key(rows: Sequence[ResultRow], side: str) -> dict[tuple[int, int], ResultRow]:
    keyed: dict[tuple[int, int], ResultRow] = {}
    for row in rows:
        key = (row.prompt_index, row.sample)
        if key in keyed:
            raise BatchInputError(f"compare: side {side} has two rows for prompt {row.prompt_id}, sample {row.sample} "
                                  f"(settings '{keyed[key].setting}' and '{row.setting}'); pass one setting's rows")
        keyed[key] = row
    return keyed


def rows_for_setting(rows: Iterable[ResultRow], label: str) -> list[ResultRow]:
    return [r for r in rows if r.setting == label]
