"""Our sampling pipeline: small logits processors in an order the user can see and change.

Every processor is a callable ``(ids, logits) -> logits`` over one sequence's
1-D float logits, where ``ids`` is the sequence so far (prompt then output).
It is built from the parameters and the sequence's ``SamplingContext`` (the
prompt length, the end-of-sequence ids, the sequence's own seeded random
generator, the tokenizer), so a sampler that draws (XTC) or reads text (DRY's
sequence breakers) fits the same shape. A processor is built only when its
parameter is not neutral, so greedy decoding with neutral parameters costs one
``argmax``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch

from webui.engine.params import TEMPERATURE_SAMPLERS, SamplingParams
from webui.engine.structured import mask_for

Processor = Callable[[Sequence[int], torch.Tensor], torch.Tensor]

NEG_INF = float("-inf")

# CFG and the constraints always run first, before the samplers in ``sampler_priority``'s order.
CONSTRAINTS: tuple[str, ...] = ("cfg", "structured_outputs", "logit_bias", "token_bans", "eos_ban")
# Samplers that only shape what is drawn: greedy decoding (temperature 0) takes the top token without them.
DRAW_ONLY = frozenset({"temperature", "dynamic_temperature", "quadratic_sampling", "top_n_sigma", "top_k", "top_p",
                       "typical_p", "epsilon_cutoff", "eta_cutoff", "tfs", "top_a", "min_p", "adaptive_p",
                       "mirostat", "xtc"})


@dataclass
class SamplingContext:
    """What processors of one sequence may need besides its tokens and logits."""

    prompt_len: int
    eos_ids: tuple[int, ...] = ()
    seed: int = 0
    tokenizer: Any = None
    """The model's tokenizer (loaders.base.Tokenizer), or None where a caller has none."""
    guidance: torch.Tensor | None = None
    """CFG: the negative prompt's next-token logits at this step, set before each token is sampled."""
    _generator: torch.Generator | None = field(default=None, repr=False)

    def rng(self, device: torch.device) -> torch.Generator:
        """The sequence's own random generator, seeded with its seed on first use (never the global RNG)."""
        if self._generator is None:
            self._generator = torch.Generator(device=device)
            self._generator.manual_seed(self.seed)
        return self._generator


class Guidance:
    """Classifier-free guidance: ``uncond + scale * (cond - uncond)`` over log-probabilities, where uncond is
    the negative prompt's distribution at the same step (transformers' UnbatchedClassifierFreeGuidance)."""

    def __init__(self, scale: float, ctx: "SamplingContext"):
        self.scale, self.ctx = scale, ctx

    def __call__(self, ids: Sequence[int], logits: torch.Tensor) -> torch.Tensor:
        if self.ctx.guidance is None:
            return logits
        uncond = self.ctx.guidance.to(logits.device, torch.float32).log_softmax(-1)
        return uncond + self.scale * (logits.log_softmax(-1) - uncond)


class LogitBias:
    """Adds a fixed bias to chosen token ids (OpenAI's logit_bias)."""

    def __init__(self, bias: Sequence[tuple[int, float]]):
        self.ids = torch.tensor([t for t, _ in bias], dtype=torch.long)
        self.values = torch.tensor([b for _, b in bias], dtype=torch.float32)

    def __call__(self, ids: Sequence[int], logits: torch.Tensor) -> torch.Tensor:
        logits[self.ids.to(logits.device)] += self.values.to(logits.device, logits.dtype)
        return logits


class EosBan:
    """Blocks end-of-sequence tokens while fewer than ``min_new`` tokens were made (or always)."""

    def __init__(self, eos_ids: Sequence[int], prompt_len: int, min_new: int, always: bool):
        self.eos = torch.tensor(sorted(set(eos_ids)), dtype=torch.long)
        self.prompt_len, self.min_new, self.always = prompt_len, min_new, always

    def __call__(self, ids: Sequence[int], logits: torch.Tensor) -> torch.Tensor:
        if self.always or len(ids) - self.prompt_len < self.min_new:
            logits[self.eos.to(logits.device)] = NEG_INF
        return logits


class TokenBans:
    """Token ids that are never generated (text-generation-webui's custom_token_bans)."""

    def __init__(self, ids: Sequence[int]):
        self.ids = torch.tensor(list(ids), dtype=torch.long)

    def __call__(self, ids: Sequence[int], logits: torch.Tensor) -> torch.Tensor:
        logits[self.ids.to(logits.device)] = NEG_INF
        return logits


