"""The batched sampling stage (#29): the same tokens kept, with the same probabilities, as the per-sequence
pipeline before it (tests/data/sampling/expected.json, recorded on that pipeline), and every row the same
alone as in any batch."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from webui.engine.params import SamplingParams
from webui.engine.sampling import Sampler, sample_rows

DATA = Path(__file__).resolve().parents[1] / "data" / "sampling"
sys.path.insert(0, str(DATA))
import record  # noqa: E402

EXPECTED = json.loads((DATA / "expected.json").read_text())


def params(case: dict) -> SamplingParams:
    case = dict(case)
    if "logit_bias" in case:
        case["logit_bias"] = {int(k): v for k, v in case["logit_bias"].items()}
    return SamplingParams(**case)


@pytest.mark.parametrize("name", sorted(EXPECTED["cases"]))
def test_the_stage_keeps_what_the_per_sequence_pipeline_kept(name):
    case = params(EXPECTED["cases"][name])
    ids = record.history()
    sampler = Sampler(case, record.EOS, record.PROMPT, seed=11)
    for step, want in enumerate(EXPECTED["steps"][name]):
        processed = sampler.process(ids, record.logits_at(step))
        after = sampler.distribution(processed).exp()
        keep = torch.nonzero(after > 0).squeeze(1).tolist()
        assert len(keep) == want["kept"], (name, step)
        if want["kept_ids"] is not None:
            assert keep == want["kept_ids"], (name, step)
        for token, p in want["top"]:
            assert float(after[token]) == pytest.approx(p, rel=2e-5, abs=1e-7), (name, step, token)
        token = int(torch.argmax(processed))
        for observer in sampler.observers:
            observer.observe(token)
        ids = ids + [token]


def _run(cases: list[SamplingParams], seeds: list[int], steps: int = 8) -> list[list[int]]:
    """Rows sampled together for ``steps`` steps, each row's own logits from its own tokens so far."""
    samplers = [Sampler(p, record.EOS, record.PROMPT, seed) for p, seed in zip(cases, seeds)]
    ids = [record.history() for _ in cases]
    for step in range(steps):
        logits = torch.stack([record.logits_at(step * 31 + len(set(row)) + seed) for seed, row in zip(seeds, ids)])
        for row, choice in zip(ids, sample_rows(samplers, ids, logits, [None] * len(ids))):
            row.append(choice.token_id)
    return [row[record.PROMPT:] for row in ids]


BATCH = ["common", "common_temperature_last", "top_p", "min_p", "typical_p", "top_k_typical_p", "everything",
         "mirostat", "xtc", "greedy_penalties", "presence_frequency", "priority", "dry", "temperature"]


def test_every_row_is_the_same_alone_as_in_a_mixed_batch():
    cases = [params(EXPECTED["cases"][name]) for name in BATCH]
    cases.append(SamplingParams(temperature=0.7, top_k=25, top_p=0.9))  # another top_k: another group
    seeds = list(range(len(cases)))
    together = _run(cases, seeds)
    alone = [_run([c], [s])[0] for c, s in zip(cases, seeds)]
    assert together == alone
    # the same rows in another order and with copies of themselves: still each its own
    order = list(reversed(range(len(cases))))
    shuffled = _run([cases[i] for i in order] + cases[:3], [seeds[i] for i in order] + seeds[:3])
    assert shuffled[:len(cases)] == [alone[i] for i in order] and shuffled[len(cases):] == alone[:3]


def test_a_seed_repeats_and_another_differs():
    case = params(EXPECTED["cases"]["common"])
    assert _run([case], [5]) == _run([case], [5]) != _run([case], [6])


def test_a_row_whose_sampler_fails_gets_its_error_and_the_others_their_tokens():
    from webui.engine.samplers import PerRow

    good, bad = (Sampler(SamplingParams(temperature=0.7, top_k=5), [], 0, seed) for seed in (1, 2))
    good.processors.insert(0, ("structured_outputs", PerRow(lambda ids, x: x)))
    bad.processors.insert(0, ("structured_outputs", PerRow(lambda ids, x: 1 / 0)))  # a grammar that breaks
    assert good.key == bad.key  # one batch
    out = sample_rows([good, bad], [[1], [1]], torch.randn(2, 50), [None, None])
    assert isinstance(out[1], ZeroDivisionError) and 0 <= out[0].token_id < 50


