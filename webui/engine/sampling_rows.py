"""How the sampling stage lays out the rows of a step: which rows go through one pass, the steps of that pass
with the rows that run each one, and the rows' parameter columns, kept while the same sequences sample together.

A pass runs the union of its rows' pipelines: every step any row has, in an order that keeps each row's own
order (a shortest common supersequence of the rows' step lists, so rows with ``temperature_last``, a different
``sampler_priority`` or other samplers on still share the pass). A step that only some rows have runs on those
rows alone (their logits picked out, processed, put back): a row never goes through a step it does not have,
not even with a neutral value, because the neutral values are not all exact no-ops (top_p 1 still drops tokens
whose probability rounds to 0, smoothing factor 0 flattens the row) and the samplers with per-row Python state
(DRY, no-repeat n-grams, structured output, mirostat, adaptive-p, XTC's draw) must not see a step they did not
take. So each row gets exactly the tokens it gets alone.

What still splits the rows of a step into passes: top_k. After it a row is a few ``Candidates`` instead of the
whole vocabulary, and a row alone and in a batch must hold the same ones: so the rows with top_k on share a pass
by k (top_k is the pass's anchor, every row there has it at the same step), and the rows without it (greedy ones
included; each draws its own way) share another. Where some rows of a top_k pass have a step after it that works
only on the whole vocabulary and others do not, those rows cannot share it and take a pass of their own.

``SamplingRows`` keeps the passes of the step before: while the same sequences sample (every decoding step
between a sequence joining and one leaving), the passes, their row indices on the device and the parameter
columns the samplers read (``Rows.column``) are reused instead of built again from Python lists; a change of
rows builds them once for the new rows, and the passes of rows that left are dropped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, Sequence, TypeVar

import torch

from webui.engine.rows import Candidates, State
from webui.engine.samplers import Processor

ANCHOR = "top_k"


class RowSampler(Protocol):
    """What a pass reads of a row's ``sampling.Sampler``."""

    @property
    def params(self) -> Any: ...

    @property
    def processors(self) -> list[tuple[str, Processor]]: ...

    @property
    def key(self) -> object: ...


Sampler = TypeVar("Sampler", bound=RowSampler)


@dataclass
class Step:
    """One step of a pass: its processor class, the rows that run it (their places in the pass) and each one's
    processor, and the columns of those rows' parameters (filled as the samplers read them)."""

    kind: type[Processor]
    members: list[int]
    procs: list[Processor]
    everyone: bool
    columns: dict[tuple, torch.Tensor] = field(default_factory=dict, repr=False)
    _index: dict[torch.device, torch.Tensor] = field(default_factory=dict, repr=False)

    def index(self, device: torch.device) -> torch.Tensor:
        """The members as a tensor on ``device`` (made once)."""
        index = self._index.get(device)
        if index is None:
            index = self._index[device] = torch.tensor(self.members, dtype=torch.long, device=device)
        return index


class Pass(Generic[Sampler]):
    """Rows that go through the stage together: their samplers and the union of their pipelines."""

    def __init__(self, samplers: Sequence[Sampler], steps: list[Step] | None = None):
        self.samplers: list[Sampler] = list(samplers)
        if steps is None:
            steps = union_steps(self.samplers)
            if steps is None:
                raise ValueError("these rows cannot share a pass: build_passes splits them")
        self.steps = steps
        self.greedy = [s.params.greedy for s in self.samplers]
        self._places: dict[tuple[bool, torch.device], torch.Tensor] = {}

    def places(self, greedy: bool, device: torch.device) -> torch.Tensor:
        """The rows that draw greedily (or not), as a tensor on ``device`` (made once)."""
        key = (greedy, device)
        if key not in self._places:
            self._places[key] = torch.tensor([r for r, g in enumerate(self.greedy) if g == greedy],
                                             dtype=torch.long, device=device)
        return self._places[key]


def step_names(sampler: RowSampler) -> tuple[str, ...]:
    return tuple(name for name, _ in sampler.processors)


def merge(a: Sequence[str], b: Sequence[str]) -> list[str]:
    """A shortest sequence holding both ``a`` and ``b`` as subsequences (through their longest common one)."""
    n, m = len(a), len(b)
    common = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(n - 1, -1, -1):
        for j in range(m - 1, -1, -1):
            common[i][j] = common[i + 1][j + 1] + 1 if a[i] == b[j] else max(common[i + 1][j], common[i][j + 1])
    out: list[str] = []
    i = j = 0
    while i < n and j < m:
        if a[i] == b[j]:
            out.append(a[i])
            i, j = i + 1, j + 1
        elif common[i + 1][j] >= common[i][j + 1]:
            out.append(a[i])
            i += 1
        else:
            out.append(b[j])
            j += 1
    return out + list(a[i:]) + list(b[j:])


def _embed(seq: Sequence[str], union: Sequence[str], start: int) -> list[int]:
    """Where each step of ``seq`` sits in ``union`` (from ``start`` on), matched leftmost."""
    places, u = [], start
    for name in seq:
        while union[u] != name:
            u += 1
        places.append(u)
        u += 1
    return places