def _window(ids: Sequence[int], last_n: int) -> Sequence[int]:
    """The last ``last_n`` tokens (all of them when 0)."""
    return ids[len(ids) - last_n:] if 0 < last_n < len(ids) else ids


class RepetitionPenalty:
    """CTRL-style penalty on every token among the last ``last_n`` of the prompt and output (0: all)."""

    def __init__(self, penalty: float, last_n: int = 0):
        self.penalty, self.last_n = penalty, last_n

    def __call__(self, ids: Sequence[int], logits: torch.Tensor) -> torch.Tensor:
        window = _window(ids, self.last_n)
        if not window:
            return logits
        seen = torch.tensor(list(set(window)), dtype=torch.long, device=logits.device)
        values = logits[seen]
        logits[seen] = torch.where(values > 0, values / self.penalty, values * self.penalty)
        return logits


class CountPenalty:
    """OpenAI's presence and frequency penalties: over the generated tokens only (not the prompt), the last
    ``last_n`` of them when set; ``presence`` once per token seen, ``frequency`` per time seen."""

    def __init__(self, presence: float, frequency: float, prompt_len: int, last_n: int = 0):
        self.presence, self.frequency, self.prompt_len, self.last_n = presence, frequency, prompt_len, last_n

    def __call__(self, ids: Sequence[int], logits: torch.Tensor) -> torch.Tensor:
        out = _window(ids[self.prompt_len:], self.last_n)
        if not out:
            return logits
        counts = torch.bincount(torch.tensor(out, dtype=torch.long), minlength=logits.shape[-1])
        counts = counts[: logits.shape[-1]].to(logits.device, logits.dtype)
        return logits - self.frequency * counts - self.presence * (counts > 0).to(logits.dtype)


class EncoderRepetitionPenalty:
    """Scales the logits of the prompt's tokens: a penalty above 1 makes them likelier (transformers'
    EncoderRepetitionPenaltyLogitsProcessor, with the prompt as the encoder input)."""

    def __init__(self, penalty: float, prompt_len: int):
        self.penalty, self.prompt_len = penalty, prompt_len

    def __call__(self, ids: Sequence[int], logits: torch.Tensor) -> torch.Tensor:
        if not self.prompt_len:
            return logits
        seen = torch.tensor(list(set(ids[:self.prompt_len])), dtype=torch.long, device=logits.device)
        values = logits[seen]
        logits[seen] = torch.where(values > 0, values * self.penalty, values / self.penalty)
        return logits


class Dry:
    """DRY ("don't repeat yourself"): a token that would extend a sequence that already occurred, by a match of
    at least ``allowed_length`` tokens, loses ``multiplier * base ** (length - allowed_length)``. Matches do not
    cross sequence breakers and are capped at 50 tokens (text-generation-webui's DRYLogitsProcessor)."""

    MAX_MATCH = 50

    def __init__(self, multiplier: float, base: float, allowed_length: int, breakers: set[int], last_n: int = 0):
        self.multiplier, self.base, self.allowed = multiplier, base, allowed_length
        self.breakers, self.last_n = breakers, last_n

    def penalties(self, ids: Sequence[int]) -> dict[int, float]:
        """token -> penalty after the sequence ``ids``."""
        ids = list(_window(ids, self.last_n))
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

    def __call__(self, ids: Sequence[int], logits: torch.Tensor) -> torch.Tensor:
        for token, penalty in self.penalties(ids).items():
            logits[token] -= penalty
        return logits


class NoRepeatNGram:
    """Bans the token that would complete an n-gram already present."""

    def __init__(self, n: int):
        self.n = n

    def __call__(self, ids: Sequence[int], logits: torch.Tensor) -> torch.Tensor:
        n = self.n
        if len(ids) < n:
            return logits
        prefix = tuple(ids[len(ids) - n + 1:])
        banned = {ids[i + n - 1] for i in range(len(ids) - n + 1) if tuple(ids[i:i + n - 1]) == prefix}
        if banned:
            logits[torch.tensor(sorted(banned), dtype=torch.long, device=logits.device)] = NEG_INF
        return logits


class Temperature:
    def __init__(self, temperature: float):
        self.temperature = temperature

    def __call__(self, ids: Sequence[int], logits: torch.Tensor) -> torch.Tensor:
        return logits / self.temperature


