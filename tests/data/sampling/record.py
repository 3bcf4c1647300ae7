"""Records what the sampling pipeline keeps and how it reshapes the distribution, for every sampler and the
combinations the tests use, on seeded hand-made logits: `python tests/data/sampling/record.py` writes
expected.json beside it. It was run once on the per-sequence pipeline before sampling became a batched stage
(#29), so tests/unit/test_batched_sampling.py checks that the batched stage keeps the same tokens with the same
probabilities (to float rounding)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))

from webui.engine.params import SamplingParams  # noqa: E402
from webui.engine.sampling import Sampler  # noqa: E402

VOCAB, STEPS, PROMPT = 3000, 6, 24
EOS = (2,)

CASES: dict[str, dict] = {
    "greedy": dict(temperature=0),
    "greedy_penalties": dict(temperature=0, repetition_penalty=1.3, presence_penalty=0.5, frequency_penalty=0.4),
    "temperature": dict(temperature=0.7),
    "top_k": dict(top_k=40),
    "top_p": dict(top_p=0.9),
    "min_p": dict(min_p=0.05),
    "common": dict(temperature=0.7, top_p=0.9, top_k=40, min_p=0.02, repetition_penalty=1.1),
    "common_temperature_last": dict(temperature=0.7, top_p=0.9, top_k=40, min_p=0.02, repetition_penalty=1.1,
                                    temperature_last=True),
    "typical_p": dict(typical_p=0.8),
    "top_k_typical_p": dict(top_k=50, typical_p=0.8),
    "tfs": dict(tfs=0.9),
    "top_a": dict(top_a=0.2),
    "epsilon": dict(epsilon_cutoff=3.0),
    "eta": dict(eta_cutoff=3.0),
    "top_n_sigma": dict(top_n_sigma=1.5),
    "dynamic_temperature": dict(dynamic_temperature=True, dynatemp_low=0.5, dynatemp_high=1.5, dynatemp_exponent=1.0),
    "quadratic": dict(smoothing_factor=0.3, smoothing_curve=1.5),
    "repetition_range": dict(repetition_penalty=1.5, repetition_penalty_range=8),
    "presence_frequency": dict(presence_penalty=0.8, frequency_penalty=0.6, repetition_penalty_range=4),
    "encoder_repetition": dict(encoder_repetition_penalty=1.4),
    "no_repeat_ngram": dict(no_repeat_ngram_size=2),
    "dry": dict(dry_multiplier=1.5, dry_allowed_length=1),
    "logit_bias_bans": dict(logit_bias={5: 4.0, 7: -3.0}, custom_token_bans=(1, 3, 4), min_new_tokens=3),
    "ban_eos": dict(ban_eos=True, top_k=20),
    "mirostat": dict(mirostat_mode=2, mirostat_tau=4.0, mirostat_eta=0.3),
    "adaptive_p": dict(adaptive_target=0.2, adaptive_decay=0.8),
    "xtc": dict(xtc_threshold=0.05, xtc_probability=1.0),
    "priority": dict(temperature=1.5, min_p=0.1, top_k=30, sampler_priority=["min_p", "top_k", "temperature"]),
    "everything": dict(temperature=0.8, top_k=60, top_p=0.95, min_p=0.01, typical_p=0.95, tfs=0.97, top_a=0.05,
                       epsilon_cutoff=1.0, eta_cutoff=1.0, repetition_penalty=1.1, presence_penalty=0.2,
                       frequency_penalty=0.2, dry_multiplier=0.8, no_repeat_ngram_size=4,
                       encoder_repetition_penalty=1.05, smoothing_factor=0.2, top_n_sigma=3.0,
                       adaptive_target=0.3, adaptive_decay=0.9, xtc_threshold=0.1, xtc_probability=0.5),
}


def logits_at(step: int) -> torch.Tensor:
    """Peaked seeded logits: a few likely tokens over a long tail, like a model's."""
    g = torch.Generator().manual_seed(1000 + step)
    base = torch.randn(VOCAB, generator=g) * 2.0
    base[torch.randint(0, VOCAB, (12,), generator=g)] += 6.0
    return base


def history() -> list[int]:
    g = torch.Generator().manual_seed(7)
    ids = torch.randint(0, 60, (PROMPT,), generator=g).tolist()  # a small alphabet, so repeats happen
    return ids


def run(case: dict) -> list[dict]:
    params = SamplingParams(**case)
    ids = history()
    sampler = Sampler(params, EOS, PROMPT, seed=11)
    steps = []
    for step in range(STEPS):
        processed = sampler.process(ids, logits_at(step))
        after = sampler.distribution(processed).exp()
        keep = torch.nonzero(after > 0).squeeze(1).tolist()
        top = torch.topk(after, min(30, len(keep)))
        steps.append({"kept": len(keep), "kept_ids": keep if len(keep) <= 200 else None,
                      "top": [[int(i), round(float(p), 7)] for p, i in zip(top.values, top.indices)]})
        token = int(torch.argmax(processed))  # teacher-forced: the same path whatever the draw
        for observer in sampler.observers:
            observer.observe(token)
        ids = ids + [token]
    return steps


if __name__ == "__main__":
    out = {name: run(case) for name, case in CASES.items()}
    (HERE / "expected.json").write_text(json.dumps({"cases": CASES, "steps": out}, indent=0, default=list))
    print(f"wrote {len(out)} cases to {HERE / 'expected.json'}")
