"""Continuous batching on the real default model: same tokens alone and in a batch."""

from __future__ import annotations

import threading

import pytest

import loaders.kv_batch as kv_batch
from webui.engine import Engine, EngineConfig, GenerationRequest, SamplingParams

pytestmark = pytest.mark.real_model

QUESTIONS = [
    "Hi!",
    "What is the capital of France?",
    "Name three colors.",
    "Write a haiku about the sea and the wind in the early morning.",
    "What is two plus two? Answer with a number.",
    "Explain in one sentence why the sky is blue, as if I were five years old and curious.",
    "List the planets of the solar system.",
    "Translate 'good morning' into Spanish.",
]


def prompts(model) -> list[list[int]]:
    return [model.tokenizer.encode(model.tokenizer.apply_chat_template([{"role": "user", "content": q}]),
                                   add_special_tokens=False) for q in QUESTIONS]


@pytest.fixture
def widest_batch(monkeypatch):
    """Records the most rows any batched decode step had."""
    seen = [0]
    original = kv_batch._run

    def run(model, pool, handles, chunks, *args):
        if all(len(c) == 1 for c in chunks):  # a decode step
            seen[0] = max(seen[0], len(handles))
        return original(model, pool, handles, chunks, *args)

    monkeypatch.setattr(kv_batch, "_run", run)
    return seen


def run_together(engine: Engine, requests: list[GenerationRequest]):
    streams = [engine.submit(r) for r in requests]
    return [s.result() for s in streams]


def test_greedy_tokens_are_the_same_alone_and_in_a_batch(real_engine, real_model, widest_batch):
    params = SamplingParams(temperature=0, max_new_tokens=12, ban_eos=True)
    ids = prompts(real_model)
    assert len({len(p) for p in ids}) == len(ids)  # all lengths differ
    alone = [real_engine.generate(GenerationRequest(p, params)).token_ids for p in ids]
    widest_batch[0] = 0
    together = [r.token_ids for r in run_together(real_engine, [GenerationRequest(p, params) for p in ids])]
    assert widest_batch[0] == len(ids)
    assert together == alone


def test_seeded_sampling_is_the_same_alone_and_in_a_batch(real_engine, real_model):
    ids = prompts(real_model)[:4]
    params = [SamplingParams(temperature=0.9, top_p=0.95, top_k=50, max_new_tokens=10, seed=100 + i, ban_eos=True)
              for i in range(4)]
    alone = [real_engine.generate(GenerationRequest(p, sp)).token_ids for p, sp in zip(ids, params)]
    together = [r.token_ids for r in run_together(real_engine, [GenerationRequest(p, sp) for p, sp in zip(ids, params)])]
    assert together == alone


def test_a_request_joins_a_running_batch_and_cancelling_one_spares_the_rest(real_engine, real_model, widest_batch):
    params = SamplingParams(temperature=0, max_new_tokens=14, ban_eos=True)
    ids = prompts(real_model)[:4]
    alone = [real_engine.generate(GenerationRequest(p, params)).token_ids for p in ids]
    widest_batch[0] = 0
    first = [real_engine.submit(GenerationRequest(p, params)) for p in ids[:2]]
    doomed = real_engine.submit(GenerationRequest(ids[2], SamplingParams(temperature=0, max_new_tokens=200,
                                                                         ban_eos=True)))
    events = iter(first[0])
    for _ in range(4):
        next(events)  # the batch is running
    late = real_engine.submit(GenerationRequest(ids[3], params))
    doomed_events = iter(doomed)
    next(doomed_events)
    doomed.cancel()
    assert list(doomed_events)[-1].finish_reason == "cancelled"
    rest = [e for e in events]
    got0 = [t for e in rest for t in e.token_ids]
    results = [first[1].result(), late.result()]
    assert widest_batch[0] >= 3
    assert alone[0][-len(got0):] == got0
    assert [r.token_ids for r in results] == [alone[1], alone[3]]


def test_a_long_prompt_is_prefilled_in_chunks_without_stalling_a_running_sequence(real_model):
    long_text = " ".join(["The quick brown fox jumps over the lazy dog."] * 45)
    long_ids = real_model.tokenizer.encode(long_text)
    assert len(long_ids) > 400
    long_params = SamplingParams(temperature=0, max_new_tokens=4, ban_eos=True)
    whole = Engine(real_model, EngineConfig(max_batch_tokens=4096, prefill_chunk=4096))
    try:
        reference_long = whole.generate(GenerationRequest(long_ids, long_params)).token_ids
    finally:
        whole.close()
    engine = Engine(real_model, EngineConfig(max_batch_tokens=64, prefill_chunk=48))
    try:
        short_params = SamplingParams(temperature=0, max_new_tokens=30, ban_eos=True)
        short_ids = prompts(real_model)[1]

        order: list[str] = []
        lock = threading.Lock()

        def consume(stream, name):
            for event in stream:
                if event.token_ids:
                    with lock:
                        order.append(name)

        short = engine.submit(GenerationRequest(short_ids, short_params))
        events = iter(short)
        next(events)
        long = engine.submit(GenerationRequest(long_ids, long_params))
        threads = [threading.Thread(target=consume, args=(events, "short")),
                   threading.Thread(target=consume, args=(long, "long"))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        first_long = order.index("long")
        assert order[:first_long].count("short") >= len(long_ids) // 48 - 1  # the short one kept decoding
        long_again = engine.generate(GenerationRequest(long_ids, long_params)).token_ids
        assert long_again == reference_long
    finally:
        engine.close()