class TopK:
    def __init__(self, k: int):
        self.k = k

    def __call__(self, ids: Sequence[int], logits: torch.Tensor) -> torch.Tensor:
        if self.k >= logits.shape[-1]:
            return logits
        kth = torch.topk(logits, self.k).values[-1]
        return logits.masked_fill(logits < kth, NEG_INF)


class TopP:
    def __init__(self, p: float):
        self.p = p

    def __call__(self, ids: Sequence[int], logits: torch.Tensor) -> torch.Tensor:
        sorted_logits, order = torch.sort(logits, descending=True)
        probs = sorted_logits.softmax(-1)
        # Drop a token when the tokens before it already reach p; the top one always stays.
        drop = (probs.cumsum(-1) - probs) >= self.p
        drop[0] = False
        return logits.masked_fill(drop.scatter(0, order, drop), NEG_INF)


class TypicalP:
    def __init__(self, p: float):
        self.p = p

    def __call__(self, ids: Sequence[int], logits: torch.Tensor) -> torch.Tensor:
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


class MinP:
    def __init__(self, p: float):
        self.p = p

    def __call__(self, ids: Sequence[int], logits: torch.Tensor) -> torch.Tensor:
        probs = logits.softmax(-1)
        return logits.masked_fill(probs < self.p * probs.max(), NEG_INF)


class TopNSigma:
    """Keeps tokens whose logit is within n standard deviations of the top logit (llama.cpp's top_n_sigma)."""

    def __init__(self, n: float):
        self.n = n

    def __call__(self, ids: Sequence[int], logits: torch.Tensor) -> torch.Tensor:
        finite = logits[torch.isfinite(logits)]
        if finite.numel() <= 1:
            return logits
        cutoff = finite.max() - self.n * finite.std(unbiased=False)
        return logits.masked_fill(logits < cutoff, NEG_INF)


class TailFree:
    """Tail-free sampling: the absolute second derivative of the sorted probabilities, normalised, summed until
    ``z``; the tokens after that point are the tail."""

    def __init__(self, z: float):
        self.z = z

    def __call__(self, ids: Sequence[int], logits: torch.Tensor) -> torch.Tensor:
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


class TopA:
    """Drops tokens below ``a`` times the squared probability of the top token."""

    def __init__(self, a: float):
        self.a = a

    def __call__(self, ids: Sequence[int], logits: torch.Tensor) -> torch.Tensor:
        probs = logits.softmax(-1)
        return logits.masked_fill(probs < self.a * probs.max() ** 2, NEG_INF)


class EpsilonCutoff:
    """Drops tokens whose probability is below epsilon (given in units of 1e-4, as text-generation-webui does);
    the top token always stays."""

    def __init__(self, epsilon: float):
        self.epsilon = epsilon * 1e-4

    def __call__(self, ids: Sequence[int], logits: torch.Tensor) -> torch.Tensor:
        probs = logits.softmax(-1)
        return logits.masked_fill((probs < self.epsilon) & (probs < probs.max()), NEG_INF)


class EtaCutoff:
    """Eta sampling (Hewitt et al.): drops tokens below min(eta, sqrt(eta) * exp(-entropy)), eta in units of 1e-4;
    the top token always stays."""

    def __init__(self, eta: float):
        self.eta = eta * 1e-4

    def __call__(self, ids: Sequence[int], logits: torch.Tensor) -> torch.Tensor:
        logp = logits.log_softmax(-1)
        probs = logp.exp()
        entropy = -torch.nansum(probs * logp)
        cutoff = min(self.eta, float(self.eta ** 0.5 * torch.exp(-entropy)))
        return logits.masked_fill((probs < cutoff) & (probs < probs.max()), NEG_INF)


