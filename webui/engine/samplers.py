"""Every sampler is defined once: a per-sequence object holding its parameters (and state), whose class runs it
over many rows at once. This module has the base class, the constraints and the penalties; the samplers that
shape or cut the distribution drawn from are in ``shaping.py``.

``Processor.batch`` takes the objects of every row in a batch and the rows' logits [rows, vocab] and returns
the new logits, or ``Candidates`` when it keeps few tokens (top_k): the samplers after it then work on those
few (``Processor.candidates``) instead of the whole vocabulary. Samplers with state or a draw of their own
(mirostat, adaptive-p, XTC, DRY, structured output) run row by row (``Processor.row``). Calling a processor
on one 1-D row of logits runs it as a batch of one, so each sampler has one implementation.

A sampler's class also says which step of ``sampler_table.SAMPLERS`` it is (``step``) and how that step is built
from a sequence's parameters (``build``); defining it registers it in ``STEPS``, which ``sampling.py`` checks
against the table on import. So a new sampler is a SamplingParams field, its class here or in ``shaping.py``,
and its table row.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Sequence

import torch

from webui.engine.rows import NEG_INF, Candidates, Rows, State, dense, window_span
from webui.engine.structured import mask_for

if TYPE_CHECKING:
    from webui.engine.params import SamplingParams

STEPS: dict[str, type["Processor"]] = {}
"""Each step of ``sampler_table.SAMPLERS`` -> the Processor class that builds it (filled as the classes are
defined)."""


def sequence_breaker_ids(tokenizer: Any, breakers: Sequence[str]) -> set[int]:
    """Each breaker string's token as it ends a text (text-generation-webui encodes "a" + breaker)."""
    if tokenizer is None:
        return set()
    return {ids[-1] for b in breakers if (ids := tokenizer.encode("a" + b, add_special_tokens=False))}


def newline_ids(tokenizer: Any) -> list[int]:
    return sorted(sequence_breaker_ids(tokenizer, ["\n"]))


class Processor:
    step: ClassVar[str] = ""
    """The step of ``sampler_table.SAMPLERS`` this class is built for ("" for a base class)."""
    can_empty = False
    """It may remove every token of a row (a ban): the stage then skips it for that row."""
    on_candidates = False
    """``row`` also works on a candidate row (the row's candidate values, with ``index`` mapping them to tokens)."""
    keeps_order = False
    """On candidates it only drops the least likely, or reshapes without reordering: they stay sorted."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        step = cls.__dict__.get("step")
        if step:
            if step in STEPS:
                raise RuntimeError(f"sampler step {step!r} is built by both {STEPS[step].__name__} and {cls.__name__}")
            STEPS[step] = cls

    @classmethod
    def build(cls, p: SamplingParams, c: Any) -> "Processor | None":
        """The step's processor for one sequence with parameters ``p`` and context ``c`` (a SamplingContext),
        once its table row says ``p`` turn it on; None where the sequence leaves it nothing to do."""
        raise NotImplementedError(f"{cls.__name__} builds no step")

    def row(self, ids: Sequence[int], logits: torch.Tensor, index: torch.Tensor | None = None) -> torch.Tensor:
        raise NotImplementedError

    @classmethod
    def batch(cls, procs: Sequence["Processor"], rows: Rows, x: torch.Tensor) -> State:
        for r, p in enumerate(procs):
            x[r] = p.row(rows.ids[r], x[r])
        return x

    @classmethod
    def candidates(cls, procs: Sequence["Processor"], rows: Rows, c: Candidates) -> Candidates:
        values = c.values.clone()
        for r, p in enumerate(procs):
            values[r] = p.row(rows.ids[r], values[r], c.index[r])
        return Candidates(values, c.index, c.vocab)

    def __call__(self, ids: Sequence[int], logits: torch.Tensor) -> torch.Tensor:
        """This sampler alone on one sequence's 1-D logits."""
        return dense(type(self).batch([self], Rows([ids], [None]), logits.unsqueeze(0)))[0]


class PerRow(Processor):
    """A plain callable ``(ids, logits) -> logits`` (a structured-output mask) run row by row."""

    can_empty = True

    def __init__(self, fn: Any):
        self.fn = fn

    def row(self, ids, logits, index=None):
        return self.fn(ids, logits)

    def observe(self, token: int) -> None:
        if hasattr(self.fn, "observe"):
            self.fn.observe(token)

    @property
    def done(self) -> bool:
        return bool(getattr(self.fn, "done", False))


class StructuredOutputs(PerRow):
    """The structured-output step: the grammar's mask, row by row (no mask where there is no tokenizer)."""

    step = "structured_outputs"

    @classmethod
    def build(cls, p, c):
        return cls(mask_for(p.structured_outputs, c.tokenizer) or (lambda ids, x: x))


