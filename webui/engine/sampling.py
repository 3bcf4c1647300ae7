"""The sampling stage: every sequence that samples this step goes through the pipeline together.

The samplers themselves (one definition each, batched) are in ``samplers.py``. A sequence's ``Sampler`` holds
its processors in the order they run, built from its parameters and its ``SamplingContext`` (the prompt length,
the end-of-sequence ids, its own seeded random generator, the tokenizer); a processor is built only when its
parameter is not neutral, so greedy decoding with neutral parameters costs one ``argmax``.

``sample_rows`` takes the samplers of every row and the rows' logits [rows, vocab]: the rows go through it in
one pass whatever their samplers (one per top_k; ``sampling_rows.py`` lays the passes out and keeps them, with
the rows' parameter columns, while the same rows sample); each draw takes one number from that row's own
generator (inverse CDF over the kept tokens), so a seeded request gives the same tokens alone or in any batch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch

from webui.engine.params import SamplingParams
from webui.engine.rows import NEG_INF, Candidates, History, Rows, dense, first_max
from webui.engine.sampler_table import CONSTRAINTS, SAMPLER_SPECS, SAMPLERS
from webui.engine.sampling_rows import Pass, SamplingRows, Step, build_passes, pick, put
from webui.engine.samplers import (STEPS, CountPenalty, Dry, EncoderRepetitionPenalty, EosBan, Guidance, LogitBias,
                                   NoRepeatNGram, Processor, RepetitionPenalty, TokenBans)
from webui.engine.shaping import (AdaptiveP, DynamicTemperature, EpsilonCutoff, EtaCutoff, MinP, Mirostat,
                                  QuadraticSampling, TailFree, Temperature, TopA, TopK, TopNSigma, TopP, TypicalP, Xtc)

__all__ = ["AdaptiveP", "CountPenalty", "Dry", "DynamicTemperature", "EncoderRepetitionPenalty", "EosBan",
           "EpsilonCutoff", "EtaCutoff", "Guidance", "LogitBias", "MinP", "Mirostat", "NoRepeatNGram",
           "QuadraticSampling", "RepetitionPenalty", "TailFree", "TokenBans", "TopA", "TopK", "TopNSigma", "TopP",
           "Temperature", "TypicalP", "Xtc", "Sampler", "SamplingContext", "TokenChoice", "sample_rows", "build_processors",
           "active_samplers", "sampler_order", "CONSTRAINTS", "FACTORIES", "DRAW"]

DRAW = 2
"""How a sampled token is drawn from its row's probabilities, for records and caches: 1, ``torch.multinomial``
on each row (before #29); 2, the inverse CDF with one uniform number from the row's generator. A seed gives the
same tokens only under the same draw; greedy tokens do not depend on it."""


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
    history: History = field(default_factory=History, repr=False, compare=False)
    """The sequence's tokens as a tensor, for the penalties (grown a token a step)."""
    _generator: torch.Generator | None = field(default=None, repr=False, compare=False)

    def rng(self, device: torch.device) -> torch.Generator:
        """The sequence's own random generator, seeded with its seed on first use (never the global RNG)."""
        if self._generator is None:
            self._generator = torch.Generator(device=device)
            self._generator.manual_seed(self.seed)
        return self._generator


Factory = Callable[[SamplingParams, "SamplingContext"], "Processor | None"]


def _factories(**by_name: Factory) -> dict[str, Factory]:
    """Each step of ``sampler_table.SAMPLERS`` -> its factory (its class's ``build``), in table order. A step
    without a class, or a class for no step, fails on import; two classes for one step fail as they are defined."""
    missing = [s.name for s in SAMPLERS if s.name not in by_name]
    extra = sorted(set(by_name) - set(SAMPLER_SPECS))
    if missing or extra:
        raise RuntimeError(f"sampler factories do not match sampler_table.SAMPLERS: missing {missing}, "
                           f"extra {extra}")
    return {s.name: by_name[s.name] for s in SAMPLERS}


# How each step is built from its parameters: its class's ``build`` (samplers.STEPS, filled as the classes are
# defined), once its spec says they turn it on (``SamplerSpec.active``); None where the sequence leaves it nothing
# to do.
FACTORIES: dict[str, Factory] = _factories(**{name: cls.build for name, cls in STEPS.items()})


def sampler_order(params: SamplingParams) -> list[str]:
    """Every step in the order it runs: the constraints, then ``sampler_priority`` (temperature and its kin
    moved to the end when ``temperature_last``)."""
    order = list(params.sampler_priority)
    if params.temperature_last:
        last = [n for n in order if SAMPLER_SPECS[n].temperature]
        order = [n for n in order if n not in last] + last
    return [*CONSTRAINTS, *order]


def build_processors(params: SamplingParams, ctx: "SamplingContext") -> list[tuple[str, Processor]]:
    """The steps ``params`` turn on for one sequence (``ctx``), in the order they run. Greedy decoding
    (temperature 0) leaves out the samplers that only shape what is drawn."""
    built = []
    for name in sampler_order(params):
        spec = SAMPLER_SPECS[name]
        if (params.greedy and spec.draw_only) or not spec.active(params):
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
    """One sequence's sampling: its processors, its state and its own random generator."""

    def __init__(self, params: SamplingParams, eos_ids: Sequence[int], prompt_len: int, seed: int,
                 tokenizer: Any = None):
        self.params, self.seed = params, seed
        self.context = SamplingContext(prompt_len, tuple(sorted(set(eos_ids))), seed, tokenizer)
        self.processors = build_processors(params, self.context)
        self.observers = [p for _, p in self.processors if hasattr(p, "observe")]  # mirostat, adaptive-p, grammars
        # rows with the same key share a pass (one top_k, or none: every row keeps as many as alone)
        self.key = params.top_k if any(name == "top_k" for name, _ in self.processors) else 0

    @property
    def grammar_done(self) -> bool:
        """A structured-output grammar has ended (so the sequence must end, even with ban_eos)."""
        return any(getattr(o, "done", False) for o in self.observers)

    def process(self, ids: Sequence[int], logits: torch.Tensor) -> torch.Tensor:
        """The processors applied to a copy of ``logits`` (float32), as the stage applies them: what the next
        token is drawn from, over the whole vocabulary."""
        x = logits.to(torch.float32, copy=True).unsqueeze(0)
        return dense(run(Pass([self]), Rows([ids], [self.context]), x))[0]

    def sample(self, ids: Sequence[int], logits: torch.Tensor, top_logprobs: int | None = None) -> TokenChoice:
        choice = sample_rows([self], [ids], logits.unsqueeze(0), [top_logprobs])[0]
        if isinstance(choice, Exception):
            raise choice
        return choice

    def distribution(self, processed: torch.Tensor) -> torch.Tensor:
        """Log-probabilities of what is sampled from: softmax of the processed logits, or all mass on the
        argmax when greedy (temperature 0 picks the top token, whatever the rest)."""
        if self.params.greedy:
            out = torch.full_like(processed, NEG_INF)
            out[int(torch.argmax(processed))] = 0.0
            return out
        return processed.log_softmax(-1)


def run(batch: Pass[Sampler], rows: Rows, x: torch.Tensor, checked: bool = True) -> torch.Tensor | Candidates:
    """Every step of the pass over the rows' logits ``x`` [rows, vocab], which it may change; a step that only some
    rows have runs on those rows alone. ``checked``: a step that would leave a row no token at all (a ban on the
    one token top_k kept, say) is skipped for that row, so there is always something to draw; unchecked, such a
    row ends with nothing finite, which ``draw`` notices (the stage then runs that row again, checked)."""
    state: torch.Tensor | Candidates = x
    for step in batch.steps:
        if isinstance(state, Candidates) and not step.kind.on_candidates:
            state = state.dense()  # every row has this step (sampling_rows.union_steps)
        if step.everyone:
            state = _run_step(step, Rows(rows.ids, rows.contexts, step.columns), state, checked)
        else:
            index = step.index(x.device)
            part = Rows([rows.ids[r] for r in step.members], [rows.contexts[r] for r in step.members], step.columns)
            state = put(state, index, _run_step(step, part, pick(state, index), checked))
    return state


def _run_step(step: Step, rows: Rows, state: torch.Tensor | Candidates, checked: bool) -> torch.Tensor | Candidates:
    kind, procs = step.kind, step.procs
    keep = kind.can_empty and checked  # keep the row as it was, for a row the step would leave empty
    if isinstance(state, Candidates):
        kept = state if keep else None
        state = kind.candidates(procs, rows, state)
        if kept is not None:
            left = torch.isfinite(state.values).any(-1, keepdim=True)
            state = Candidates(torch.where(left, state.values, kept.values), state.index, state.vocab)
        if not kind.keeps_order:
            state = state.sorted()
        return state
    dense = state.clone() if keep else None
    state = kind.batch(procs, rows, state)
    if dense is not None:
        if not isinstance(state, torch.Tensor):  # a step that can empty a row keeps the dense form
            raise TypeError(f"{kind.__name__}.batch may empty a row, so it must return dense logits")
        state = torch.where(torch.isfinite(state).any(-1, keepdim=True), state, dense)
    return state


def draw(batch: Pass[Sampler], state: torch.Tensor | Candidates) -> tuple[list[int], list[bool]]:
    """One token a row: the top one for a greedy row, else inverse CDF with one uniform number from the row's own
    generator over the row's probabilities (running sums along the row, so the same alone as in a batch). And for
    each row whether it had any token to draw."""
    if all(batch.greedy):
        return _draw_greedy(state)
    if not any(batch.greedy):
        return _draw_sampled(batch.samplers, state)
    tokens, drawable = [0] * len(batch.greedy), [False] * len(batch.greedy)
    device = state.values.device if isinstance(state, Candidates) else state.device
    for greedy in (True, False):
        index = batch.places(greedy, device)
        part = pick(state, index)
        got = _draw_greedy(part) if greedy else _draw_sampled([s for s, g in zip(batch.samplers, batch.greedy)
                                                               if not g], part)
        for r, token, ok in zip(index.tolist(), *got):
            tokens[r], drawable[r] = token, ok
    return tokens, drawable


def _draw_greedy(state: torch.Tensor | Candidates) -> tuple[list[int], list[bool]]:
    values = state.values if isinstance(state, Candidates) else state
    places = first_max(values)
    drawable = values.gather(1, places) > NEG_INF
    return _tokens(state, places, drawable)


def _draw_sampled(samplers: Sequence[Sampler], state: torch.Tensor | Candidates) -> tuple[list[int], list[bool]]:
    values = state.values if isinstance(state, Candidates) else state
    device = values.device
    u = torch.stack([torch.rand((), generator=s.context.rng(device), device=device, dtype=torch.float64)
                     for s in samplers]).unsqueeze(1)
    if isinstance(state, Candidates):
        weights, running = state.weights()
    else:
        weights = values.softmax(-1)
        running = weights.cumsum(-1)
    total = running[:, -1:]
    drawable = torch.isfinite(total) & (total > 0)
    places = torch.searchsorted(running, (u * total.double()).to(running.dtype), right=True)
    positions = torch.arange(weights.shape[1], device=device).expand_as(weights)
    last = torch.where(weights > 0, positions, -1).amax(-1, keepdim=True)  # rounding never goes past it
    places = torch.minimum(places, last).clamp(min=0)
    return _tokens(state, places, drawable)


def greedy_past_bans(batch: Pass[Sampler], ids: Sequence[Sequence[int]], logits: torch.Tensor) -> list[int] | None:
    """Each row's token where every row of the pass is greedy and its only steps are token bans (an end-of-sequence
    ban under min_new_tokens, say): the top token of the logits as they came, when no row's top token is banned
    (None otherwise: the pass runs as usual). A ban only lowers the banned tokens, so a top token that is not
    banned is the top one after the bans too, the first of equal maxima included; the row is neither copied nor
    filled. (The engine's commonest step: a greedy stream that must not stop yet.)"""
    if not all(batch.greedy) or not all(issubclass(step.kind, TokenBans) for step in batch.steps):
        return None
    places = first_max(logits)
    if not all(math.isfinite(top) for top in logits.gather(1, places).squeeze(1).tolist()):
        return None  # a row with nothing to draw (or NaN): the usual path says so
    tokens = places.squeeze(1).tolist()
    for step in batch.steps:
        for place, proc in zip(step.members, step.procs):
            if isinstance(proc, TokenBans) and tokens[place] in proc.banned(ids[place]):
                return None
    return tokens


def _tokens(state: torch.Tensor | Candidates, places: torch.Tensor,
            drawable: torch.Tensor) -> tuple[list[int], list[bool]]:
    if isinstance(state, Candidates):
        places = state.index.gather(1, places)
    return places.squeeze(1).tolist(), drawable.squeeze(1).tolist()


def sample_rows(samplers: Sequence[Sampler], ids: Sequence[Sequence[int]], logits: torch.Tensor,
                top_logprobs: Sequence[int | None], kept: SamplingRows[Sampler] | None = None) -> list["TokenChoice | Exception"]:
    """The next token of every row: ``logits`` [rows, vocab] (each row's own), ``ids`` each row's tokens so
    far, ``top_logprobs`` what each row wants of log-probabilities (None: none). The rows go through the stage in
    as few passes as they can (sampling_rows.py; ``kept``: the passes kept from the step before, by the engine);
    a row whose sampler fails gets its exception in its place and the others their tokens."""
    out: list[TokenChoice | Exception] = [None] * len(samplers)  # type: ignore[list-item]
    for members, batch in (kept.passes(samplers) if kept is not None else build_passes(samplers)):
        try:
            _sample_group(batch, ids, logits, members, top_logprobs, out)
        except Exception as exc:
            if len(members) == 1:
                out[members[0]] = exc
                continue
            for r in members:  # find the row that fails; the others still get their tokens
                try:
                    _sample_group(Pass([samplers[r]]), ids, logits, [r], top_logprobs, out)
                except Exception as row_exc:
                    out[r] = row_exc
    return out


def _sample_group(batch: Pass[Sampler], ids: Sequence[Sequence[int]], logits: torch.Tensor, members: list[int],
                  top_logprobs: Sequence[int | None], out: list[TokenChoice | Exception],
                  checked: bool = False) -> None:
    """The rows ``members`` (of ``logits``, ``ids``, ``out``), which go through the pass ``batch`` together."""
    group = batch.samplers
    whole = len(members) == logits.shape[0]
    rows = logits if whole else logits.index_select(0, torch.tensor(members, device=logits.device))
    row_ids = [ids[r] for r in members]
    wants_logprobs = any(top_logprobs[r] is not None for r in members)
    quick = None if checked or wants_logprobs else greedy_past_bans(batch, row_ids, rows)
    if quick is not None:
        tokens, drawable, state = quick, [True] * len(quick), None
    else:
        xs = logits.to(torch.float32, copy=True) if whole else rows.to(torch.float32)
        state = run(batch, Rows(row_ids, [s.context for s in group]), xs, checked)
        tokens, drawable = draw(batch, state)
    processed = None
    for place, (r, sampler, token) in enumerate(zip(members, group, tokens)):
        if not drawable[place] and not checked:  # a ban left nothing: again, skipping the step that did it
            _sample_group(Pass([sampler]), ids, logits, [r], top_logprobs, out, checked=True)
            continue
        for observer in sampler.observers:
            observer.observe(token)
        choice = TokenChoice(token)
        wanted = top_logprobs[r]
        if wanted is not None:
            if processed is None:
                processed = dense(state)
            raw = logits[r].to(torch.float32).log_softmax(-1)
            after = sampler.distribution(processed[place])
            choice.logprob, choice.logprob_after = float(raw[token]), float(after[token])
            if wanted > 0:
                values, idx = torch.topk(raw, min(wanted, raw.shape[-1]))
                choice.top = [(int(i), float(v)) for i, v in zip(idx.tolist(), values.tolist())]
                choice.top_after = after[idx].tolist()
        out[r] = choice
