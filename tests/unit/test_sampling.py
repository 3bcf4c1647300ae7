"""Each processor's effect on hand-made logits, and the order they run in."""

from __future__ import annotations

import math

import pytest
import torch

from webui.engine.params import SamplingParams
from webui.engine.sampling import (PROCESSOR_ORDER, MinP, NoRepeatNGram, PresenceFrequencyPenalty,
                                   RepetitionPenalty, Sampler, SamplingContext, TailFree, Temperature, TopA, TopK, TopP,
                                   TypicalP, EpsilonCutoff, EtaCutoff,
                                   build_processors)

INF = float("inf")


def kept(logits: torch.Tensor) -> list[int]:
    return [i for i, v in enumerate(logits.tolist()) if v != -INF]


def probs_logits(*probs: float) -> torch.Tensor:
    return torch.tensor([math.log(p) for p in probs])


def test_temperature_scales_logits():
    out = Temperature(0.5)([], torch.tensor([1.0, 2.0, -1.0]))
    assert out.tolist() == [2.0, 4.0, -2.0]


def test_top_k_keeps_k_best():
    assert kept(TopK(2)([], torch.tensor([0.1, 3.0, 2.0, -1.0]))) == [1, 2]


def test_top_k_larger_than_vocab_keeps_all():
    assert kept(TopK(10)([], torch.tensor([0.1, 3.0]))) == [0, 1]


def test_top_p_keeps_smallest_nucleus():
    logits = probs_logits(0.5, 0.3, 0.15, 0.05)
    assert kept(TopP(0.7)([], logits.clone())) == [0, 1]
    assert kept(TopP(0.5)([], logits.clone())) == [0]
    assert kept(TopP(0.81)([], logits.clone())) == [0, 1, 2]


def test_top_p_always_keeps_top_token():
    assert kept(TopP(0.01)([], probs_logits(0.9, 0.1))) == [0]


def test_min_p_relative_to_top_probability():
    logits = probs_logits(0.5, 0.3, 0.15, 0.05)
    # threshold 0.4 * 0.5 = 0.2: keeps 0.5 and 0.3
    assert kept(MinP(0.4)([], logits)) == [0, 1]


def test_typical_p_prefers_tokens_near_the_entropy():
    logits = probs_logits(0.4, 0.3, 0.2, 0.1)
    entropy = -sum(p * math.log(p) for p in (0.4, 0.3, 0.2, 0.1))
    gaps = sorted(range(4), key=lambda i: abs(-math.log((0.4, 0.3, 0.2, 0.1)[i]) - entropy))
    out = kept(TypicalP(0.5)([], logits))
    assert sorted(out) == sorted(gaps[: len(out)])
    assert 1 <= len(out) < 4


def test_repetition_penalty_divides_positive_and_multiplies_negative():
    out = RepetitionPenalty(2.0)([0, 1, 1], torch.tensor([4.0, -1.0, 3.0]))
    assert out.tolist() == [2.0, -2.0, 3.0]


def test_presence_and_frequency_penalties_count_only_the_output():
    # prompt is [2]; output [0, 0, 1]
    out = PresenceFrequencyPenalty(presence=0.5, frequency=0.25, prompt_len=1)([2, 0, 0, 1], torch.zeros(3))
    assert out.tolist() == pytest.approx([-1.0, -0.75, 0.0])


def test_no_repeat_ngram_bans_completing_token():
    # bigrams seen: (5,6), (6,5); last token 5 -> 6 would repeat (5,6)
    out = NoRepeatNGram(2)([5, 6, 5], torch.zeros(8))
    assert out[6] == -INF and kept(out) == [0, 1, 2, 3, 4, 5, 7]


def test_logit_bias_adds_to_chosen_tokens():
    sampler = Sampler(SamplingParams(temperature=0, logit_bias={"0": 5.0, "1": -100}), [], 0, 0)
    assert sampler.process([], torch.tensor([1.0, 9.0, 2.0])).tolist() == [6.0, -91.0, 2.0]
    assert sampler.sample([], torch.tensor([1.0, 9.0, 2.0])).token_id == 0


