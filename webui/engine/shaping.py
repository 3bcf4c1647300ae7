"""The samplers that shape or cut the distribution a token is drawn from: temperature and its kin, the truncation
samplers (top_k, top_p, min_p, typical_p, tfs, top_a, epsilon, eta, top_n_sigma) and the ones with state or a
draw of their own (XTC, mirostat, adaptive-p). Each is a ``Processor`` (samplers.py); most also run on
``Candidates``, the few tokens left after top_k. Greedy decoding skips all of them (their ``draw_only`` in
sampler_table.py).
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import torch

from webui.engine.rows import NEG_INF, Candidates, per_row, row_sums, top_candidates
from webui.engine.samplers import Processor, newline_ids


def _token_position(index: torch.Tensor | None, token: int) -> int | None:
    """Where ``token`` sits in a row (its id on a full row; its place among the candidates; None if absent)."""
    if index is None:
        return token
    hit = (index == token).nonzero()
    return int(hit[0, 0]) if hit.numel() else None


class Temperature(Processor):
    on_candidates = True
    keeps_order = True

    step = "temperature"

    @classmethod
    def build(cls, p, c):
        return cls(p.temperature)

    def __init__(self, temperature: float):
        self.temperature = temperature

    @classmethod
    def batch(cls, procs, rows, x):
        return x / rows.column(procs, "temperature", x)

    @classmethod
    def candidates(cls, procs, rows, c):
        return Candidates(cls.batch(procs, rows, c.values), c.index, c.vocab)


class TopK(Processor):
    """Keeps the k most likely tokens (and any tied with the k-th). A batch holds one k (the stage groups rows
    by it), so every row keeps the same number of candidates as it would alone."""

    on_candidates = True
    keeps_order = True

    step = "top_k"

    @classmethod
    def build(cls, p, c):
        return cls(p.top_k)

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

    step = "top_p"

    @classmethod
    def build(cls, p, c):
        return cls(p.top_p)

    def __init__(self, p: float):
        self.p = p

    @classmethod
    def candidates(cls, procs, rows, c):
        e, total = c.weights()
        return c.drop((total - e) >= rows.column(procs, "p", e) * total[:, -1:])

    @classmethod
    def batch(cls, procs, rows, x):
        """On the full vocabulary: each row's nucleus is found among its most likely tokens, as many as that row
        takes (a row whose nucleus is found among the first k is done; only the others look at 4k: a row with a
        wide nucleus costs the batch no more than it costs alone)."""
        probs, vocab = x.softmax(-1), x.shape[-1]
        p = rows.column(procs, "p", probs)
        keep = torch.zeros_like(x, dtype=torch.bool)
        open_rows: torch.Tensor | None = None  # the rows still looking (None: all)
        k = min(cls.FIRST, vocab)
        while True:
            xs, ps, nucleus = (x, probs, p) if open_rows is None else (
                x.index_select(0, open_rows), probs.index_select(0, open_rows), p.index_select(0, open_rows))
            c = top_candidates(xs, k)
            chosen = ps.gather(1, c.index)
            mass = chosen.cumsum(-1)
            kept = ~((mass - chosen) >= nucleus)
            kept[:, 0] = True
            found = torch.zeros_like(xs, dtype=torch.bool).scatter_(1, c.index, kept)
            # done: the last candidate is left out (so every token kept is among these k), or every token was seen
            if k == vocab or k < 2:
                done = torch.ones(len(xs), dtype=torch.bool, device=x.device)
            else:
                done = (mass[:, -2] >= nucleus[:, 0])
            if open_rows is None and bool(done.all()):
                keep = found
                break
            places = torch.arange(len(xs), device=x.device) if open_rows is None else open_rows
            keep.index_copy_(0, places[done], found[done])
            open_rows = places[~done]
            if not open_rows.numel():
                break
            k = min(4 * k, vocab)
        return x.masked_fill(~keep, NEG_INF)


class MinP(Processor):
    """Drops tokens less likely than p times the top token."""

    on_candidates = True
    keeps_order = True

    step = "min_p"

    @classmethod
    def build(cls, p, c):
        return cls(p.min_p)

    def __init__(self, p: float):
        self.p = p

    @classmethod
    def batch(cls, procs, rows, x):
        probs = x.softmax(-1)
        return x.masked_fill(probs < rows.column(procs, "p", probs) * probs.amax(-1, keepdim=True),
                             NEG_INF)

    @classmethod
    def candidates(cls, procs, rows, c):
        e, _ = c.weights()  # the top token's weight is 1
        return c.drop(e < rows.column(procs, "p", e))


class TopA(Processor):
    """Drops tokens below ``a`` times the squared probability of the top token."""

    on_candidates = True
    keeps_order = True

    step = "top_a"

    @classmethod
    def build(cls, p, c):
        return cls(p.top_a)

    def __init__(self, a: float):
        self.a = a

    @classmethod
    def batch(cls, procs, rows, x):
        probs = x.softmax(-1)
        return x.masked_fill(probs < rows.column(procs, "a", probs) * probs.amax(-1, keepdim=True) ** 2,
                             NEG_INF)

    @classmethod
    def candidates(cls, procs, rows, c):
        e, total = c.weights()  # p_i < a * p_top**2  <=>  e_i * total < a  (e_top = 1)
        return c.drop(e * total[:, -1:] < rows.column(procs, "a", e))


class EpsilonCutoff(Processor):
    """Drops tokens whose probability is below epsilon (given in units of 1e-4, as text-generation-webui does);
    the top token always stays."""

    on_candidates = True
    keeps_order = True

    step = "epsilon_cutoff"

    @classmethod
    def build(cls, p, c):
        return cls(p.epsilon_cutoff)

    def __init__(self, epsilon: float):
        self.epsilon = epsilon * 1e-4

    @classmethod
    def batch(cls, procs, rows, x):
        probs = x.softmax(-1)
        low = (probs < rows.column(procs, "epsilon", probs)) & (probs < probs.amax(-1, keepdim=True))
        return x.masked_fill(low, NEG_INF)

    @classmethod
    def candidates(cls, procs, rows, c):
        e, total = c.weights()
        return c.drop((e < rows.column(procs, "epsilon", e) * total[:, -1:]) & (e < 1))


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

    step = "eta_cutoff"

    @classmethod
    def build(cls, p, c):
        return cls(p.eta_cutoff)

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
        eta = rows.column(procs, "eta", e)
        return c.drop((probs < torch.minimum(eta, eta.sqrt() * (-entropy).exp())) & (e < 1))


class TypicalP(Processor):
    """Keeps the tokens whose surprise is nearest the entropy, until their probabilities reach p."""

    on_candidates = True

    step = "typical_p"

    @classmethod
    def build(cls, p, c):
        return cls(p.typical_p)

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
        keep_n = (cumulative < rows.column(procs, "p", probs)).sum(-1, keepdim=True) + 1
        places = torch.arange(e.shape[1], device=e.device).expand_as(e)
        drop = torch.zeros_like(probs, dtype=torch.bool).scatter_(1, order, places >= keep_n)
        return Candidates(c.values.masked_fill(drop, NEG_INF), c.index, c.vocab)


class TailFree(Processor):
    """Tail-free sampling: the absolute second derivative of the sorted probabilities, normalised, summed until
    ``z``; the tokens after that point are the tail."""

    on_candidates = True
    keeps_order = True

    step = "tfs"

    @classmethod
    def build(cls, p, c):
        return cls(p.tfs)

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
        keep = ((running / whole) <= rows.column(procs, "z", e)).sum(-1, keepdim=True) + 1
        places = torch.arange(e.shape[1], device=e.device).expand_as(e)
        return c.drop((places >= keep) & (whole > 0))


class TopNSigma(Processor):
    """Keeps tokens whose logit is within n standard deviations of the top logit (llama.cpp's top_n_sigma); the
    mean and deviation are over the tokens still in play."""

    on_candidates = True
    keeps_order = True

    step = "top_n_sigma"

    @classmethod
    def build(cls, p, c):
        return cls(p.top_n_sigma)

    def __init__(self, n: float):
        self.n = n

    @classmethod
    def batch(cls, procs, rows, x):
        finite = x > NEG_INF
        if bool(finite.all()):  # every token still in play (no ban or cut before it): the same sums, unmasked
            count = torch.full((x.shape[0], 1), x.shape[-1], dtype=torch.long, device=x.device)
            deviation = x - row_sums(x) / count
        else:
            count = finite.sum(-1, keepdim=True)
            deviation = torch.where(finite, x - row_sums(torch.where(finite, x, 0.0)) / count, 0.0)
        spread = row_sums(deviation * deviation) / count
        cutoff = x.amax(-1, keepdim=True) - rows.column(procs, "n", x) * spread.sqrt()
        return x.masked_fill(x < torch.where(count > 1, cutoff, NEG_INF), NEG_INF)

    @classmethod
    def candidates(cls, procs, rows, c):
        return Candidates(cls.batch(procs, rows, c.values), c.index, c.vocab)


class Xtc(Processor):
    """XTC (exclude top choices): with probability ``probability`` (drawn from the sequence's own generator),
    remove every token at least ``threshold`` likely except the least likely of them; never when that would
    remove a newline or end-of-sequence token (text-generation-webui's XTCLogitsWarper)."""

    on_candidates = True

    step = "xtc"

    @classmethod
    def build(cls, p, c):
        return cls(p.xtc_threshold, p.xtc_probability, c, [*c.eos_ids, *newline_ids(c.tokenizer)])

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
        drop[:, :-1] = probs[:, 1:] >= rows.column(procs, "threshold", probs)
        draws = draws.double().unsqueeze(1)  # compared as ``row`` compares them, and with no host sync
        drop &= draws < rows.column(procs, "probability", draws)
        protected = torch.stack([torch.isin(c.index[r], p.protected.to(device)) for r, p in enumerate(procs)])
        drop &= ~(drop & protected).any(-1, keepdim=True)
        return Candidates(c.values.masked_fill(drop, NEG_INF), c.index, c.vocab)


class DynamicTemperature(Processor):
    """A temperature between ``low`` and ``high`` by the normalised entropy of the distribution (to the power
    ``exponent``): sure steps sample cold, unsure ones hot (llama.cpp's temp_ext with low = t - delta)."""

    on_candidates = True
    keeps_order = True

    step = "dynamic_temperature"

    @classmethod
    def build(cls, p, c):
        return cls(p.dynatemp_low, p.dynatemp_high, p.dynatemp_exponent)

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

    step = "quadratic_sampling"

    @classmethod
    def build(cls, p, c):
        return cls(p.smoothing_factor, p.smoothing_curve)

    def __init__(self, factor: float, curve: float):
        self.factor, self.k, self.s = factor, (3 - curve) / 2, (curve - 1) / 2
        self.bend_k, self.bend_s = self.k * factor, self.s * factor

    @classmethod
    def batch(cls, procs, rows, x):
        top = x.amax(-1, keepdim=True)
        d = x - top
        bend = torch.addcmul(-rows.column(procs, "bend_k", x), d, rows.column(procs, "bend_s", x))
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

    step = "mirostat"

    @classmethod
    def build(cls, p, c):
        return cls(p.mirostat_tau, p.mirostat_eta)

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
        if place is not None and self.kept_logp is not None:
            surprise = -float(self.kept_logp[place]) / math.log(2)
            self.mu -= self.eta * (surprise - self.tau)


class AdaptiveP(Processor):
    """Adaptive-p: favour tokens whose probability is near a target that is steered by an average of the
    probabilities picked so far (llama.cpp's adaptive_p, text-generation-webui's AdaptivePLogitsWarper)."""

    WIDTH, PEAK, SHARPNESS = 0.3, 5.0, 10.0
    on_candidates = True

    step = "adaptive_p"

    @classmethod
    def build(cls, p, c):
        return cls(p.adaptive_target, p.adaptive_decay)

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
        if place is not None and self.probs is not None:
            self.weighted_sum = float(self.probs[place]) + self.decay * self.weighted_sum
            self.total_weight = 1.0 + self.decay * self.total_weight