def _parts(names: tuple[str, ...], anchored: bool) -> list[tuple[str, ...]]:
    """A row's steps before the anchor, the anchor, after it (or all of them, where the pass has no anchor)."""
    if not anchored:
        return [names]
    at = names.index(ANCHOR)
    return [names[:at], names[at:at + 1], names[at + 1:]]


def union_steps(samplers: Sequence[RowSampler]) -> list[Step] | None:
    """The steps of one pass over ``samplers`` (rows alike in top_k: all of them with the same k, or none with
    it), each with the rows that run it; None where they cannot share one (a step after top_k that works only on
    the whole vocabulary, which some rows have and others not)."""
    rows = [step_names(s) for s in samplers]
    anchored = bool(rows) and all(ANCHOR in names for names in rows)
    if not anchored and any(ANCHOR in names for names in rows):
        return None
    parts = [_parts(names, anchored) for names in rows]
    union: list[str] = []
    bounds = []
    for k in range(len(parts[0]) if parts else 0):
        merged: list[str] = []
        for seq in dict.fromkeys(p[k] for p in parts):
            merged = merge(merged, seq)
        bounds.append(len(union))
        union += merged
    runs: list[list[tuple[int, Processor]]] = [[] for _ in union]
    for r, (sampler, row_parts) in enumerate(zip(samplers, parts)):
        places = [u for k, seq in enumerate(row_parts) for u in _embed(seq, union, bounds[k])]
        for u, (_, proc) in zip(places, sampler.processors):
            runs[u].append((r, proc))
    steps = []
    after_anchor = False
    for name, run in zip(union, runs):
        kind = type(run[0][1])
        everyone = len(run) == len(samplers)
        if after_anchor and not everyone and not kind.on_candidates:
            return None
        after_anchor = after_anchor or name == ANCHOR
        steps.append(Step(kind, [r for r, _ in run], [p for _, p in run], everyone))
    return steps


class SamplingRows(Generic[Sampler]):
    """The passes of the rows that sampled last, kept while the same sequences sample together (see the module's
    docstring). One per engine (its scheduler thread); the stage builds them afresh without one."""

    KEEP = 4
    """Row sets remembered (a step where a sequence is still reading its prompt samples fewer rows)."""

    def __init__(self) -> None:
        self._kept: dict[tuple[int, ...], tuple[list[Sampler], list[tuple[list[int], Pass[Sampler]]]]] = {}

    def passes(self, samplers: Sequence[Sampler]) -> list[tuple[list[int], Pass[Sampler]]]:
        """The passes over ``samplers`` (each with its rows' places among them), built once for these rows."""
        key = tuple(id(s) for s in samplers)
        kept = self._kept.pop(key, None)  # holding the samplers keeps their ids from being reused
        passes = kept[1] if kept is not None else build_passes(samplers)
        self._kept[key] = (list(samplers), passes)
        while len(self._kept) > self.KEEP:  # the oldest first: rows that left
            del self._kept[next(iter(self._kept))]
        return passes


def build_passes(samplers: Sequence[Sampler]) -> list[tuple[list[int], Pass[Sampler]]]:
    """The rows grouped into passes: by top_k (see the module's docstring); a top_k group that cannot share one
    pass is split, each row joining the first pass it can share."""
    groups: dict[object, list[int]] = {}
    for r, sampler in enumerate(samplers):
        groups.setdefault(sampler.key, []).append(r)
    out: list[tuple[list[int], Pass[Sampler]]] = []
    for members in groups.values():
        steps = union_steps([samplers[r] for r in members])
        if steps is not None:
            out.append((members, Pass([samplers[r] for r in members], steps)))
            continue
        split: list[list[int]] = []
        for r in members:
            joined = next((rows for rows in split if union_steps([samplers[i] for i in [*rows, r]]) is not None),
                          None)
            if joined is None:
                split.append([r])
            else:
                joined.append(r)
        out += [(rows, Pass([samplers[r] for r in rows])) for rows in split]
    return out


def pick(state: State, index: torch.Tensor) -> State:
    """The rows ``index`` of ``state``."""
    if isinstance(state, Candidates):
        return Candidates(state.values.index_select(0, index), state.index.index_select(0, index), state.vocab)
    return state.index_select(0, index)


def put(state: State, index: torch.Tensor, part: State) -> State:
    """``state`` with its rows ``index`` replaced by ``part``, in place (the state is the stage's own copy of the
    logits; ``part`` was picked out of it). Both have the same form: a step that only some rows of a pass run never
    turns the whole vocabulary into candidates, since top_k is every row's."""
    if isinstance(state, Candidates) and isinstance(part, Candidates):
        state.values.index_copy_(0, index, part.values)
        state.index.index_copy_(0, index, part.index)
        return state
    if isinstance(state, torch.Tensor) and isinstance(part, torch.Tensor):
        return state.index_copy_(0, index, part)
    raise TypeError("a step run on some rows of a pass changed their form")