class Guidance(Processor):
    """Classifier-free guidance: ``uncond + scale * (cond - uncond)`` over log-probabilities, where uncond is
    the negative prompt's distribution at the same step (transformers' UnbatchedClassifierFreeGuidance)."""

    step = "cfg"

    @classmethod
    def build(cls, p, c):
        return cls(p.guidance_scale, c)

    def __init__(self, scale: float, ctx: Any):
        self.scale, self.ctx = scale, ctx

    def row(self, ids, logits, index=None):
        if self.ctx.guidance is None:
            return logits
        uncond = self.ctx.guidance.to(logits.device, torch.float32).log_softmax(-1)
        return uncond + self.scale * (logits.log_softmax(-1) - uncond)


def _flat(lists: Sequence[Sequence[int]], x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row token lists as flat (row, token) index tensors."""
    rows = [r for r, tokens in enumerate(lists) for _ in tokens]
    tokens = [t for ts in lists for t in ts]
    return (torch.tensor(rows, dtype=torch.long, device=x.device),
            torch.tensor(tokens, dtype=torch.long, device=x.device))


class LogitBias(Processor):
    """Adds a fixed bias to chosen token ids (OpenAI's logit_bias)."""

    step = "logit_bias"

    @classmethod
    def build(cls, p, c):
        return cls(p.logit_bias)

    def __init__(self, bias: Sequence[tuple[int, float]]):
        self.bias = list(bias)

    @classmethod
    def batch(cls, procs, rows, x):
        r, t = _flat([[tok for tok, _ in p.bias] for p in procs], x)
        values = torch.tensor([b for p in procs for _, b in p.bias], dtype=x.dtype, device=x.device)
        return x.index_put_((r, t), values, accumulate=True)


class TokenBans(Processor):
    """Token ids that are never generated (text-generation-webui's custom_token_bans)."""

    can_empty = True

    step = "token_bans"

    @classmethod
    def build(cls, p, c):
        return cls(p.custom_token_bans)

    def __init__(self, ids: Sequence[int]):
        self.ids = list(ids)
        self._index: tuple[tuple[tuple[int, ...], torch.device], torch.Tensor] | None = None

    def banned(self, ids: Sequence[int]) -> Sequence[int]:
        return self.ids

    @classmethod
    def batch(cls, procs, rows, x):
        banned = [p.banned(ids) for p, ids in zip(procs, rows.ids)]
        if all(b == banned[0] for b in banned):  # the usual case (the model's end-of-sequence ids): one fill
            return x.index_fill_(1, procs[0].index(banned[0], x.device), NEG_INF) if banned[0] else x
        r, t = _flat(banned, x)
        return x.index_put_((r, t), torch.tensor(NEG_INF, dtype=x.dtype, device=x.device))

    def index(self, ids: Sequence[int], device: torch.device) -> torch.Tensor:
        """``ids`` as a token index on ``device``, made once (a processor bans the same few tokens each step)."""
        key = (tuple(ids), device)
        if self._index is None or self._index[0] != key:
            self._index = (key, torch.tensor(key[0], dtype=torch.long, device=device))
        return self._index[1]


class EosBan(TokenBans):
    """Blocks end-of-sequence tokens while fewer than ``min_new`` tokens were made (or always)."""

    step = "eos_ban"

    @classmethod
    def build(cls, p, c):
        return cls(c.eos_ids, c.prompt_len, p.min_new_tokens, p.ban_eos) if c.eos_ids else None

    def __init__(self, eos_ids: Sequence[int], prompt_len: int, min_new: int, always: bool):
        super().__init__(sorted(set(eos_ids)))
        self.prompt_len, self.min_new, self.always = prompt_len, min_new, always

    def banned(self, ids):
        return self.ids if self.always or len(ids) - self.prompt_len < self.min_new else ()


class RepetitionPenalty(Processor):
    """CTRL-style penalty on every token among the last ``last_n`` of the prompt and output (0: all)."""

    on_candidates = True

    step = "repetition_penalty"

    @classmethod
    def build(cls, p, c):
        return cls(p.repetition_penalty, p.repetition_penalty_range)

    def __init__(self, penalty: float, last_n: int = 0):
        self.penalty, self.last_n = penalty, last_n

    def span(self, ids: Sequence[int]) -> tuple[int, int]:
        return window_span(len(ids), 0, self.last_n)

    def favours(self) -> bool:
        return False

    @staticmethod
    def scaled(values: torch.Tensor, penalty: torch.Tensor, favour: bool) -> torch.Tensor:
        weaker, stronger = values / penalty, values * penalty
        return torch.where(values > 0, stronger if favour else weaker, weaker if favour else stronger)

    @classmethod
    def batch(cls, procs, rows, x):
        r, t = rows.windows([p.span(ids) for p, ids in zip(procs, rows.ids)], x.device)
        if t.numel():  # a token seen twice gets the same value twice
            x[r, t] = cls.scaled(x[r, t], rows.column(procs, "penalty", x)[r, 0], procs[0].favours())
        return x

    @classmethod
    def candidates(cls, procs, rows, c):
        seen = torch.stack([torch.isin(c.index[r], rows.history(r, c.index.device)[slice(*p.span(ids))])
                            for r, (p, ids) in enumerate(zip(procs, rows.ids))])
        scaled = cls.scaled(c.values, rows.column(procs, "penalty", c.values), procs[0].favours())
        return Candidates(torch.where(seen, scaled, c.values), c.index, c.vocab)


class EncoderRepetitionPenalty(RepetitionPenalty):
    """Scales the logits of the prompt's tokens: a penalty above 1 makes them likelier (transformers'
    EncoderRepetitionPenaltyLogitsProcessor, with the prompt as the encoder input)."""

    step = "encoder_repetition_penalty"

    @classmethod
    def build(cls, p, c):
        return cls(p.encoder_repetition_penalty, c.prompt_len)

    def __init__(self, penalty: float, prompt_len: int):
        super().__init__(penalty)
        self.prompt_len = prompt_len

    def span(self, ids):
        return 0, min(self.prompt_len, len(ids))

    def favours(self) -> bool:
        return True


class CountPenalty(Processor):
    """OpenAI's presence and frequency penalties: over the generated tokens only (not the prompt), the last
    ``last_n`` of them when set; ``presence`` once per token seen, ``frequency`` per time seen."""

    def __init__(self, presence: float, frequency: float, prompt_len: int, last_n: int = 0):
        self.presence, self.frequency, self.prompt_len, self.last_n = presence, frequency, prompt_len, last_n

    @classmethod
    def batch(cls, procs, rows, x):
        r, t = rows.windows([window_span(len(ids), min(p.prompt_len, len(ids)), p.last_n)
                             for p, ids in zip(procs, rows.ids)], x.device)
        if not t.numel():
            return x
        keys, counts = torch.unique(r * x.shape[-1] + t, return_counts=True)
        r, t = keys // x.shape[-1], keys % x.shape[-1]
        counts = counts.to(x.dtype)
        frequency = rows.column(procs, "frequency", x)[r, 0]
        presence = rows.column(procs, "presence", x)[r, 0]
        x[r, t] = x[r, t] - frequency * counts - presence * (counts > 0).to(x.dtype)
        return x


class PresencePenalty(CountPenalty):
    step = "presence_penalty"

    @classmethod
    def build(cls, p, c):
        return cls(p.presence_penalty, 0.0, c.prompt_len, p.repetition_penalty_range)


class FrequencyPenalty(CountPenalty):
    step = "frequency_penalty"

    @classmethod
    def build(cls, p, c):
        return cls(0.0, p.frequency_penalty, c.prompt_len, p.repetition_penalty_range)


class Dry(Processor):
    """DRY ("don't repeat yourself"): a token that would extend a sequence that already occurred, by a match of
    at least ``allowed_length`` tokens, loses ``multiplier * base ** (length - allowed_length)``. Matches do not
    cross sequence breakers and are capped at 50 tokens (text-generation-webui's DRYLogitsProcessor)."""

    MAX_MATCH = 50

    step = "dry"

    @classmethod
    def build(cls, p, c):
        return cls(p.dry_multiplier, p.dry_base, p.dry_allowed_length,
                   sequence_breaker_ids(c.tokenizer, p.dry_sequence_breakers), p.repetition_penalty_range)

    def __init__(self, multiplier: float, base: float, allowed_length: int, breakers: set[int], last_n: int = 0):
        self.multiplier, self.base, self.allowed = multiplier, base, allowed_length
        self.breakers, self.last_n = breakers, last_n

    def penalties(self, ids: Sequence[int]) -> dict[int, float]:
        """token -> penalty after the sequence ``ids``."""
        start, _ = window_span(len(ids), 0, self.last_n)
        ids = list(ids[start:])
        if not ids or ids[-1] in self.breakers:
            return {}
        last, longest = ids[-1], dict[int, int]()
        for i in range(len(ids) - 1):
            if ids[i] != last or ids[i + 1] in self.breakers:
                continue
            length = 1  # ids[i] matches the last token; extend the match backwards
            while length < self.MAX_MATCH:
                j = i - length
                if j < 0 or ids[j] != ids[-(length + 1)] or ids[j] in self.breakers:
                    break
                length += 1
            following = ids[i + 1]
            longest[following] = max(length, longest.get(following, 0))
        return {token: self.multiplier * self.base ** (length - self.allowed)
                for token, length in longest.items() if length >= self.allowed}

    def row(self, ids, logits, index=None):
        for token, penalty in self.penalties(ids).items():
            logits[token] -= penalty
        return logits


class NoRepeatNGram(Processor):
    """Bans the token that would complete an n-gram already present."""

    can_empty = True
    on_candidates = True

    step = "no_repeat_ngram"

    @classmethod
    def build(cls, p, c):
        return cls(p.no_repeat_ngram_size)

    def __init__(self, n: int):
        self.n = n

    def row(self, ids, logits, index=None):
        n = self.n
        if len(ids) < n:
            return logits
        prefix = tuple(ids[len(ids) - n + 1:])
        banned = {ids[i + n - 1] for i in range(len(ids) - n + 1) if tuple(ids[i:i + n - 1]) == prefix}
        if banned:
            ban = torch.tensor(sorted(banned), dtype=torch.long, device=logits.device)
            if index is not None:
                return logits.masked_fill(torch.isin(index, ban), NEG_INF)
            logits[ban] = NEG_INF
        return logits
