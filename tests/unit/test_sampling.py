"""Each processor's effect on hand-made logits, and the order they run in."""

from __future__ import annotations

import math

import pytest
import torch

from webui.engine.params import SAMPLER_ORDER, SamplingParams
from webui.engine.sampling import (CONSTRAINTS, AdaptiveP, CountPenalty, Dry, DynamicTemperature, Guidance,
                                   EncoderRepetitionPenalty, EpsilonCutoff, EtaCutoff, Mirostat, MinP, NoRepeatNGram,
                                   QuadraticSampling, RepetitionPenalty, Sampler, SamplingContext, TailFree,
                                   Temperature, TokenBans, TopA, TopK, TopP, TypicalP, Xtc, active_samplers,
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
    out = CountPenalty(presence=0.5, frequency=0.25, prompt_len=1)([2, 0, 0, 1], torch.zeros(3))
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


EVERY_SAMPLER = dict(
    temperature=0.7, top_k=5, top_p=0.9, typical_p=0.9, min_p=0.1, repetition_penalty=1.1, presence_penalty=0.1,
    frequency_penalty=0.1, no_repeat_ngram_size=3, min_new_tokens=1, logit_bias={1: 1.0}, custom_token_bans=[3],
    top_n_sigma=2.0, tfs=0.9, top_a=0.1, epsilon_cutoff=3, eta_cutoff=3, dry_multiplier=0.8, xtc_probability=0.5,
    dynamic_temperature=True, smoothing_factor=0.3, mirostat_mode=2, adaptive_target=0.5,
    encoder_repetition_penalty=1.1, guidance_scale=1.5, structured_outputs={"regex": "[0-9]+"})


def test_processors_run_in_the_default_order_with_the_constraints_first():
    names = [n for n, _ in build_processors(SamplingParams(**EVERY_SAMPLER), SamplingContext(3, (2,)))]
    # dynamic temperature replaces the fixed temperature, so "temperature" itself is not built
    assert names == [*CONSTRAINTS, *(n for n in SAMPLER_ORDER if n != "temperature")]


def test_sampler_priority_reorders_and_the_ones_left_out_run_first():
    params = SamplingParams(temperature=0.7, top_k=5, min_p=0.1, sampler_priority=["min_p", "temperature"])
    assert params.sampler_priority[-2:] == ("min_p", "temperature")
    assert active_samplers(params) == ["top_k", "min_p", "temperature"]
    assert active_samplers(params.replace(temperature_last=True, sampler_priority="temperature\ntop_k\nmin_p")) == [
        "top_k", "min_p", "temperature"]
    assert active_samplers(SamplingParams(temperature=0.7, min_p=0.1)) == ["temperature", "min_p"]


def test_sampler_priority_changes_what_is_drawn():
    # min_p 0.5 keeps only the top token of the raw logits, but all three once temperature 3 has flattened them
    logits = probs_logits(0.7, 0.2, 0.1)
    first = Sampler(SamplingParams(temperature=3.0, min_p=0.5), [], 0, 0)
    last = Sampler(SamplingParams(temperature=3.0, min_p=0.5, temperature_last=True), [], 0, 0)
    assert kept(first.process([], logits)) == [0, 1, 2] and kept(last.process([], logits)) == [0]


def test_a_step_that_would_remove_every_token_is_skipped():
    # top_k keeps token 0; no_repeat_ngram (after it in the default order) would ban it too
    sampler = Sampler(SamplingParams(temperature=1.0, top_k=1, no_repeat_ngram_size=2), [], 0, 0)
    out = sampler.process([0, 0], torch.tensor([5.0, 1.0, 0.0]))
    assert kept(out) == [0]


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


def test_token_bans_and_the_repetition_penalty_range():
    assert kept(TokenBans([1, 2])([], torch.zeros(4))) == [0, 3]
    out = RepetitionPenalty(2.0, last_n=2)([0, 1, 2], torch.full((4,), 2.0))
    assert out.tolist() == [2.0, 1.0, 1.0, 2.0]  # token 0 is outside the last two
    out = CountPenalty(0.0, 1.0, prompt_len=1, last_n=2)([3, 0, 1, 1], torch.zeros(4))
    assert out.tolist() == [0.0, -2.0, 0.0, 0.0]  # only the last two generated tokens count


def test_encoder_repetition_penalty_favours_the_prompt_tokens():
    out = EncoderRepetitionPenalty(2.0, prompt_len=2)([0, 1, 3], torch.tensor([1.0, -1.0, 1.0, 1.0]))
    assert out.tolist() == [2.0, -0.5, 1.0, 1.0]


def test_dry_penalises_the_token_that_would_extend_a_repeat():
    dry = Dry(multiplier=1.0, base=2.0, allowed_length=2, breakers={9})
    # "5 6 7 8 ... 5 6 7": 8 would extend a 3-token repeat: 1 * 2 ** (3 - 2)
    assert dry.penalties([5, 6, 7, 8, 1, 5, 6, 7]) == {8: 2.0}
    assert dry.penalties([5, 6, 7, 8, 1, 6, 7]) == {8: 1.0}  # a 2-token repeat: 2 ** 0
    assert dry.penalties([5, 6, 7, 8, 1, 7]) == {}  # 1 token is allowed
    assert dry.penalties([5, 9, 7, 8, 1, 5, 9, 7]) == {}  # the match stops at the breaker 9: 1 token
    assert dry.penalties([5, 6, 7, 9, 5, 6, 7]) == {}  # the token after is a breaker
    assert Dry(1.0, 2.0, 2, set(), last_n=4).penalties([5, 6, 7, 8, 1, 5, 6, 7]) == {}  # outside the range
    out = dry([5, 6, 7, 8, 1, 5, 6, 7], torch.zeros(10))
    assert out[8] == -2.0 and out.count_nonzero() == 1


def test_xtc_removes_the_top_choices_but_the_last_above_the_threshold():
    logits = probs_logits(0.4, 0.3, 0.2, 0.1)
    always = Xtc(0.15, 1.0, SamplingContext(0), protected=[])
    assert kept(always([], logits.clone())) == [2, 3]
    assert kept(Xtc(0.15, 1.0, SamplingContext(0), protected=[1])([], logits.clone())) == [0, 1, 2, 3]
    assert kept(Xtc(0.5, 1.0, SamplingContext(0), protected=[])([], logits.clone())) == [0, 1, 2, 3]


def test_xtc_draws_from_the_sequence_generator():
    logits = probs_logits(0.4, 0.3, 0.2, 0.1)

    def pattern(seed):
        xtc = Xtc(0.15, 0.5, SamplingContext(0, seed=seed), protected=[])
        return [len(kept(xtc([], logits.clone()))) for _ in range(40)]
    assert pattern(3) == pattern(3) and pattern(3) != pattern(4) and {2, 4} == set(pattern(3))


def test_dynamic_temperature_follows_the_entropy():
    dyn = DynamicTemperature(0.5, 2.0, 1.0)
    assert dyn.temperature(torch.zeros(8)) == pytest.approx(2.0)  # uniform: normalised entropy 1
    assert dyn.temperature(torch.tensor([50.0, 0.0, 0.0])) == pytest.approx(0.5, abs=1e-6)
    half = probs_logits(0.5, 0.5, 1e-9, 1e-9)  # entropy ln 2 of a max ln 4: halfway
    assert dyn.temperature(half) == pytest.approx(1.25, abs=1e-3)
    assert DynamicTemperature(0.5, 2.0, 2.0).temperature(half) == pytest.approx(0.875, abs=1e-3)


def test_quadratic_sampling_bends_the_logits_around_the_top():
    logits = torch.tensor([3.0, 2.0, 1.0, -INF])
    assert QuadraticSampling(0.5, 1.0)([], logits.clone()).tolist() == [3.0, 2.5, 1.0, -INF]
    # curve 2: k = 0.5, s = 0.5: d = -1 -> 3 - 0.5 - 0.5 = 2; d = -2 -> 3 - 2 - 4 = -3
    assert QuadraticSampling(1.0, 2.0)([], logits.clone()).tolist() == [3.0, 2.0, -3.0, -INF]


def test_mirostat_truncates_by_surprise_and_steers_mu():
    mirostat = Mirostat(tau=1.0, eta=0.5)  # mu = 2 bits: keeps p >= 0.25
    logits = probs_logits(0.5, 0.3, 0.15, 0.05)
    assert kept(mirostat([], logits.clone())) == [0, 1]
    mirostat.observe(1)  # p = 0.3 / 0.8 among those kept: surprise log2(8/3)
    assert mirostat.mu == pytest.approx(2.0 - 0.5 * (math.log2(0.8 / 0.3) - 1.0))
    assert kept(Mirostat(tau=0.01, eta=0.1)([], logits.clone())) == [0]  # the top token always stays


def test_adaptive_p_favours_tokens_near_the_target_and_follows_what_was_picked():
    adaptive = AdaptiveP(target=0.3, decay=0.5)
    probs = adaptive([], probs_logits(0.6, 0.3, 0.1)).softmax(-1)
    assert int(probs.argmax()) == 1  # the token nearest 0.3
    adaptive.observe(0)  # picked 0.6: the average rises, so the next target drops below 0.3
    assert adaptive.weighted_sum / adaptive.total_weight > 0.3


def test_stateful_samplers_learn_from_the_token_the_sampler_drew():
    sampler = Sampler(SamplingParams(mirostat_mode=2, mirostat_tau=1.0, mirostat_eta=0.5), [], 0, seed=1)
    mirostat = sampler.processors[0][1]
    before = mirostat.mu
    sampler.sample([], probs_logits(0.5, 0.3, 0.15, 0.05))
    assert mirostat.mu != before


def test_cfg_mixes_the_log_probabilities_with_the_negative_prompts():
    ctx = SamplingContext(0)
    cond, uncond = probs_logits(0.6, 0.3, 0.1), probs_logits(0.7, 0.1, 0.2)
    guidance = Guidance(2.5, ctx)
    assert torch.equal(guidance([], cond.clone()), cond)  # no negative prompt logits yet: unchanged
    ctx.guidance = uncond
    expected = uncond.log_softmax(-1) + 2.5 * (cond.log_softmax(-1) - uncond.log_softmax(-1))
    out = guidance([], cond.clone())
    assert torch.allclose(out, expected) and int(out.argmax()) == 1  # away from what the negative prompt favours