class Xtc:
    """XTC (exclude top choices): with probability ``probability`` (drawn from the sequence's own generator),
    remove every token at least ``threshold`` likely except the least likely of them; never when that would
    remove a newline or end-of-sequence token (text-generation-webui's XTCLogitsWarper)."""

    def __init__(self, threshold: float, probability: float, ctx: "SamplingContext", protected: Sequence[int]):
        self.threshold, self.probability, self.ctx = threshold, probability, ctx
        self.protected = torch.tensor(sorted(set(protected)), dtype=torch.long)

    def __call__(self, ids: Sequence[int], logits: torch.Tensor) -> torch.Tensor:
        draw = torch.rand((), generator=self.ctx.rng(logits.device), device=logits.device)
        if float(draw) >= self.probability:
            return logits
        sorted_logits, order = torch.sort(logits, descending=True)
        probs = sorted_logits.softmax(-1)
        drop = torch.zeros_like(probs, dtype=torch.bool)
        drop[:-1] = probs[1:] >= self.threshold  # all that meet it but the last (least likely) one
        drop = drop.scatter(0, order, drop)
        if self.protected.numel() and drop[self.protected.to(logits.device)].any():
            return logits
        return logits.masked_fill(drop, NEG_INF)


class DynamicTemperature:
    """A temperature between ``low`` and ``high`` by the normalised entropy of the distribution (to the power
    ``exponent``): sure steps sample cold, unsure ones hot (llama.cpp's temp_ext with low = t - delta)."""

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

    def __call__(self, ids: Sequence[int], logits: torch.Tensor) -> torch.Tensor:
        return logits / self.temperature(logits)


class QuadraticSampling:
    """Smoothing: each logit moves to ``top - k*f*d**2 + s*f*d**3`` with d its distance below the top logit,
    k = (3 - curve) / 2, s = (curve - 1) / 2 (text-generation-webui's QuadraticSamplingLogitsWarper)."""

    def __init__(self, factor: float, curve: float):
        self.factor, self.k, self.s = factor, (3 - curve) / 2, (curve - 1) / 2

    def __call__(self, ids: Sequence[int], logits: torch.Tensor) -> torch.Tensor:
        top = logits.max()
        d = logits - top
        shaped = top - self.k * self.factor * d ** 2 + self.s * self.factor * d ** 3
        return torch.where(torch.isfinite(logits), shaped, logits)


class Mirostat:
    """Mirostat v2: keep the tokens whose surprise (-log2 p) is at most mu (at least the top one); after each
    token, mu moves by eta times the gap between that token's surprise (among those kept) and tau. The state
    belongs to one sequence; mu starts at 2 * tau."""

    def __init__(self, tau: float, eta: float):
        self.tau, self.eta, self.mu = tau, eta, 2.0 * tau
        self.kept_logp: torch.Tensor | None = None

    def __call__(self, ids: Sequence[int], logits: torch.Tensor) -> torch.Tensor:
        drop = -logits.log_softmax(-1) / math.log(2) > self.mu
        drop[torch.argmax(logits)] = False
        out = logits.masked_fill(drop, NEG_INF)
        self.kept_logp = out.log_softmax(-1)
        return out

    def observe(self, token: int) -> None:
        if self.kept_logp is not None:
            surprise = -float(self.kept_logp[token]) / math.log(2)
            self.mu -= self.eta * (surprise - self.tau)


class AdaptiveP:
    """Adaptive-p: favour tokens whose probability is near a target that is steered by an average of the
    probabilities picked so far (llama.cpp's adaptive_p, text-generation-webui's AdaptivePLogitsWarper)."""

    WIDTH, PEAK, SHARPNESS = 0.3, 5.0, 10.0

    def __init__(self, target: float, decay: float):
        self.target, self.decay = target, min(decay, 0.99)
        self.weighted_sum = self.target / (1.0 - self.decay)  # as if the target had been met all along
        self.total_weight = 1.0 / (1.0 - self.decay)
        self.probs: torch.Tensor | None = None

    def __call__(self, ids: Sequence[int], logits: torch.Tensor) -> torch.Tensor:
        self.probs = logits.softmax(-1)
        average = self.weighted_sum / self.total_weight if self.total_weight > 0 else self.target
        adapted = max(0.0, min(1.0, 2.0 * self.target - average))
        dist = ((self.probs - adapted) / self.WIDTH).abs()
        shaped = self.PEAK - self.SHARPNESS * dist * dist / (1.0 + dist)
        return torch.where(torch.isfinite(logits), shaped, logits)

    def observe(self, token: int) -> None:
        if self.probs is not None:
            self.weighted_sum = float(self.probs[token]) + self.decay * self.weighted_sum
            self.total_weight = 1.0 + self.decay * self.total_weight


def sequence_breaker_ids(tokenizer: Any, breakers: Sequence[str]) -> set[int]:
    """Each breaker string's token as it ends a text (text-generation-webui encodes "a" + breaker)."""
    if tokenizer is None:
        return set()
    return {ids[-1] for b in breakers if (ids := tokenizer.encode("a" + b, add_special_tokens=False))}


