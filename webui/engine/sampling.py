"""Our sampling pipeline: small logits processors in an explicit order.

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

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch

from webui.engine.params import SamplingParams

Processor = Callable[[Sequence[int], torch.Tensor], torch.Tensor]

NEG_INF = float("-inf")

# The order processors run in. Penalties look at raw logits; temperature then
# reshapes the distribution the truncation filters see.
PROCESSOR_ORDER: tuple[str, ...] = (
    "logit_bias",
    "eos_ban",
    "repetition_penalty",
    "presence_frequency_penalty",
    "no_repeat_ngram",
    "temperature",
    "top_n_sigma",
    "top_k",
    "top_p",
    "typical_p",
    "epsilon_cutoff",
    "eta_cutoff",
    "tfs",
    "top_a",
    "min_p",
)

TRUNCATION = {"temperature", "top_n_sigma", "top_k", "top_p", "typical_p", "epsilon_cutoff", "eta_cutoff", "tfs",
              "top_a", "min_p"}


@dataclass
class SamplingContext:
    """What processors of one sequence may need besides its tokens and logits."""

    prompt_len: int
    eos_ids: tuple[int, ...] = ()
    seed: int = 0
    tokenizer: Any = None
    """The model's tokenizer (loaders.base.Tokenizer), or None where a caller has none."""
    _generator: torch.Generator | None = field(default=None, repr=False)

    def rng(self, device: torch.device) -> torch.Generator:
        """The sequence's own random generator, seeded with its seed on first use (never the global RNG)."""
        if self._generator is None:
            self._generator = torch.Generator(device=device)
            self._generator.manual_seed(self.seed)
        return self._generator


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


class RepetitionPenalty:
    """CTRL-style penalty on every token already in the prompt or the output."""

    def __init__(self, penalty: float):
        self.penalty = penalty

    def __call__(self, ids: Sequence[int], logits: torch.Tensor) -> torch.Tensor:
        if not ids:
            return logits
        seen = torch.tensor(list(set(ids)), dtype=torch.long, device=logits.device)
        values = logits[seen]
        logits[seen] = torch.where(values > 0, values / self.penalty, values * self.penalty)
        return logits


class PresenceFrequencyPenalty:
    """OpenAI's penalties: over the generated tokens only, not the prompt."""

    def __init__(self, presence: float, frequency: float, prompt_len: int):
        self.presence, self.frequency, self.prompt_len = presence, frequency, prompt_len

    def __call__(self, ids: Sequence[int], logits: torch.Tensor) -> torch.Tensor:
        out = ids[self.prompt_len:]
        if not out:
            return logits
        counts = torch.bincount(torch.tensor(out, dtype=torch.long), minlength=logits.shape[-1])
        counts = counts[: logits.shape[-1]].to(logits.device, logits.dtype)
        return logits - self.frequency * counts - self.presence * (counts > 0).to(logits.dtype)


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


def build_processors(params: SamplingParams, ctx: SamplingContext) -> list[tuple[str, Processor]]:
    """The non-neutral processors for ``params`` over one sequence (``ctx``), in ``PROCESSOR_ORDER``."""
    p, prompt_len = params, ctx.prompt_len
    made: dict[str, Processor] = {}
    if p.logit_bias:
        made["logit_bias"] = LogitBias(p.logit_bias)
    if ctx.eos_ids and (p.ban_eos or p.min_new_tokens > 0):
        made["eos_ban"] = EosBan(ctx.eos_ids, prompt_len, p.min_new_tokens, p.ban_eos)
    if p.repetition_penalty != 1.0:
        made["repetition_penalty"] = RepetitionPenalty(p.repetition_penalty)
    if p.presence_penalty or p.frequency_penalty:
        made["presence_frequency_penalty"] = PresenceFrequencyPenalty(p.presence_penalty, p.frequency_penalty, prompt_len)
    if p.no_repeat_ngram_size > 0:
        made["no_repeat_ngram"] = NoRepeatNGram(p.no_repeat_ngram_size)
    if not p.greedy:  # truncation cannot change the argmax, so greedy skips it
        if p.temperature != 1.0:
            made["temperature"] = Temperature(p.temperature)
        if p.top_n_sigma > 0.0:
            made["top_n_sigma"] = TopNSigma(p.top_n_sigma)
        if p.top_k > 0:
            made["top_k"] = TopK(p.top_k)
        if p.top_p < 1.0:
            made["top_p"] = TopP(p.top_p)
        if p.typical_p < 1.0:
            made["typical_p"] = TypicalP(p.typical_p)
        if p.epsilon_cutoff > 0.0:
            made["epsilon_cutoff"] = EpsilonCutoff(p.epsilon_cutoff)
        if p.eta_cutoff > 0.0:
            made["eta_cutoff"] = EtaCutoff(p.eta_cutoff)
        if p.tfs < 1.0:
            made["tfs"] = TailFree(p.tfs)
        if p.top_a > 0.0:
            made["top_a"] = TopA(p.top_a)
        if p.min_p > 0.0:
            made["min_p"] = MinP(p.min_p)
    return [(name, made[name]) for name in PROCESSOR_ORDER if name in made]


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

    def process(self, ids: Sequence[int], logits: torch.Tensor) -> torch.Tensor:
        """Apply the processors to a copy of ``logits`` (float32)."""
        out = logits.to(torch.float32, copy=True)
        for _, processor in self.processors:
            out = processor(ids, out)
        return out

    def sample(self, ids: Sequence[int], logits: torch.Tensor, top_logprobs: int | None = None) -> TokenChoice:
        processed = self.process(ids, logits)
        if self.params.greedy:
            token = int(torch.argmax(processed).item())
        else:
            probs = processed.softmax(-1)
            token = int(torch.multinomial(probs, 1, generator=self.context.rng(probs.device)).item())
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