def test_eos_ban_until_min_new_tokens():
    sampler = Sampler(SamplingParams(min_new_tokens=2, temperature=0), eos_ids=[1], prompt_len=1, seed=0)
    logits = torch.tensor([0.0, 10.0, 1.0])
    assert sampler.sample([7], logits).token_id == 2  # 0 generated: EOS banned
    assert sampler.sample([7, 2], logits).token_id == 2  # 1 generated: still banned
    assert sampler.sample([7, 2, 2], logits).token_id == 1


def test_ban_eos_always():
    sampler = Sampler(SamplingParams(ban_eos=True, temperature=0), eos_ids=[1], prompt_len=0, seed=0)
    assert sampler.sample([0] * 50, torch.tensor([0.0, 10.0])).token_id == 0


def test_neutral_params_build_no_processors():
    assert build_processors(SamplingParams(), SamplingContext(3, (2,))) == []


def test_greedy_skips_truncation_but_keeps_penalties():
    names = [n for n, _ in build_processors(
        SamplingParams(temperature=0, top_k=5, top_p=0.5, repetition_penalty=1.2), SamplingContext(3, (2,)))]
    assert names == ["repetition_penalty"]


def test_processors_run_in_the_declared_order():
    params = SamplingParams(temperature=0.7, top_k=5, top_p=0.9, typical_p=0.9, min_p=0.1, repetition_penalty=1.1,
                            presence_penalty=0.1, no_repeat_ngram_size=3, min_new_tokens=1, logit_bias={1: 1.0},
                            top_n_sigma=2.0, tfs=0.9, top_a=0.1, epsilon_cutoff=3, eta_cutoff=3)
    names = [n for n, _ in build_processors(params, SamplingContext(3, (2,)))]
    assert names == list(PROCESSOR_ORDER)


def test_order_matters_temperature_before_min_p():
    # temperature 3 flattens the distribution, so min_p keeps more tokens than it would on raw logits
    logits = probs_logits(0.7, 0.2, 0.1)
    sampler = Sampler(SamplingParams(temperature=3.0, min_p=0.5), eos_ids=[], prompt_len=0, seed=0)
    assert kept(sampler.process([], logits)) == [0, 1, 2]
    assert kept(MinP(0.5)([], logits.clone())) == [0]


def test_greedy_is_argmax():
    sampler = Sampler(SamplingParams(temperature=0), eos_ids=[], prompt_len=0, seed=0)
    assert sampler.sample([], torch.tensor([0.1, 5.0, 4.9])).token_id == 1


def test_sampling_follows_the_distribution_and_the_seed():
    logits = probs_logits(0.6, 0.3, 0.1)

    def draws(seed: int) -> list[int]:
        s = Sampler(SamplingParams(temperature=1.0), eos_ids=[], prompt_len=0, seed=seed)
        return [s.sample([], logits).token_id for _ in range(2000)]

    a = draws(1)
    assert a == draws(1)
    assert a != draws(2)
    freq = [a.count(i) / len(a) for i in range(3)]
    assert freq == pytest.approx([0.6, 0.3, 0.1], abs=0.04)


def test_truncated_tokens_are_never_sampled():
    s = Sampler(SamplingParams(top_k=2), eos_ids=[], prompt_len=0, seed=3)
    logits = torch.tensor([1.0, 1.0, 0.9, 0.9])
    assert {s.sample([], logits).token_id for _ in range(300)} == {0, 1}


def test_logprobs_come_from_the_raw_distribution():
    s = Sampler(SamplingParams(temperature=0), eos_ids=[], prompt_len=0, seed=0)
    logits = probs_logits(0.5, 0.3, 0.2)
    choice = s.sample([], logits, top_logprobs=2)
    assert choice.token_id == 0
    assert choice.logprob == pytest.approx(math.log(0.5), abs=1e-5)
    assert [i for i, _ in choice.top] == [0, 1]
    assert choice.top[1][1] == pytest.approx(math.log(0.3), abs=1e-5)


def test_process_does_not_modify_the_input():
    logits = torch.tensor([1.0, 2.0, 3.0])
    Sampler(SamplingParams(top_k=1, temperature=0.5), [], 0, 0).process([], logits)
    assert logits.tolist() == [1.0, 2.0, 3.0]


