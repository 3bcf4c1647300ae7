"""Our samplers against llama.cpp's own (llama-cpp-python's low-level sampler API) on the same logits.

Each case runs one of llama.cpp's samplers on a token-data array and ours on the same logits, and compares
the tokens each keeps or the logits each leaves. Stateful samplers (penalties and DRY over a history, mirostat
v2, adaptive-p) are stepped side by side, ours told the token llama.cpp drew. Samplers llama.cpp does not have
(tfs, top_a, epsilon and eta cutoff, smoothing, encoder repetition penalty) are checked against their
definitions on hand-made logits in test_sampling.py.
"""

from __future__ import annotations

import ctypes
import math

import pytest
import torch

from webui.engine import SamplingParams
from webui.engine.sampling import AdaptiveP, Mirostat, Sampler, SamplingContext, Xtc

L = pytest.importorskip("llama_cpp", reason="llama-cpp-python is the reference (installed by python -m tests)")

VOCAB = 400


def llama_apply(sampler, logits: torch.Tensor, history=(), free: bool = True) -> tuple[dict[int, float], int]:
    """Run llama.cpp's ``sampler`` (after it accepted ``history``) on ``logits``: ({id: logit} of the tokens it
    leaves finite, the index it selected or -1)."""
    data = (L.llama_token_data * len(logits))(*[L.llama_token_data(i, float(v), 0.0) for i, v in enumerate(logits)])
    candidates = L.llama_token_data_array(data, len(logits), -1, False)
    try:
        for token in history:
            L.llama_sampler_accept(sampler, token)
        L.llama_sampler_apply(sampler, ctypes.byref(candidates))
    finally:
        if free:
            L.llama_sampler_free(sampler)
    left = [candidates.data[i] for i in range(candidates.size)]  # data may have moved (XTC drops the head)
    selected = left[candidates.selected].id if candidates.selected >= 0 else -1
    return {d.id: d.logit for d in left if math.isfinite(d.logit)}, selected


def llama_kept(sampler, logits: torch.Tensor) -> dict[int, float]:
    return llama_apply(sampler, logits)[0]


def ours_kept(params: SamplingParams, logits: torch.Tensor) -> dict[int, float]:
    out = Sampler(params, [], 0, 0).process([], logits)
    return {i: float(out[i]) for i in torch.nonzero(torch.isfinite(out)).flatten().tolist()}


def random_logits(seed: int, spread: float) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(VOCAB, generator=g) * spread


CASES = [
    ("top_k", lambda v: L.llama_sampler_init_top_k(v), lambda v: SamplingParams(top_k=v), [1, 5, 40]),
    ("top_p", lambda v: L.llama_sampler_init_top_p(v, 1), lambda v: SamplingParams(top_p=v), [0.1, 0.5, 0.9]),
    ("min_p", lambda v: L.llama_sampler_init_min_p(v, 1), lambda v: SamplingParams(min_p=v), [0.05, 0.2, 0.6]),
    ("typical_p", lambda v: L.llama_sampler_init_typical(v, 1), lambda v: SamplingParams(typical_p=v),
     [0.2, 0.5, 0.95]),
    ("top_n_sigma", lambda v: L.llama_sampler_init_top_n_sigma(v), lambda v: SamplingParams(top_n_sigma=v),
     [0.5, 1.0, 2.5]),
]


