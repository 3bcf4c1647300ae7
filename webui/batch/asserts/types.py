"""What the asserts pass around, with no behaviour of their own: a check's :class:`Outcome`, what it looks at
(:class:`Observed`), a judge's :class:`Verdict`, an assert's :class:`AssertResult`, and what a check or a value form
reads of an assert (:class:`AssertData`) and of its kind (:class:`KindData`).

A leaf: nothing here imports the rest of the asserts, so every check module can name these types without importing
the module that imports every check. :class:`webui.batch.asserts.assertion.Assert` (which validates itself against
the kinds table) is the one class that is an :class:`AssertData`; :class:`webui.batch.asserts.kinds.AssertKind` the
one that is a :class:`KindData`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, NamedTuple, Protocol, Sequence

if TYPE_CHECKING:
    from webui.embeddings import TextEmbeddings


class Outcome(NamedTuple):
    """What a kind's check says of one output: passed, why it failed, a score (None: yes/no check), and whether
    the score against the threshold decides."""

    passed: bool
    why: str
    score: float | None = None
    by_score: bool = False
    broken: bool = False
    """The check could not judge the output (a regex match stopped at its time limit, an object value against
    output that is not JSON): it fails, ``not-`` or not."""


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
    """The graded asserts' verdicts (by :func:`webui.batch.asserts.graded.verdict_key`): what the judge said of this
    output."""
    variables: Mapping[str, str] = field(default_factory=dict)
    """The row's variables (a promptfoo test's vars), which scripts see as ``context.vars``."""
    description: str = ""
    """The row's test description (promptfoo's), "" when it has none."""
    finish_reason: str = ""
    """Why generation stopped (stop, length, ...); "": not known."""
    logprobs: Sequence[float] = ()
    """The chosen tokens' logprobs under the model (perplexity asserts ask the runner for them); (): none."""
    embeddings: TextEmbeddings | None = None
    """Vectors of the output (and of it as each assert's transform rewrites it) and of the ``similar`` references,
    from the run's embedding model; None: no model gives them (``similar`` then scores by trigrams)."""
    output_value: Any = None
    """The output as the provider returns it when that is not text (a reply of tool calls: the calls, as
    promptfoo's openai provider returns them; ``output`` is then their JSON), which python and javascript asserts
    and transforms get as ``output``; None: the output is the text."""

    tool_calls: tuple[Mapping[str, Any], ...] | None = None
    """The calls the row's tool loop made, every step's, as OpenAI writes them ({id, type, function: {name,
    arguments}}), which the call asserts read (webui.batch.asserts.tool_checks); None: the row ran no loop (they read
    the calls its output is)."""

    @property
    def script_output(self) -> Any:
        """What a python or javascript assert or a transform gets as ``output``."""
        return self.output if self.output_value is None else self.output_value


@dataclass(frozen=True)
class Verdict:
    """A judge model's verdict on one output against one rubric."""

    passed: bool
    score: float
    reason: str
    unscored: bool = False
    """True: no score could be computed (the judge could not answer, answer-relevance had no embeddings): the
    assert fails whatever its threshold, negated or not."""


def row_score(results: list[AssertResult]) -> float | None:
    """The weighted mean of the asserts' scores (None without asserts, or with no weight at all)."""
    total = sum(r.weight for r in results)
    return sum(r.value * r.weight for r in results) / total if results and total > 0 else None




class AssertData(Protocol):
    """What a check, a value form or a promptfoo reader reads of an assert (webui.batch.asserts.assertion.Assert)."""

    @property
    def kind(self) -> str: ...
    @property
    def value(self) -> Any: ...
    @property
    def options(self) -> Mapping[str, Any]: ...
    @property
    def negate(self) -> bool: ...
    @property
    def weight(self) -> float: ...
    @property
    def threshold(self) -> float | None: ...
    @property
    def transform(self) -> tuple[str, ...]: ...
    @property
    def metric(self) -> str | None: ...
    @property
    def dialect(self) -> str: ...
    @property
    def pass_at(self) -> float: ...
    @property
    def written_kind(self) -> str: ...


class KindData(Protocol):
    """What a value form reads of its kind (webui.batch.asserts.kinds.AssertKind) for its messages."""

    @property
    def name(self) -> str: ...
    @property
    def example(self) -> str: ...
    @property
    def unit(self) -> str: ...
    @property
    def usage(self) -> str: ...
