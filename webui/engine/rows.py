"""What the sampling stage works on each step: the rows (one per sequence that samples), their tokens so far,
and the logits either in full ([rows, vocab]) or as candidates (the few tokens a truncation sampler kept).

A row's result never depends on the other rows in its batch: every operation here is per row (elementwise,
gathers, ``topk``, ``softmax`` and ``cumsum`` along the row), and where rows need a common width the padding
sits at the end of each row, after every value a prefix sum reads (so batched = alone, exactly).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence, TypeAlias

import torch

NEG_INF = float("-inf")


class History:
    """One sequence's tokens as a tensor on the logits' device, grown a token at a time (no copy of the list)."""

    __slots__ = ("buffer", "length")

    def __init__(self) -> None:
        self.buffer: torch.Tensor | None = None
        self.length = 0

    def tokens(self, ids: Sequence[int], device: torch.device) -> torch.Tensor:
        n = len(ids)
        if self.buffer is None or self.buffer.device != device or n < self.length:
            self.buffer = torch.empty(max(64, 2 * n), dtype=torch.long, device=device)
            self.length = 0
        if n > self.buffer.numel():
            grown = torch.empty(2 * n, dtype=torch.long, device=device)
            grown[:self.length] = self.buffer[:self.length]
            self.buffer = grown
        if n > self.length:
            self.buffer[self.length:n] = torch.tensor(list(ids[self.length:n]), dtype=torch.long)
            self.length = n
        return self.buffer[:n]


@dataclass
class Rows:
    """The rows of one pass: each one's tokens so far (prompt then output) and its sampling context."""

    ids: list[Sequence[int]]
    contexts: list[Any]
    """Each row's SamplingContext, or None (a processor called on its own)."""
    columns: dict[tuple, torch.Tensor] | None = field(default=None, repr=False)
    """The step's per-row parameter columns, kept by the stage while the same rows sample together (built on the
    first step they do, then read each step); None: built each time (a processor called on its own)."""

    def column(self, procs: Sequence[Any], name: str, like: torch.Tensor) -> torch.Tensor:
        """The rows' parameter ``name`` (an attribute of each row's processor ``procs``) as a [rows, 1] column in
        ``like``'s dtype and device. Only for parameters fixed when the processor is built: a sampler's state
        (mirostat's mu, adaptive-p's target) changes every step and is read with ``per_row``."""
        if self.columns is None:
            return per_row([getattr(p, name) for p in procs], like)
        key = (name, like.dtype, like.device)
        column = self.columns.get(key)
        if column is None:
            column = self.columns[key] = per_row([getattr(p, name) for p in procs], like)
        return column

    def history(self, r: int, device: torch.device) -> torch.Tensor:
        ctx = self.contexts[r]
        if ctx is None:
            return torch.tensor(list(self.ids[r]), dtype=torch.long, device=device)
        return ctx.history.tokens(self.ids[r], device)

    def windows(self, spans: Sequence[tuple[int, int]], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """Every row's tokens ``ids[start:end]`` (``spans``, one a row) as flat (row, token) index tensors."""
        parts = [self.history(r, device)[start:end] for r, (start, end) in enumerate(spans)]
        lengths = torch.tensor([p.numel() for p in parts], device=device)
        rows = torch.repeat_interleave(torch.arange(len(parts), device=device), lengths)
        return rows, (torch.cat(parts) if parts else torch.empty(0, dtype=torch.long, device=device))


def window_span(length: int, start: int, last_n: int) -> tuple[int, int]:
    """The tokens ``[start, length)``, the last ``last_n`` of them when set (0: all)."""
    return (max(start, length - last_n) if last_n > 0 else start), length


def row_sums(t: torch.Tensor, parts: int = 64) -> torch.Tensor:
    """Each row's sum [rows, 1], the same for a row alone as in any batch: the row is cut into ``parts`` pieces
    summed one output each (parallel threads split outputs, never a piece), then added in order."""
    pad = (-t.shape[-1]) % parts
    if pad:
        t = torch.nn.functional.pad(t, (0, pad))
    return t.reshape(t.shape[0], parts, -1).sum(-1).cumsum(-1)[:, -1:]


def first_max(x: torch.Tensor, block: int = 64) -> torch.Tensor:
    """Each row's argmax [rows, 1] (the first of equal maxima, as ``argmax``). On a CPU ``argmax`` over a large
    vocabulary is a scalar loop (1.1 ms for 16 rows of 49k logits) while ``amax`` is vectorised, so the row is
    cut into blocks: the first block holding the row's maximum (argmax over the blocks' maxima), then the first
    maximum inside it. 6x faster there; other devices take ``argmax`` as it is."""
    if x.device.type != "cpu" or x.shape[-1] < 4 * block:
        return x.argmax(-1, keepdim=True)
    rows, vocab = x.shape
    pad = (-vocab) % block
    if pad:  # -inf after the row: never before a maximum, so never the first one
        x = torch.nn.functional.pad(x, (0, pad), value=NEG_INF)
    blocks = x.reshape(rows, -1, block)
    which = blocks.amax(-1).argmax(-1, keepdim=True)
    inner = blocks.gather(1, which.unsqueeze(-1).expand(rows, 1, block)).squeeze(1).argmax(-1, keepdim=True)
    return which * block + inner


def per_row(values: Sequence[float], like: torch.Tensor) -> torch.Tensor:
    """A [rows, 1] column of per-row parameters in ``like``'s dtype and device."""
    return torch.tensor(values, dtype=like.dtype, device=like.device).unsqueeze(1)


@dataclass
class Candidates:
    """The tokens still in play after a truncation sampler, per row: ``values`` [rows, K] in descending order (ties
    by token id, as a stable sort of the full row orders them) and their token ``index`` [rows, K]. Each row holds
    K distinct tokens; a token dropped since is -inf, like every token not listed. Samplers that only drop the
    least likely keep that order; the stage sorts again after any other (``Processor.keeps_order``)."""

    values: torch.Tensor
    index: torch.Tensor
    vocab: int

    def sorted(self) -> "Candidates":
        return ordered(self.values, self.index, self.vocab)

    def dense(self) -> torch.Tensor:
        out = torch.full((self.values.shape[0], self.vocab), NEG_INF, dtype=self.values.dtype,
                         device=self.values.device)
        return out.scatter_(1, self.index, self.values)

    def weights(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Unnormalised probabilities ``exp(v - top)`` and their running sum (the total is the last column)."""
        e = (self.values - self.values[:, :1]).exp()
        return e, e.cumsum(-1)

    def drop(self, mask: torch.Tensor) -> "Candidates":
        """Drop the masked candidates; a row's first (most likely) one always stays."""
        mask = mask.clone()
        mask[:, 0] = False
        return Candidates(self.values.masked_fill(mask, NEG_INF), self.index, self.vocab)


def ordered(values: torch.Tensor, index: torch.Tensor, vocab: int) -> Candidates:
    """Candidates in descending order, ties by token id (dropped ones, at -inf, last)."""
    by_id = index.argsort(dim=-1)
    values, index = values.gather(1, by_id), index.gather(1, by_id)
    order = values.argsort(dim=-1, descending=True, stable=True)
    return Candidates(values.gather(1, order), index.gather(1, order), vocab)


def top_candidates(x: torch.Tensor, k: int) -> Candidates:
    """The ``k`` largest logits of each row of ``x`` in descending order, ties by token id."""
    values, index = torch.topk(x, k, dim=-1)
    return ordered(values, index, x.shape[-1])


State: TypeAlias = "torch.Tensor | Candidates"


def dense(state: Any) -> torch.Tensor:
    return state.dense() if isinstance(state, Candidates) else state
