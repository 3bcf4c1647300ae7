"""Our samplers against llama.cpp's own (llama-cpp-python's low-level sampler API) on the same logits.

Each case runs one of llama.cpp's samplers on a token-data array and ours on the same logits, and compares
the tokens each keeps (and, for temperature, the logits). Samplers llama.cpp does not have (tfs, top_a,
epsilon and eta cutoff) are checked against their definitions on hand-made logits in test_sampling.py.
"""

from __future__ import annotations

import ctypes
import math

import pytest
import torch

from webui.engine import SamplingParams
from webui.engine.sampling import Sampler

L = pytest.importorskip("llama_cpp", reason="llama-cpp-python is the reference (installed by python -m tests)")

VOCAB = 400


def llama_kept(sampler, logits: torch.Tensor) -> dict[int, float]:
    """The tokens (id -> logit) llama.cpp's ``sampler`` leaves finite."""
    data = (L.llama_token_data * len(logits))(*[L.llama_token_data(i, float(v), 0.0) for i, v in enumerate(logits)])
    candidates = L.llama_token_data_array(data, len(logits), -1, False)
    try:
        L.llama_sampler_apply(sampler, ctypes.byref(candidates))
    finally:
        L.llama_sampler_free(sampler)
    return {data[i].id: data[i].logit for i in range(candidates.size) if math.isfinite(data[i].logit)}


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