def newline_ids(tokenizer: Any) -> list[int]:
    return sorted(sequence_breaker_ids(tokenizer, ["\n"]))


Factory = Callable[[SamplingParams, "SamplingContext"], "Processor | None"]

# How each step is built from the parameters, or None where its parameters are neutral.
FACTORIES: dict[str, Factory] = {
    "cfg": lambda p, c: Guidance(p.guidance_scale, c) if p.guidance_scale != 1.0 else None,
    "structured_outputs": lambda p, c: (mask_for(p.structured_outputs, c.tokenizer) or (lambda ids, logits: logits)
                                        if p.structured_outputs else None),
    "logit_bias": lambda p, c: LogitBias(p.logit_bias) if p.logit_bias else None,
    "token_bans": lambda p, c: TokenBans(p.custom_token_bans) if p.custom_token_bans else None,
    "eos_ban": lambda p, c: (EosBan(c.eos_ids, c.prompt_len, p.min_new_tokens, p.ban_eos)
                             if c.eos_ids and (p.ban_eos or p.min_new_tokens > 0) else None),
    "repetition_penalty": lambda p, c: (RepetitionPenalty(p.repetition_penalty, p.repetition_penalty_range)
                                        if p.repetition_penalty != 1.0 else None),
    "presence_penalty": lambda p, c: (CountPenalty(p.presence_penalty, 0.0, c.prompt_len, p.repetition_penalty_range)
                                      if p.presence_penalty else None),
    "frequency_penalty": lambda p, c: (CountPenalty(0.0, p.frequency_penalty, c.prompt_len,
                                                    p.repetition_penalty_range) if p.frequency_penalty else None),
    "dry": lambda p, c: (Dry(p.dry_multiplier, p.dry_base, p.dry_allowed_length,
                             sequence_breaker_ids(c.tokenizer, p.dry_sequence_breakers), p.repetition_penalty_range)
                         if p.dry_multiplier > 0.0 else None),
    "top_n_sigma": lambda p, c: TopNSigma(p.top_n_sigma) if p.top_n_sigma > 0.0 else None,
    "temperature": lambda p, c: (Temperature(p.temperature)
                                 if p.temperature != 1.0 and not p.dynamic_temperature else None),
    "dynamic_temperature": lambda p, c: (DynamicTemperature(p.dynatemp_low, p.dynatemp_high, p.dynatemp_exponent)
                                         if p.dynamic_temperature else None),
    "quadratic_sampling": lambda p, c: (QuadraticSampling(p.smoothing_factor, p.smoothing_curve)
                                        if p.smoothing_factor > 0.0 else None),
    "top_k": lambda p, c: TopK(p.top_k) if p.top_k > 0 else None,
    "top_p": lambda p, c: TopP(p.top_p) if p.top_p < 1.0 else None,
    "typical_p": lambda p, c: TypicalP(p.typical_p) if p.typical_p < 1.0 else None,
    "epsilon_cutoff": lambda p, c: EpsilonCutoff(p.epsilon_cutoff) if p.epsilon_cutoff > 0.0 else None,
    "eta_cutoff": lambda p, c: EtaCutoff(p.eta_cutoff) if p.eta_cutoff > 0.0 else None,
    "tfs": lambda p, c: TailFree(p.tfs) if p.tfs < 1.0 else None,
    "top_a": lambda p, c: TopA(p.top_a) if p.top_a > 0.0 else None,
    "min_p": lambda p, c: MinP(p.min_p) if p.min_p > 0.0 else None,
    "adaptive_p": lambda p, c: AdaptiveP(p.adaptive_target, p.adaptive_decay) if p.adaptive_target > 0.0 else None,
    "mirostat": lambda p, c: Mirostat(p.mirostat_tau, p.mirostat_eta) if p.mirostat_mode == 2 else None,
    "xtc": lambda p, c: (Xtc(p.xtc_threshold, p.xtc_probability, c, [*c.eos_ids, *newline_ids(c.tokenizer)])
                         if p.xtc_probability > 0.0 else None),
    "encoder_repetition_penalty": lambda p, c: (EncoderRepetitionPenalty(p.encoder_repetition_penalty, c.prompt_len)
                                                if p.encoder_repetition_penalty != 1.0 else None),
    "no_repeat_ngram": lambda p, c: NoRepeatNGram(p.no_repeat_ngram_size) if p.no_repeat_ngram_size > 0 else None,
}