def test_a_step_that_would_leave_no_token_is_skipped_for_that_row_only():
    # top_k keeps token 0; no_repeat_ngram (after it) would ban it too: that step is skipped for that row
    stuck = Sampler(SamplingParams(temperature=1.0, top_k=1, no_repeat_ngram_size=2), [], 0, 0)
    free = Sampler(SamplingParams(temperature=1.0, top_k=1, no_repeat_ngram_size=2), [], 0, 0)
    logits = torch.tensor([[5.0, 1.0, 0.0], [5.0, 1.0, 0.0]])
    out = sample_rows([stuck, free], [[0, 0], [1, 2]], logits, [None, None])
    assert [c.token_id for c in out] == [0, 0]
    greedy = Sampler(SamplingParams(temperature=0, custom_token_bans=(0, 1, 2)), [], 0, 0)
    assert greedy.sample([], torch.tensor([5.0, 1.0, 0.0])).token_id == 0  # banning every token bans none


@pytest.mark.parametrize("name", ["mirostat", "adaptive_p", "xtc"])
def test_stateful_samplers_on_candidates_match_them_on_the_whole_vocabulary(name):
    """After top_k the stage runs mirostat, adaptive-p and XTC on the k candidates, all rows at once; step by
    step that keeps what they keep on the full row (top_k applied by hand), and their state follows alike."""
    from webui.engine.shaping import TopK

    case = dict(EXPECTED["cases"][name], top_k=50)
    staged = Sampler(params(case), record.EOS, record.PROMPT, seed=4)
    by_hand = Sampler(params(case), record.EOS, record.PROMPT, seed=4)
    reference = [p for n, p in by_hand.processors if n == name][0]
    ids = record.history()
    for step in range(6):
        logits = record.logits_at(step)
        got = staged.process(ids, logits)
        want = reference.row(ids, TopK(50)([], logits.clone()))
        assert torch.equal(torch.isfinite(got), torch.isfinite(want)), (name, step)
        assert torch.allclose(got[torch.isfinite(got)], want[torch.isfinite(want)], atol=1e-5), (name, step)
        token = int(torch.argmax(got))
        for observer in staged.observers + by_hand.observers:
            observer.observe(token)
        ids = ids + [token]
    if name == "mirostat":
        assert staged.processors[-1][1].mu == pytest.approx(reference.mu, rel=1e-5)


