"""The prompt inspector and the next-token explorer, checked against direct computations."""

from __future__ import annotations

import math

import pytest
import torch

from webui.engine import Engine, GenerationRequest, SamplingParams
from webui.insight import InsightUnavailable, inspect_prompt, next_tokens


def test_the_prompt_as_the_model_sees_it(tiny_model):
    seen = inspect_prompt(tiny_model, "Hello there", chat=True, system_prompt="Be brief.")
    assert seen.text.startswith("<|im_start|>system\nBe brief.") and seen.text.endswith("<|im_start|>assistant\n")
    assert seen.ids == tiny_model.tokenizer.encode(seen.text, add_special_tokens=False)
    assert "".join(seen.tokens) == seen.text and seen.context_length == 256
    assert seen.used == pytest.approx(len(seen.ids) / 256)
    raw = inspect_prompt(tiny_model, "Hello there", chat=False)
    assert raw.text == "Hello there"


def test_raw_top_tokens_are_the_true_top_and_processors_are_applied(tiny_engine, tiny_model):
    ids = tiny_model.tokenizer.encode("Once upon a time")
    with torch.inference_mode():
        reference = tiny_model.model(input_ids=torch.tensor([ids])).logits[0, -1].softmax(-1)
    got = next_tokens(tiny_engine, "Once upon a time", chat=False, params=SamplingParams(top_k=5), top=20)
    values, top_ids = torch.topk(reference, 20)
    assert [t.token_id for t in got] == top_ids.tolist()
    assert [t.probability for t in got] == pytest.approx(values.tolist(), abs=1e-5)
    assert [t.kept for t in got] == [True] * 5 + [False] * 15  # top_k=5 keeps exactly the five best
    kept_mass = sum(t.probability for t in got[:5])
    assert [t.after for t in got[:5]] == pytest.approx([t.probability / kept_mass for t in got[:5]], rel=1e-4)
    greedy = next_tokens(tiny_engine, "Once upon a time", chat=False, params=SamplingParams(temperature=0))
    assert [t.kept for t in greedy] == [True] + [False] * 19 and greedy[0].after == 1.0


def test_explorer_does_not_disturb_a_running_request(tiny_model):
    engine = Engine(tiny_model)
    try:
        params = SamplingParams(temperature=0, max_new_tokens=40, ban_eos=True)
        alone = engine.generate(GenerationRequest("Hello", params)).token_ids
        stream = engine.submit(GenerationRequest("Hello", params))
        events = iter(stream)
        next(events)
        for _ in range(3):
            next_tokens(engine, "The weather today", chat=False, params=SamplingParams())
        rest = [t for e in events for t in e.token_ids]
        assert alone[-len(rest):] == rest
    finally:
        engine.close()


def test_no_model():
    engine = Engine()
    try:
        with pytest.raises(InsightUnavailable, match="no model is loaded"):
            next_tokens(engine, "x", chat=False, params=SamplingParams())
    finally:
        engine.close()


def reference_nll(model, ids: list[int]) -> float:
    with torch.inference_mode():
        logits = model.model(input_ids=torch.tensor([ids[:-1]])).logits[0]
    return float(torch.nn.functional.cross_entropy(logits, torch.tensor(ids[1:]), reduction="sum"))


def test_perplexity_matches_a_direct_computation_in_one_window_and_in_several(tiny_engine, tiny_model):
    from webui.insight import perplexity

    text = "The quick brown fox jumps over the lazy dog. " * 6
    ids = tiny_model.tokenizer.encode(text)
    whole = perplexity(tiny_engine, text, window=512)
    assert whole.tokens == len(ids) - 1
    assert whole.nll == pytest.approx(reference_nll(tiny_model, ids) / (len(ids) - 1), rel=1e-4)
    windowed = perplexity(tiny_engine, text, window=16)
    expected = sum(reference_nll(tiny_model, ids[s:s + 17]) for s in range(0, len(ids) - 1, 16))
    assert windowed.tokens == len(ids) - 1
    assert windowed.nll == pytest.approx(expected / (len(ids) - 1), rel=1e-4)
    assert windowed.ppl == pytest.approx(math.exp(windowed.nll))
    with pytest.raises(InsightUnavailable, match="too short"):
        perplexity(tiny_engine, "", window=16)


@pytest.mark.parametrize("params", [
    SamplingParams(temperature=0.8, top_k=8, top_p=0.9, repetition_penalty=1.3, seed=3),
    SamplingParams(mirostat_mode=2, mirostat_tau=3.0, seed=5),
    SamplingParams(temperature=0),
], ids=["history-dependent", "mirostat-state", "greedy"])
def test_a_replies_probabilities_after_the_samplers_are_what_generation_drew_from(tiny_engine, tiny_model, params):
    """#33: the Requests tab's token view replays the processors over a kept reply; what it shows is what the engine
    reported while generating (repetition penalty reads the history, mirostat carries state from token to token)."""
    from webui.insight import reply_logprobs

    params = params.replace(max_new_tokens=12, ban_eos=True)
    made = tiny_engine.generate(GenerationRequest("Once upon a time", params, logprobs=5))
    prompt_ids = tiny_model.tokenizer.encode("Once upon a time")
    again = reply_logprobs(tiny_engine, prompt_ids, list(made.token_ids), params, 5)
    assert [t.token_id for t in again] == list(made.token_ids)
    assert [t.logprob for t in again] == pytest.approx([t.logprob for t in made.logprobs], abs=1e-4)
    assert [t.logprob_after for t in again] == pytest.approx([t.logprob_after for t in made.logprobs], abs=1e-4)
    assert [t.top_after for t in again] == [pytest.approx(t.top_after, abs=1e-4) for t in made.logprobs]
