"""Every sampler, each defined once: a per-sequence object holding its parameters (and state), whose class runs it
over many rows at once.

``Processor.batch`` takes the objects of every row in a batch and the rows' logits [rows, vocab] and returns
the new logits, or ``Candidates`` when it keeps few tokens (top_k): the samplers after it then work on those
few (``Processor.candidates``) instead of the whole vocabulary. Samplers with state or a draw of their own
(mirostat, adaptive-p, XTC, DRY, structured output) run row by row (``Processor.row``). Calling a processor
on one 1-D row of logits runs it as a batch of one, so each sampler has one implementation.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import torch

from webui.engine.rows import (NEG_INF, Candidates, Rows, State, dense, per_row, row_sums, top_candidates,
                               window_span)


class Processor:
    can_empty = False
    """It may remove every token of a row (a ban): the stage then skips it for that row."""
    on_candidates = False
    """``row`` also works on a candidate row (the row's candidate values, with ``index`` mapping them to tokens)."""
    keeps_order = False
    """On candidates it only drops the least likely, or reshapes without reordering: they stay sorted."""

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


def _token_position(index: torch.Tensor | None, token: int) -> int | None:
    """Where ``token`` sits in a row (its id on a full row; its place among the candidates; None if absent)."""
    if index is None:
        return token
    hit = (index == token).nonzero()
    return int(hit[0, 0]) if hit.numel() else None


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


class Guidance(Processor):
    """Classifier-free guidance: ``uncond + scale * (cond - uncond)`` over log-probabilities, where uncond is
    the negative prompt's distribution at the same step (transformers' UnbatchedClassifierFreeGuidance)."""

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

    def __init__(self, ids: Sequence[int]):
        self.ids = list(ids)

    def banned(self, ids: Sequence[int]) -> Sequence[int]:
        return self.ids

    @classmethod
    def batch(cls, procs, rows, x):
        r, t = _flat([p.banned(ids) for p, ids in zip(procs, rows.ids)], x)
        return x.index_put_((r, t), torch.tensor(NEG_INF, dtype=x.dtype, device=x.device))


class EosBan(TokenBans):
    """Blocks end-of-sequence tokens while fewer than ``min_new`` tokens were made (or always)."""

    def __init__(self, eos_ids: Sequence[int], prompt_len: int, min_new: int, always: bool):
        super().__init__(sorted(set(eos_ids)))
        self.prompt_len, self.min_new, self.always = prompt_len, min_new, always

    def banned(self, ids):
        return self.ids if self.always or len(ids) - self.prompt_len < self.min_new else ()


class RepetitionPenalty(Processor):
    """CTRL-style penalty on every token among the last ``last_n`` of the prompt and output (0: all)."""

    on_candidates = True

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
            x[r, t] = cls.scaled(x[r, t], per_row([p.penalty for p in procs], x)[r, 0], procs[0].favours())
        return x

    @classmethod
    def candidates(cls, procs, rows, c):
        seen = torch.stack([torch.isin(c.index[r], rows.history(r, c.index.device)[slice(*p.span(ids))])
                            for r, (p, ids) in enumerate(zip(procs, rows.ids))])
        scaled = cls.scaled(c.values, per_row([p.penalty for p in procs], c.values), procs[0].favours())
        return Candidates(torch.where(seen, scaled, c.values), c.index, c.vocab)


class EncoderRepetitionPenalty(RepetitionPenalty):
    """Scales the logits of the prompt's tokens: a penalty above 1 makes them likelier (transformers'
    EncoderRepetitionPenaltyLogitsProcessor, with the prompt as the encoder input)."""

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
        frequency = per_row([p.frequency for p in procs], x)[r, 0]
        presence = per_row([p.presence for p in procs], x)[r, 0]
        x[r, t] = x[r, t] - frequency * counts - presence * (counts > 0).to(x.dtype)
        return x


class Dry(Processor):
    """DRY ("don't repeat yourself"): a token that would extend a sequence that already occurred, by a match of
    at least ``allowed_length`` tokens, loses ``multiplier * base ** (length - allowed_length)``. Matches do not
    cross sequence breakers and are capped at 50 tokens (text-generation-webui's DRYLogitsProcessor)."""

    MAX_MATCH = 50

    def __init__(self, multiplier: float, base: float, allowed_length: int, breakers: set[int], last_n: int = 0):
        self.multiplier, self.base, self.allowed = multiplier, base, allowed_length
        self.breakers, self.last_n = breakers, last_n

    def penalties(self, ids: Sequence[int]) -> dict[int, float]:
        """token -> penalty after the sequence ``ids``."""
        start, _ = window_span(len(ids), 0, self.last_n)
        ids = list(ids[start:])
        if not ids or ids[-1] in self.breakers:
            return {}
        last, longest = ids[-1], {}
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

    def __init__(self, n: int):
        self.n = n

    def row(self, ids, logits, index=None):
        n = self.n
        if len(ids) < n:
            return logits
        prefix = tuple(ids[len(ids) - n + 1:])
        banned = {ids[i + n - 1] for i in range(len(ids) - n + 1) if tuple(ids[i:i + n - 1]) == prefix}
        if banned:
            banned = torch.tensor(sorted(banned), dtype=torch.long, device=logits.device)
            if index is not None:
                return logits.masked_fill(torch.isin(index, banned), NEG_INF)
            logits[banned] = NEG_INF
        return logits


class Temperature(Processor):
    on_candidates = True
    keeps_order = True

    def __init__(self, temperature: float):
        self.temperature = temperature

    @classmethod
    def batch(cls, procs, rows, x):
        return x / per_row([p.temperature for p in procs], x)

    @classmethod
    def candidates(cls, procs, rows, c):
        return Candidates(cls.batch(procs, rows, c.values), c.index, c.vocab)


class TopK(Processor):
    """Keeps the k most likely tokens (and any tied with the k-th). A batch holds one k (the stage groups rows
    by it), so every row keeps the same number of candidates as it would alone."""

    on_candidates = True
    keeps_order = True

    def __init__(self, k: int):
        self.k = k

    @classmethod
    def batch(cls, procs, rows, x):
        k, vocab = procs[0].k, x.shape[-1]
        if k >= vocab:
            return x
        c = top_candidates(x, min(k + 1, vocab))
        kth = c.values[:, k - 1:k]
        if k < c.values.shape[1] and bool(((c.values[:, k:k + 1] == kth) & (kth > NEG_INF)).any()):
            return x.masked_fill(x < kth, NEG_INF)  # a tie across the k-th place: keep every tied token
        return Candidates(c.values[:, :k], c.index[:, :k], vocab)

    @classmethod
    def candidates(cls, procs, rows, c):
        k = procs[0].k
        if k >= c.values.shape[1]:
            return c
        return Candidates(c.values.masked_fill(c.values < c.values[:, k - 1:k], NEG_INF), c.index, c.vocab)


class TopP(Processor):
    """Keeps the most likely tokens until their probabilities reach p (the top one always stays)."""

    on_candidates = True
    keeps_order = True
    FIRST = 64  # candidates looked at first on a full row; more while the nucleus is wider

    def __init__(self, p: float):
        self.p = p

    @classmethod
    def candidates(cls, procs, rows, c):
        e, total = c.weights()
        return c.drop((total - e) >= per_row([p.p for p in procs], e) * total[:, -1:])

    @classmethod
    def batch(cls, procs, rows, x):
        """On the full vocabulary: the nucleus is found among the most likely tokens (as many as it takes)."""
        probs, vocab = x.softmax(-1), x.shape[-1]
        p = per_row([q.p for q in procs], probs)
        k = min(cls.FIRST, vocab)
        while True:
            c = top_candidates(x, k)
            mass = probs.gather(1, c.index).cumsum(-1)
            if k == vocab or bool((mass[:, -2:-1] >= p).all()):  # the last candidate is left out everywhere
                break
            k = min(4 * k, vocab)
        kept = ~((mass - probs.gather(1, c.index)) >= p)
        kept[:, 0] = True
        keep = torch.zeros_like(x, dtype=torch.bool).scatter_(1, c.index, kept)
        return x.masked_fill(~keep, NEG_INF)


class MinP(Processor):
    """Drops tokens less likely than p times the top token."""

    on_candidates = True
    keeps_order = True

    def __init__(self, p: float):
        self.p = p

    @classmethod
    def batch(cls, procs, rows, x):
        probs = x.softmax(-1)
        return x.masked_fill(probs < per_row([p.p for p in procs], probs) * probs.amax(-1, keepdim=True),
                             NEG_INF)

    @classmethod
    def candidates(cls, procs, rows, c):
        e, _ = c.weights()  # the top token's weight is 1
        return c.drop(e < per_row([p.p for p in procs], e))


class TopA(Processor):
    """Drops tokens below ``a`` times the squared probability of the top token."""

    on_candidates = True
    keeps_order = True

    def __init__(self, a: float):
        self.a = a

    @classmethod
    def batch(cls, procs, rows, x):
        probs = x.softmax(-1)
        return x.masked_fill(probs < per_row([p.a for p in procs], probs) * probs.amax(-1, keepdim=True) ** 2,
                             NEG_INF)

    @classmethod
    def candidates(cls, procs, rows, c):
        e, total = c.weights()  # p_i < a * p_top**2  <=>  e_i * total < a  (e_top = 1)
        return c.drop(e * total[:, -1:] < per_row([p.a for p in procs], e))


class EpsilonCutoff(Processor):
    """Drops tokens whose probability is below epsilon (given in units of 1e-4, as text-generation-webui does);
    the top token always stays."""

    on_candidates = True
    keeps_order = True

    def __init__(self, epsilon: float):
        self.epsilon = epsilon * 1e-4

    @classmethod
    def batch(cls, procs, rows, x):
        probs = x.softmax(-1)
        low = (probs < per_row([p.epsilon for p in procs], probs)) & (probs < probs.amax(-1, keepdim=True))
        return x.masked_fill(low, NEG_INF)

    @classmethod
    def candidates(cls, procs, rows, c):
        e, total = c.weights()
        return c.drop((e < per_row([p.epsilon for p in procs], e) * total[:, -1:]) & (e < 1))


def _entropy(e: torch.Tensor, total: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Candidates' probabilities, log-probabilities and each row's entropy (summed along the row, in order)."""
    probs = e / total
    logp = e.log() - total.log()
    terms = torch.where(probs > 0, probs * logp, torch.zeros_like(probs))
    return probs, logp, -terms.cumsum(-1)[:, -1:]


class EtaCutoff(Processor):
    """Eta sampling (Hewitt et al.): drops tokens below min(eta, sqrt(eta) * exp(-entropy)), eta in units of 1e-4;
    the top token always stays."""

    on_candidates = True
    keeps_order = True

    def __init__(self, eta: float):
        self.eta = eta * 1e-4

    def row(self, ids, logits, index=None):
        logp = logits.log_softmax(-1)
        probs = logp.exp()
        entropy = -torch.nansum(probs * logp)
        cutoff = min(self.eta, float(self.eta ** 0.5 * torch.exp(-entropy)))
        return logits.masked_fill((probs < cutoff) & (probs < probs.max()), NEG_INF)

    @classmethod
    def candidates(cls, procs, rows, c):
        e, total = c.weights()
        probs, _, entropy = _entropy(e, total[:, -1:])
        eta = per_row([p.eta for p in procs], e)
        return c.drop((probs < torch.minimum(eta, eta.sqrt() * (-entropy).exp())) & (e < 1))


class TypicalP(Processor):
    """Keeps the tokens whose surprise is nearest the entropy, until their probabilities reach p."""

    on_candidates = True

    def __init__(self, p: float):
        self.p = p

    def row(self, ids, logits, index=None):
        logp = logits.log_softmax(-1)
        probs = logp.exp()
        entropy = -torch.nansum(probs * logp)
        surprise_gap = (-logp - entropy).abs()
        sorted_gap, order = torch.sort(surprise_gap)
        cumulative = probs[order].cumsum(-1)
        keep_n = int((cumulative < self.p).sum().item()) + 1
        drop_sorted = torch.ones_like(sorted_gap, dtype=torch.bool)
        drop_sorted[:keep_n] = False
        return logits.masked_fill(drop_sorted.scatter(0, order, drop_sorted), NEG_INF)

    @classmethod
    def candidates(cls, procs, rows, c):
        e, total = c.weights()
        probs, logp, entropy = _entropy(e, total[:, -1:])
        gap = torch.where(probs > 0, (-logp - entropy).abs(), torch.full_like(probs, math.inf))
        order = gap.argsort(dim=-1, stable=True)
        cumulative = probs.gather(1, order).cumsum(-1)
        keep_n = (cumulative < per_row([p.p for p in procs], probs)).sum(-1, keepdim=True) + 1
        places = torch.arange(e.shape[1], device=e.device).expand_as(e)
        drop = torch.zeros_like(probs, dtype=torch.bool).scatter_(1, order, places >= keep_n)
        return Candidates(c.values.masked_fill(drop, NEG_INF), c.index, c.vocab)


class TailFree(Processor):
    """Tail-free sampling: the absolute second derivative of the sorted probabilities, normalised, summed until
    ``z``; the tokens after that point are the tail."""

    on_candidates = True
    keeps_order = True

    def __init__(self, z: float):
        self.z = z

    def row(self, ids, logits, index=None):
        sorted_logits, order = torch.sort(logits, descending=True)
        probs = sorted_logits.softmax(-1)
        if probs.numel() < 3:
            return logits
        curvature = (probs[:-2] - 2 * probs[1:-1] + probs[2:]).abs()
        total = curvature.sum()
        if total <= 0:
            return logits
        keep = int(((curvature / total).cumsum(-1) <= self.z).sum().item()) + 1  # the first always stays
        drop = torch.ones_like(probs, dtype=torch.bool)
        drop[:max(keep, 1)] = False
        return logits.masked_fill(drop.scatter(0, order, drop), NEG_INF)

    @classmethod
    def candidates(cls, procs, rows, c):
        e, total = c.weights()
        probs = torch.cat([e / total[:, -1:], e.new_zeros(e.shape[0], 2)], dim=1)  # the zeros beyond the list
        curvature = (probs[:, :-2] - 2 * probs[:, 1:-1] + probs[:, 2:]).abs()
        running = curvature.cumsum(-1)
        whole = running[:, -1:]
        keep = ((running / whole) <= per_row([p.z for p in procs], e)).sum(-1, keepdim=True) + 1
        places = torch.arange(e.shape[1], device=e.device).expand_as(e)
        return c.drop((places >= keep) & (whole > 0))


class TopNSigma(Processor):
    """Keeps tokens whose logit is within n standard deviations of the top logit (llama.cpp's top_n_sigma); the
    mean and deviation are over the tokens still in play."""

    on_candidates = True
    keeps_order = True

    def __init__(self, n: float):
        self.n = n

    @classmethod
    def batch(cls, procs, rows, x):
        finite = x > NEG_INF
        count = finite.sum(-1, keepdim=True)
        mean = row_sums(torch.where(finite, x, 0.0)) / count
        deviation = torch.where(finite, x - mean, 0.0)
        spread = row_sums(deviation * deviation) / count
        cutoff = x.amax(-1, keepdim=True) - per_row([p.n for p in procs], x) * spread.sqrt()
        return x.masked_fill(x < torch.where(count > 1, cutoff, NEG_INF), NEG_INF)

    @classmethod
    def candidates(cls, procs, rows, c):
        return Candidates(cls.batch(procs, rows, c.values), c.index, c.vocab)


class Xtc(Processor):
    """XTC (exclude top choices): with probability ``probability`` (drawn from the sequence's own generator),
    remove every token at least ``threshold`` likely except the least likely of them; never when that would
    remove a newline or end-of-sequence token (text-generation-webui's XTCLogitsWarper)."""

    on_candidates = True

    def __init__(self, threshold: float, probability: float, ctx: Any, protected: Sequence[int]):
        self.threshold, self.probability, self.ctx = threshold, probability, ctx
        self.protected = torch.tensor(sorted(set(protected)), dtype=torch.long)

    def row(self, ids, logits, index=None):
        draw = torch.rand((), generator=self.ctx.rng(logits.device), device=logits.device)
        if float(draw) >= self.probability:
            return logits
        sorted_logits, order = torch.sort(logits, descending=True)
        probs = sorted_logits.softmax(-1)
        drop = torch.zeros_like(probs, dtype=torch.bool)
        drop[:-1] = probs[1:] >= self.threshold  # all that meet it but the last (least likely) one
        drop = drop.scatter(0, order, drop)
        tokens = torch.arange(logits.shape[-1], device=logits.device) if index is None else index
        if self.protected.numel() and drop[torch.isin(tokens, self.protected.to(logits.device))].any():
            return logits
        return logits.masked_fill(drop, NEG_INF)

    @classmethod
    def candidates(cls, procs, rows, c):
        """Candidates are sorted, so the top choices are the first columns; one draw per row, as ``row``."""
        device = c.values.device
        draws = torch.stack([torch.rand((), generator=p.ctx.rng(device), device=device) for p in procs])
        probs = c.values.softmax(-1)
        drop = torch.zeros_like(probs, dtype=torch.bool)
        drop[:, :-1] = probs[:, 1:] >= per_row([p.threshold for p in procs], probs)
        draws = draws.double().unsqueeze(1)  # compared as ``row`` compares them, and with no host sync
        drop &= draws < per_row([p.probability for p in procs], draws)
        protected = torch.stack([torch.isin(c.index[r], p.protected.to(device)) for r, p in enumerate(procs)])
        drop &= ~(drop & protected).any(-1, keepdim=True)
        return Candidates(c.values.masked_fill(drop, NEG_INF), c.index, c.vocab)


class DynamicTemperature(Processor):
    """A temperature between ``low`` and ``high`` by the normalised entropy of the distribution (to the power
    ``exponent``): sure steps sample cold, unsure ones hot (llama.cpp's temp_ext with low = t - delta)."""

    on_candidates = True
    keeps_order = True

    def __init__(self, low: float, high: float, exponent: float):
        self.low, self.high, self.exponent = low, high, exponent

    def temperature(self, logits: torch.Tensor) -> float:
        logp = logits.log_softmax(-1)
        entropy = float(-torch.nansum(logp.exp() * logp))
        valid = int(torch.isfinite(logits).sum())
        max_entropy = math.log(valid) if valid > 1 else 0.0
        if max_entropy <= 0.0:
            return self.low
        return self.low + (self.high - self.low) * (max(entropy, 0.0) / max_entropy) ** self.exponent

    def row(self, ids, logits, index=None):
        return logits / self.temperature(logits)


class QuadraticSampling(Processor):
    """Smoothing: each logit moves to ``top - k*f*d**2 + s*f*d**3`` with d its distance below the top logit,
    k = (3 - curve) / 2, s = (curve - 1) / 2 (text-generation-webui's QuadraticSamplingLogitsWarper)."""

    on_candidates = True
    keeps_order = True

    def __init__(self, factor: float, curve: float):
        self.factor, self.k, self.s = factor, (3 - curve) / 2, (curve - 1) / 2

    @classmethod
    def batch(cls, procs, rows, x):
        top = x.amax(-1, keepdim=True)
        d = x - top
        bend = torch.addcmul(-per_row([p.k * p.factor for p in procs], x), d, per_row([p.s * p.factor for p in procs], x))
        shaped = torch.addcmul(top, bend, d * d)  # a token at -inf comes out -inf, or NaN where s is 0
        return torch.nan_to_num_(shaped, nan=NEG_INF, posinf=math.inf, neginf=NEG_INF)

    @classmethod
    def candidates(cls, procs, rows, c):
        return Candidates(cls.batch(procs, rows, c.values), c.index, c.vocab)


class Mirostat(Processor):
    """Mirostat v2: keep the tokens whose surprise (-log2 p) is at most mu (at least the top one); after each
    token, mu moves by eta times the gap between that token's surprise (among those kept) and tau. The state
    belongs to one sequence; mu starts at 2 * tau."""

    on_candidates = True
    keeps_order = True

    def __init__(self, tau: float, eta: float):
        self.tau, self.eta, self.mu = tau, eta, 2.0 * tau
        self.kept_logp: torch.Tensor | None = None
        self.index: torch.Tensor | None = None

    def row(self, ids, logits, index=None):
        drop = -logits.log_softmax(-1) / math.log(2) > self.mu
        drop[torch.argmax(logits)] = False
        out = logits.masked_fill(drop, NEG_INF)
        self.kept_logp, self.index = out.log_softmax(-1), index
        return out

    @classmethod
    def candidates(cls, procs, rows, c):
        drop = -c.values.log_softmax(-1) / math.log(2) > per_row([p.mu for p in procs], c.values)
        values = c.drop(drop & (c.values < c.values[:, :1])).values  # sorted: the top one is the first
        kept = values.log_softmax(-1)
        for r, p in enumerate(procs):
            p.kept_logp, p.index = kept[r], c.index[r]
        return Candidates(values, c.index, c.vocab)

    def observe(self, token: int) -> None:
        place = _token_position(self.index, token) if self.kept_logp is not None else None
        if place is not None:
            surprise = -float(self.kept_logp[place]) / math.log(2)
            self.mu -= self.eta * (surprise - self.tau)


class AdaptiveP(Processor):
    """Adaptive-p: favour tokens whose probability is near a target that is steered by an average of the
    probabilities picked so far (llama.cpp's adaptive_p, text-generation-webui's AdaptivePLogitsWarper)."""

    WIDTH, PEAK, SHARPNESS = 0.3, 5.0, 10.0
    on_candidates = True

    def __init__(self, target: float, decay: float):
        self.target, self.decay = target, min(decay, 0.99)
        self.weighted_sum = self.target / (1.0 - self.decay)  # as if the target had been met all along
        self.total_weight = 1.0 / (1.0 - self.decay)
        self.probs: torch.Tensor | None = None
        self.index: torch.Tensor | None = None

    def row(self, ids, logits, index=None):
        self.probs, self.index = logits.softmax(-1), index
        dist = ((self.probs - self.adapted()) / self.WIDTH).abs()
        shaped = self.PEAK - self.SHARPNESS * dist * dist / (1.0 + dist)
        return torch.where(torch.isfinite(logits), shaped, logits)

    def adapted(self) -> float:
        average = self.weighted_sum / self.total_weight if self.total_weight > 0 else self.target
        return max(0.0, min(1.0, 2.0 * self.target - average))

    @classmethod
    def candidates(cls, procs, rows, c):
        probs = c.values.softmax(-1)
        dist = ((probs - per_row([p.adapted() for p in procs], probs)) / cls.WIDTH).abs()
        shaped = cls.PEAK - cls.SHARPNESS * dist * dist / (1.0 + dist)
        for r, p in enumerate(procs):
            p.probs, p.index = probs[r], c.index[r]
        return Candidates(torch.where(torch.isfinite(c.values), shaped, c.values), c.index, c.vocab)

    def observe(self, token: int) -> None:
        place = _token_position(self.index, token) if self.probs is not None else None
        if place is not None:
            self.weighted_sum = float(self.probs[place]) + self.decay * self.weighted_sum
            self.total_weight = 1.0 + self.decay * self.total_weight