@pytest.mark.parametrize("name, theirs, ours, values", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("seed, spread", [(0, 1.0), (1, 3.0), (2, 0.3)])
def test_the_same_tokens_survive(name, theirs, ours, values, seed, spread):
    logits = random_logits(seed, spread)
    for value in values:
        assert set(llama_kept(theirs(value), logits)) == set(ours_kept(ours(value), logits)), (name, value)


def test_temperature_scales_the_same():
    logits = random_logits(3, 2.0)
    theirs = llama_kept(L.llama_sampler_init_temp(0.7), logits)
    ours = ours_kept(SamplingParams(temperature=0.7), logits)
    assert theirs.keys() == ours.keys() and all(abs(theirs[i] - ours[i]) < 1e-4 for i in ours)


def close(theirs: dict[int, float], ours: torch.Tensor, tol: float = 1e-4) -> bool:
    return all(abs(theirs[i] - float(ours[i])) < tol for i in theirs) and len(theirs) == int(torch.isfinite(ours).sum())


@pytest.mark.parametrize("last_n", [0, 6])
def test_penalties_over_the_same_history(last_n):
    history = [1, 2, 3, 3, 3, 4, 10, 11, 3, 2]
    logits = random_logits(4, 2.0)
    params = SamplingParams(repetition_penalty=1.3, frequency_penalty=0.2, presence_penalty=0.5,
                            repetition_penalty_range=last_n)
    theirs, _ = llama_apply(L.llama_sampler_init_penalties(VOCAB, last_n or len(history), 1.3, 0.2, 0.5),
                            logits, history)
    # llama.cpp counts every accepted token; ours count the output for presence/frequency, so no prompt here
    assert close(theirs, Sampler(params, [], 0, 0).process(history, logits))


@pytest.mark.parametrize("multiplier, base, allowed", [(0.8, 1.75, 2), (2.0, 1.2, 3), (0.5, 3.0, 1)])
def test_dry_penalises_the_same_tokens_by_the_same_amount(multiplier, base, allowed):
    g = torch.Generator().manual_seed(allowed)
    history = torch.randint(0, 12, (80,), generator=g).tolist() + [1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5]
    logits = random_logits(5, 2.0)
    theirs, _ = llama_apply(L.llama_sampler_init_dry(None, multiplier, base, allowed, 64, None, 0), logits, history)
    params = SamplingParams(dry_multiplier=multiplier, dry_base=base, dry_allowed_length=allowed,
                            dry_sequence_breakers=(), repetition_penalty_range=64)
    ours = Sampler(params, [], 0, 0).process(history, logits)
    assert (ours != logits).any() and close(theirs, ours)


def test_xtc_removes_the_same_top_choices():
    for seed, threshold in [(6, 0.05), (7, 0.1), (8, 0.02)]:
        logits = random_logits(seed, 3.0)
        theirs = llama_kept(L.llama_sampler_init_xtc(1.0, threshold, 1, 0), logits)
        ours = Xtc(threshold, 1.0, SamplingContext(0), protected=[])([], logits.clone())
        assert set(theirs) == set(torch.isfinite(ours).nonzero().flatten().tolist()), threshold


def test_dynamic_temperature_is_llama_cpps_temp_ext():
    for t, delta, exponent in [(1.0, 0.5, 1.0), (0.8, 0.7, 2.0), (1.5, 0.2, 0.5)]:
        logits = random_logits(9, 2.0)
        theirs = llama_kept(L.llama_sampler_init_temp_ext(t, delta, exponent), logits)
        params = SamplingParams(dynamic_temperature=True, dynatemp_low=t - delta, dynatemp_high=t + delta,
                                dynatemp_exponent=exponent)
        assert close(theirs, Sampler(params, [], 0, 0).process([], logits)), (t, delta, exponent)


def test_mirostat_v2_keeps_the_same_tokens_step_after_step():
    theirs_sampler, ours = L.llama_sampler_init_mirostat_v2(11, 3.0, 0.5), Mirostat(3.0, 0.5)
    try:
        for step in range(6):
            logits = random_logits(20 + step, 2.0)
            theirs, token = llama_apply(theirs_sampler, logits, free=False)
            assert set(theirs) == set(torch.isfinite(ours([], logits.clone())).nonzero().flatten().tolist()), step
            ours.observe(token)  # mu follows the token drawn, as llama.cpp's does
    finally:
        L.llama_sampler_free(theirs_sampler)


def test_adaptive_p_shapes_the_same_distribution_step_after_step():
    theirs_sampler, ours = L.llama_sampler_init_adaptive_p(0.3, 0.8, 5), AdaptiveP(0.3, 0.8)
    try:
        for step in range(6):
            logits = random_logits(30 + step, 2.0)
            theirs, token = llama_apply(theirs_sampler, logits, free=False)
            shaped = ours([], logits.clone())
            assert close(theirs, shaped, 1e-3), step
            L.llama_sampler_accept(theirs_sampler, token)
            ours.observe(token)
    finally:
        L.llama_sampler_free(theirs_sampler)