def test_row_sums_are_the_same_for_a_row_alone_and_in_a_batch_on_several_threads():
    from webui.engine.rows import row_sums

    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        x = torch.randn(16, 49_153, generator=torch.Generator().manual_seed(0)) * 7
        assert torch.equal(row_sums(x)[5], row_sums(x[5:6])[0])
        assert torch.allclose(row_sums(x).squeeze(1), x.double().sum(-1).float(), rtol=1e-5, atol=1e-2)
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize("vocab", [49152, 32001, 300, 7])
def test_greedy_takes_the_first_maximum_as_argmax_does(vocab):
    """The blocked argmax of greedy rows (#47: a vectorised max first, ~6x faster on a CPU) gives argmax's
    token: the first of equal maxima, ties across and inside blocks, all -inf rows and NaN included."""
    from webui.engine.rows import first_max

    g = torch.Generator().manual_seed(vocab)
    x = torch.randn(6, vocab, generator=g)
    x[1] = 0.0  # every token ties: the first
    x[2, vocab // 3:] = x[2].max() + 1  # a tie from the middle on
    x[3] = float("-inf")
    x[4, vocab - 1] = 1e9  # the maximum in the padded last block
    x[5, vocab // 2] = float("nan")
    assert first_max(x).squeeze(1).tolist() == x.argmax(-1).tolist()


def test_greedy_rows_under_token_bans_take_the_best_token_not_banned(monkeypatch):
    """#47: greedy rows whose only steps are bans (min_new_tokens' end-of-sequence ban, custom bans) take the top
    token of the logits as they came, neither copied nor filled; where a row's top token is banned, the pass runs
    as before and the row gets the best token left. The same tokens as the full pass, ties and all."""
    import webui.engine.sampling as sampling

    vocab, eos = 300, record.EOS[0]
    cases = [SamplingParams(temperature=0, min_new_tokens=4), SamplingParams(temperature=0, custom_token_bans=[7]),
             SamplingParams(temperature=0, min_new_tokens=4, custom_token_bans=[9])]
    g = torch.Generator().manual_seed(5)
    logits = torch.randn(3, vocab, generator=g)
    logits[0, 40] = logits[0, 41] = 50.0  # a tie: the first
    ids = [list(range(10, 10 + record.PROMPT)) for _ in cases]

    def tokens(rows: torch.Tensor) -> list[int]:
        samplers = [Sampler(c, record.EOS, record.PROMPT, seed=1) for c in cases]
        return [choice.token_id for choice in sample_rows(samplers, ids, rows, [None] * len(cases))]

    taken = []
    real = sampling.greedy_past_bans
    monkeypatch.setattr(sampling, "greedy_past_bans", lambda *args: taken.append(real(*args)) or taken[-1])
    quick = tokens(logits)
    assert quick == [40, int(logits[1].argmax()), int(logits[2].argmax())]
    assert taken == [quick]  # one pass, its rows never copied
    banned_top = logits.clone()
    banned_top[0, eos], banned_top[1, 7], banned_top[2, 9] = 99.0, 99.0, 99.0  # each row's top token is banned
    assert tokens(banned_top) == quick  # the best token left, by the full pass
    monkeypatch.setattr(sampling, "greedy_past_bans", lambda *args: None)  # the full pass on every row
    full = tokens(logits)
    assert full == quick


# Rows that share a pass whatever else they turn on (#47 item 5): greedy and sampled, other samplers, other
# orders; only top_k (its k) sets rows apart, and a top_k row with a whole-vocabulary step after top_k that
# the others lack.
MIXED = {
    "greedy": dict(temperature=0),
    "greedy_penalties": dict(temperature=0, repetition_penalty=1.3, presence_penalty=0.5),
    "temperature": dict(temperature=0.7),
    "top_p_last": dict(temperature=0.6, top_p=0.9, min_p=0.02, temperature_last=True),
    "smoothing": dict(smoothing_factor=0.3, min_p=0.05),
    "dry": dict(temperature=0.9, dry_multiplier=1.5, dry_allowed_length=1),
    "xtc": dict(xtc_threshold=0.05, xtc_probability=1.0, top_p=0.95),
    "mirostat": dict(mirostat_mode=2, mirostat_tau=4.0, mirostat_eta=0.3),
    "priority": dict(temperature=1.5, min_p=0.1, top_p=0.8, sampler_priority=["min_p", "top_p", "temperature"]),
    "common": dict(temperature=0.7, top_p=0.9, top_k=40, min_p=0.02, repetition_penalty=1.1),
    "common_last": dict(temperature=0.7, top_p=0.9, top_k=40, typical_p=0.9, temperature_last=True),
    "top_k_dry_after": dict(temperature=0.8, top_k=40, dry_multiplier=1.0,
                            sampler_priority=["top_k", "dry", "temperature"]),
    "other_k": dict(temperature=0.7, top_k=25, top_p=0.9),
}


def test_rows_share_a_pass_by_top_k_whatever_else_they_turn_on():
    from webui.engine.sampling_rows import build_passes

    samplers = [Sampler(SamplingParams(**case), record.EOS, record.PROMPT, seed) for seed, case in
                enumerate(MIXED.values())]
    names = list(MIXED)
    passes = sorted(sorted(names[r] for r in members) for members, _ in build_passes(samplers))
    assert passes == [["common", "common_last"], ["dry", "greedy", "greedy_penalties", "mirostat", "priority",
                                                   "smoothing", "temperature", "top_p_last", "xtc"],
                      ["other_k"], ["top_k_dry_after"]]


def test_every_row_is_the_same_alone_as_in_one_pass_with_other_samplers_and_orders():
    cases = [SamplingParams(**case) for case in MIXED.values()]
    seeds = list(range(len(cases)))
    together = _run(cases, seeds)
    assert together == [_run([c], [s])[0] for c, s in zip(cases, seeds)]
    assert together[0] != together[2]  # not all greedy alike


def test_the_engine_keeps_the_passes_and_parameter_columns_while_the_same_rows_sample():
    """Per-row parameter tensors are built when the rows change, not each step: the second step of the same
    rows reads the same column tensors; a row leaving builds the passes again without it."""
    from webui.engine.sampling_rows import SamplingRows

    kept = SamplingRows()
    samplers = [Sampler(SamplingParams(**MIXED[name]), record.EOS, record.PROMPT, seed)
                for seed, name in enumerate(["common", "common_last", "temperature", "greedy"])]
    ids = [record.history() for _ in samplers]
    logits = torch.stack([record.logits_at(step) for step in range(len(samplers))])
    first = sample_rows(samplers, ids, logits, [None] * len(samplers), kept)
    passes = kept.passes(samplers)
    columns = {id(t) for _, p in passes for step in p.steps for t in step.columns.values()}
    assert len(columns) >= 4  # temperature, top_p, min_p, typical_p, the penalty
    second = sample_rows(samplers, ids, logits, [None] * len(samplers), kept)
    assert kept.passes(samplers) is passes
    assert {id(t) for _, p in passes for step in p.steps for t in step.columns.values()} == columns
    assert [c.token_id for c in first] != [] and len(second) == len(samplers)
    fewer = kept.passes(samplers[1:])
    assert fewer is not passes and sorted(r for members, _ in fewer for r in members) == [0, 1, 2]


def test_rows_with_other_samplers_and_orders_go_through_a_step_together(monkeypatch):
    """Greedy rows, rows with temperature alone, with min_p after it, with top_p before it (temperature_last):
    one pass, so temperature runs once a step on every row that has it."""
    from webui.engine.shaping import Temperature

    calls = []
    batch = Temperature.batch.__func__
    monkeypatch.setattr(Temperature, "batch",
                        classmethod(lambda cls, procs, rows, x: calls.append(len(procs)) or batch(cls, procs, rows, x)))
    cases = [dict(temperature=0), dict(temperature=0.7), dict(temperature=0.7, min_p=0.05),
             dict(temperature=0.9, top_p=0.9, temperature_last=True)]
    samplers = [Sampler(SamplingParams(**case), record.EOS, record.PROMPT, seed) for seed, case in enumerate(cases)]
    logits = torch.stack([record.logits_at(step) for step in range(len(cases))])
    sample_rows(samplers, [record.history() for _ in cases], logits, [None] * len(cases))
    assert calls == [3]


def test_top_p_looks_at_as_many_candidates_as_each_rows_own_nucleus_takes(monkeypatch):
    """A row whose nucleus is among the first 64 tokens is done there; only the row with a wide nucleus looks
    further (before, every row of the pass sorted as many candidates as the widest needed). Each row keeps what it
    keeps alone."""
    from webui.engine import shaping
    from webui.engine.rows import Rows

    g = torch.Generator().manual_seed(3)
    x = torch.stack([torch.randn(5000, generator=g) * 8, torch.randn(5000, generator=g) * 0.1])  # narrow, wide
    procs = [shaping.TopP(0.9), shaping.TopP(0.9)]
    alone = [shaping.TopP.batch(procs[r:r + 1], Rows([[]], [None]), x[r:r + 1].clone()) for r in range(2)]
    looked = []
    top = shaping.top_candidates
    monkeypatch.setattr(shaping, "top_candidates", lambda xs, k: looked.append((xs.shape[0], k)) or top(xs, k))
    together = shaping.TopP.batch(procs, Rows([[], []], [None, None]), x.clone())
    assert torch.equal(together, torch.cat(alone))
    assert looked[0] == (2, 64) and all(rows == 1 for rows, _ in looked[1:]) and looked[-1][1] > 64