def test_probabilities_after_the_processors_match_a_reference_on_hand_made_logits():
    """Raw 0.5/0.3/0.15/0.05; temperature 0.5 squares and renormalises, top_p 0.8 then keeps the first two."""
    logits = probs_logits(0.5, 0.3, 0.15, 0.05)
    s = Sampler(SamplingParams(temperature=0.5, top_p=0.8), eos_ids=[], prompt_len=0, seed=1)
    choice = s.sample([], logits, top_logprobs=4)
    squared = [p * p for p in (0.5, 0.3, 0.15, 0.05)]
    tempered = [q / sum(squared) for q in squared]  # 0.7022, 0.2528, 0.0632, 0.0070
    kept_mass = tempered[0] + tempered[1]  # the nucleus: 0.7022 < 0.8, then 0.955 >= 0.8
    expected = [tempered[0] / kept_mass, tempered[1] / kept_mass, 0.0, 0.0]
    assert [i for i, _ in choice.top] == [0, 1, 2, 3]
    assert [math.exp(v) for v in choice.top_after] == pytest.approx(expected, abs=1e-5)
    assert [math.exp(v) for _, v in choice.top] == pytest.approx([0.5, 0.3, 0.15, 0.05], abs=1e-5)
    assert math.exp(choice.logprob_after) == pytest.approx(expected[choice.token_id], abs=1e-5)
    assert sum(math.exp(v) for v in choice.top_after) == pytest.approx(1.0, abs=1e-5)


def test_greedy_puts_all_the_mass_after_the_processors_on_the_argmax():
    logits = probs_logits(0.2, 0.5, 0.3)
    choice = Sampler(SamplingParams(temperature=0), [], 0, 0).sample([], logits, top_logprobs=3)
    assert choice.token_id == 1 and choice.logprob_after == 0.0
    assert [math.exp(v) for v in choice.top_after] == [1.0, 0.0, 0.0]


def test_the_context_gives_each_sequence_its_own_seeded_generator_and_the_tokenizer():
    """What samplers that draw (XTC) or read text (DRY's breakers) are built with."""
    a, b = SamplingContext(0, seed=7, tokenizer="tok"), SamplingContext(0, seed=7)
    draws = [torch.rand(3, generator=c.rng(torch.device("cpu"))) for c in (a, b)]
    assert torch.equal(*draws) and a.rng(torch.device("cpu")) is a.rng(torch.device("cpu"))
    assert Sampler(SamplingParams(), [2], 5, 7, tokenizer="tok").context == SamplingContext(5, (2,), 7, "tok")


def test_tail_free_cuts_where_the_sorted_probabilities_stop_curving():
    # probabilities 0.5, 0.25, 0.125, 0.0625, 0.0625: second differences 0.125, 0.0625, 0.0625 -> 0.5, 0.75, 1.0
    logits = torch.tensor([0.5, 0.25, 0.125, 0.0625, 0.0625]).log()
    kept = lambda z: torch.isfinite(TailFree(z)([], logits.clone())).tolist()  # noqa: E731
    assert kept(0.5) == [True, True, False, False, False]
    assert kept(0.8) == [True, True, True, False, False]
    assert kept(0.99) == [True, True, True, False, False]  # below z = 1 the last curvature step is tail


def test_top_a_relative_to_the_squared_top_probability():
    logits = torch.tensor([0.6, 0.3, 0.08, 0.02]).log()
    out = TopA(0.2)([], logits.clone())  # 0.2 * 0.36 = 0.072: drops 0.02
    assert torch.isfinite(out).tolist() == [True, True, True, False]


def test_epsilon_and_eta_cutoffs_in_ten_thousandths():
    logits = torch.tensor([0.9, 0.0995, 0.0004, 0.0001]).log()
    assert torch.isfinite(EpsilonCutoff(3)([], logits.clone())).tolist() == [True, True, True, False]
    entropy = -(logits.exp() * logits).sum()
    eta = 5e-4
    cutoff = min(eta, eta ** 0.5 * float(torch.exp(-entropy)))
    expected = (logits.exp() >= cutoff).tolist()
    assert torch.isfinite(EtaCutoff(5)([], logits.clone())).tolist() == expected and expected[0] and not expected[3]
    only = torch.tensor([0.0])  # the top token always stays, whatever the cutoff
    assert torch.isfinite(EpsilonCutoff(9)([], only.clone())).all() and torch.isfinite(EtaCutoff(20)([], only)).all()