def sampler_order(params: SamplingParams) -> list[str]:
    """Every step in the order it runs: the constraints, then ``sampler_priority`` (temperature and its kin
    moved to the end when ``temperature_last``)."""
    order = list(params.sampler_priority)
    if params.temperature_last:
        order = [n for n in order if n not in TEMPERATURE_SAMPLERS] + [n for n in order if n in TEMPERATURE_SAMPLERS]
    return [*CONSTRAINTS, *order]


def build_processors(params: SamplingParams, ctx: "SamplingContext") -> list[tuple[str, Processor]]:
    """The steps ``params`` turn on for one sequence (``ctx``), in the order they run. Greedy decoding
    (temperature 0) leaves out the samplers that only shape what is drawn."""
    built = []
    for name in sampler_order(params):
        if params.greedy and name in DRAW_ONLY:
            continue
        processor = FACTORIES[name](params, ctx)
        if processor is not None:
            built.append((name, processor))
    return built


def active_samplers(params: SamplingParams) -> list[str]:
    """The names of the steps ``params`` turn on, in the order they run (what the UI shows)."""
    return [name for name, _ in build_processors(params, SamplingContext(0, (0,)))]


@dataclass
class TokenChoice:
    """One sampled token and, if asked for, its log-probabilities."""

    token_id: int
    logprob: float | None = None  # under the model's raw distribution
    top: list[tuple[int, float]] | None = None  # raw top alternatives
    logprob_after: float | None = None  # under the distribution actually sampled from (after the processors)
    top_after: list[float] | None = None  # the same alternatives' log-probabilities after the processors


class Sampler:
    """Samples one sequence's tokens; owns that request's random generator."""

    def __init__(self, params: SamplingParams, eos_ids: Sequence[int], prompt_len: int, seed: int,
                 tokenizer: Any = None):
        self.params, self.seed = params, seed
        self.context = SamplingContext(prompt_len, tuple(sorted(set(eos_ids))), seed, tokenizer)
        self.processors = build_processors(params, self.context)
        self.observers = [p for _, p in self.processors if hasattr(p, "observe")]  # mirostat, adaptive-p

    @property
    def grammar_done(self) -> bool:
        """A structured-output grammar has ended (so the sequence must end, even with ban_eos)."""
        return any(getattr(o, "done", False) for o in self.observers)

    def process(self, ids: Sequence[int], logits: torch.Tensor) -> torch.Tensor:
        """Apply the processors to a copy of ``logits`` (float32). A step that would leave no token at all
        (a ban on the one token top_k kept, say) is skipped, so there is always something to draw."""
        out = logits.to(torch.float32, copy=True)
        for _, processor in self.processors:
            before = out.clone()
            out = processor(ids, out)
            if not bool(torch.isfinite(out).any()):
                out = before
        return out

    def sample(self, ids: Sequence[int], logits: torch.Tensor, top_logprobs: int | None = None) -> TokenChoice:
        processed = self.process(ids, logits)
        if self.params.greedy:
            token = int(torch.argmax(processed).item())
        else:
            probs = processed.softmax(-1)
            token = int(torch.multinomial(probs, 1, generator=self.context.rng(probs.device)).item())
        for observer in self.observers:
            observer.observe(token)
        choice = TokenChoice(token)
        if top_logprobs is not None:
            raw = logits.to(torch.float32).log_softmax(-1)
            after = self.distribution(processed)
            choice.logprob, choice.logprob_after = float(raw[token]), float(after[token])
            if top_logprobs > 0:
                values, idx = torch.topk(raw, min(top_logprobs, raw.shape[-1]))
                choice.top = [(int(i), float(v)) for i, v in zip(idx.tolist(), values.tolist())]
                choice.top_after = after[idx].tolist()
        return choice

    def distribution(self, processed: torch.Tensor) -> torch.Tensor:
        """Log-probabilities of what is sampled from: softmax of the processed logits, or all mass on the
        argmax when greedy (temperature 0 picks the top token, whatever the rest)."""
        if self.params.greedy:
            out = torch.full_like(processed, NEG_INF)
            out[int(torch.argmax(processed))] = 0.0
            return out
        return processed.log_softmax(-1)
