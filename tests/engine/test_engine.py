"""The engine: streaming, stop strings, seeds, cancellation, concurrency and errors."""

from __future__ import annotations

import threading
import time

import pytest

from webui.engine import (BACKGROUND, Engine, EngineConfig, GenerationError, GenerationRequest, NoModelLoaded, PromptTooLong,
                          QueueFull, SamplingParams)
from tests.conftest import run_async
from tests.engine.scripted import ScriptedModel


def greedy(n: int, **kw) -> SamplingParams:
    return SamplingParams(temperature=0, max_new_tokens=n, **kw)


@pytest.fixture
def tok(tiny_model):
    return tiny_model.tokenizer


def scripted_engine(tok, text: str, **kw) -> tuple[Engine, ScriptedModel]:
    model = ScriptedModel(tok, tok.encode(text, add_special_tokens=False), **kw)
    return Engine(model), model


# -- streaming text ------------------------------------------------------------------

def test_stream_joins_to_the_scripted_text_and_finishes_on_eos(tok):
    engine, _ = scripted_engine(tok, "Hello there, world!")
    try:
        events = list(engine.submit(GenerationRequest("hi", greedy(50))))
    finally:
        engine.close()
    assert "".join(e.text for e in events) == "Hello there, world!"
    last = events[-1]
    assert last.finish_reason == "stop" and last.stop_string is None
    assert all(e.finish_reason is None for e in events[:-1])
    assert last.usage.prompt_tokens == len(tok.encode("hi")) and last.usage.completion_tokens == len(events)
    assert last.timings.first_token is not None and last.timings.tokens_per_second > 0


def test_stop_string_is_never_streamed(tok):
    engine, _ = scripted_engine(tok, "Answer: 42 ###\nQuestion: more")
    try:
        events = list(engine.submit(GenerationRequest("q", greedy(50, stop=["###"]))))
    finally:
        engine.close()
    texts = [e.text for e in events]
    assert "".join(texts) == "Answer: 42 "
    assert not any("#" in t for t in texts)
    assert events[-1].finish_reason == "stop" and events[-1].stop_string == "###"


def test_stop_string_split_across_tokens_and_several_stops(tok):
    text = "one two<|stop|> three"
    ids = tok.encode(text, add_special_tokens=False)
    assert len(tok.encode("<|stop|>", add_special_tokens=False)) > 1  # really split over tokens
    engine = Engine(ScriptedModel(tok, ids))
    try:
        result = engine.generate(GenerationRequest("q", greedy(50, stop=["three", "<|stop|>", "zzz"])))
    finally:
        engine.close()
    assert result.text == "one two" and result.stop_string == "<|stop|>" and result.finish_reason == "stop"


class _WatchedTokenizer:
    """A tokenizer that notes which threads decode with it."""

    def __init__(self, tok):
        self._tok, self.threads = tok, set[str]()

    def __getattr__(self, name):
        return getattr(self._tok, name)

    def decode(self, *args, **kwargs):
        self.threads.add(threading.current_thread().name)
        return self._tok.decode(*args, **kwargs)

    def token_strings(self, *args, **kwargs):
        self.threads.add(threading.current_thread().name)
        return self._tok.token_strings(*args, **kwargs)


def test_the_engine_thread_does_no_detokenizing(tok):
    """#47: the scheduler thread only runs the model and samples; text, stop strings and logprob strings are made
    on the output thread, beside the next forward."""
    watched = _WatchedTokenizer(tok)
    engine, _ = scripted_engine(watched, "Answer: 42 ###\nQuestion: more")
    try:
        result = engine.generate(GenerationRequest("q", greedy(50, stop=["###"]), logprobs=2))
    finally:
        engine.close()
    assert result.text == "Answer: 42 " and result.stop_string == "###" and result.logprobs
    assert watched.threads and "engine-scheduler" not in watched.threads, watched.threads


def test_a_stop_string_ends_generation_at_once(tok):
    """A stop string found off the engine thread ends the stream at once (nothing after it is emitted, usage
    counts up to it) and the engine drops the sequence within a step or two instead of running to max_new."""
    head = tok.encode("Answer: 42 ###", add_special_tokens=False)
    engine, model = scripted_engine(tok, "Answer: 42 ###" + " and then some more words" * 20, step_delay=0.005)
    try:
        events = list(engine.submit(GenerationRequest("q", greedy(200, stop=["###"]))))
        deadline = time.monotonic() + 30
        while engine.stats().running and time.monotonic() < deadline:
            time.sleep(0.01)
        assert engine.stats().running == 0
    finally:
        engine.close()
    assert "".join(e.text for e in events) == "Answer: 42 " and events[-1].finish_reason == "stop"
    assert [t for e in events for t in e.token_ids] == head
    assert events[-1].usage.completion_tokens == len(head)
    assert model.forward_calls <= len(head) + 2, model.forward_calls  # one forward a token, at most 2 more


def test_multibyte_characters_are_never_split(tok):
    text = "Café 🙂 日本語 👨‍👩‍👧"
    ids = tok.encode(text, add_special_tokens=False)
    assert len(ids) > len(text.split())  # multi-byte characters span several tokens
    engine = Engine(ScriptedModel(tok, ids))
    try:
        events = list(engine.submit(GenerationRequest("q", greedy(100))))
    finally:
        engine.close()
    assert not any("\ufffd" in e.text for e in events)
    assert "".join(e.text for e in events) == text


def test_length_finish_and_held_back_text_flushed(tok):
    engine, _ = scripted_engine(tok, "abc abc abc abc abc abc abc abc")
    try:
        result = engine.generate(GenerationRequest("q", greedy(3, stop=["abc abc abc abc abc X"])))
    finally:
        engine.close()
    assert result.finish_reason == "length" and result.usage.completion_tokens == 3
    assert result.text == tok.decode(result.token_ids)


def test_skip_special_tokens_off_shows_them(tok):
    special = tok.encode("<|im_start|>", add_special_tokens=False)
    assert len(special) == 1
    script = tok.encode("Hi", add_special_tokens=False) + special + tok.encode(" there", add_special_tokens=False)
    for skip, text in ((True, "Hi there"), (False, "Hi<|im_start|> there")):
        engine = Engine(ScriptedModel(tok, script))
        try:
            assert engine.generate(GenerationRequest("q", greedy(20, skip_special_tokens=skip))).text == text
        finally:
            engine.close()


def test_truncation_length_keeps_the_newest_prompt_tokens_and_auto_max_new_tokens_fills_the_rest(tok):
    prompt = tok.encode(" one two three four five six seven eight nine ten", add_special_tokens=False)
    engine = Engine(ScriptedModel(tok, [100] * 400, context_length=64))
    try:
        cut = engine.generate(GenerationRequest(prompt, greedy(4, truncation_length=10, ban_eos=True)))
        assert cut.usage.prompt_tokens == 6 and cut.usage.completion_tokens == 4  # 10 - 4 newest prompt tokens
        with pytest.raises(PromptTooLong):  # truncation_length 0: a prompt too long is refused, not cut
            engine.generate(GenerationRequest(prompt * 7, greedy(4)))
        auto = engine.generate(GenerationRequest(prompt, greedy(4, auto_max_new_tokens=True, ban_eos=True)))
        assert auto.usage.completion_tokens == 64 - len(prompt) and auto.finish_reason == "length"
        both = engine.generate(GenerationRequest(prompt, greedy(4, auto_max_new_tokens=True, truncation_length=20,
                                                               ban_eos=True)))
        assert (both.usage.prompt_tokens, both.usage.completion_tokens) == (len(prompt), 20 - len(prompt))
    finally:
        engine.close()


def test_add_bos_token_off_asks_the_tokenizer_for_no_special_tokens(tok):
    from webui.engine.sequence import tokenize_prompt

    seen = []

    class Tok:
        def encode(self, text, add_special_tokens=True):
            seen.append(add_special_tokens)
            return [1, 5] if add_special_tokens else [5]

    model = ScriptedModel(Tok(), [])
    assert tokenize_prompt(model, GenerationRequest("x", greedy(1))) == [1, 5]
    assert tokenize_prompt(model, GenerationRequest("x", greedy(1, add_bos_token=False))) == [5]
    assert tokenize_prompt(model, GenerationRequest("x", greedy(1), add_special_tokens=False)) == [5]
    assert seen == [True, False, False]


# -- real (tiny) model: seeds, concurrency, cancellation ---------------------------------

def test_same_seed_same_tokens_other_seed_differs(tiny_engine):
    def run(seed: int | None):
        return tiny_engine.generate(GenerationRequest("Once upon a time", SamplingParams(
            temperature=1.0, max_new_tokens=24, seed=seed, ban_eos=True)))

    a, b, c = run(7), run(7), run(8)
    assert a.token_ids == b.token_ids and a.seed == 7
    assert a.token_ids != c.token_ids


def test_random_seed_is_reported_and_reproduces(tiny_engine):
    params = SamplingParams(temperature=1.0, max_new_tokens=16, ban_eos=True)
    first = tiny_engine.generate(GenerationRequest("Hello", params))
    again = tiny_engine.generate(GenerationRequest("Hello", params.replace(seed=first.seed)))
    assert again.token_ids == first.token_ids


def test_two_concurrent_requests_with_different_parameters(tiny_engine):
    solo = tiny_engine.generate(GenerationRequest("The sky is", greedy(20, ban_eos=True)))
    a = tiny_engine.submit(GenerationRequest("The sky is", greedy(20, ban_eos=True)))
    b = tiny_engine.submit(GenerationRequest("Tell me a story", SamplingParams(
        temperature=1.2, top_k=50, max_new_tokens=7, seed=3, ban_eos=True)))
    results = {}
    threads = [threading.Thread(target=lambda k, s: results.__setitem__(k, s.result()), args=(k, s))
               for k, s in (("a", a), ("b", b))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert results["a"].token_ids == solo.token_ids
    assert results["b"].usage.completion_tokens == 7 and results["b"].finish_reason == "length"


STATEFUL = {
    "xtc": dict(xtc_threshold=0.01, xtc_probability=0.5),
    "mirostat": dict(mirostat_mode=2, mirostat_tau=4.0, mirostat_eta=0.3),
    "adaptive_p": dict(adaptive_target=0.2, adaptive_decay=0.8),
    "dry": dict(dry_multiplier=1.5, dry_allowed_length=1, repetition_penalty_range=32),
}


def test_samplers_with_state_or_chance_give_each_sequence_its_own_in_a_batch(tiny_engine):
    """XTC's draws, mirostat's mu, adaptive-p's average and DRY's history belong to a sequence: four requests
    sharing every batched step give what each gives alone, and a seed repeats it."""
    def request(name: str, seed: int) -> GenerationRequest:
        return GenerationRequest("Once upon a time", SamplingParams(
            temperature=1.0, max_new_tokens=12, seed=seed, ban_eos=True, **STATEFUL[name]))

    alone = {name: tiny_engine.generate(request(name, 5)).token_ids for name in STATEFUL}
    streams = {name: tiny_engine.submit(request(name, 5)) for name in STATEFUL}
    together = {name: stream.result().token_ids for name, stream in streams.items()}
    assert together == alone
    assert tiny_engine.generate(request("xtc", 6)).token_ids != alone["xtc"]


def test_cfg_runs_the_negative_prompt_beside_the_request_and_matches_the_formula(tiny_engine, tiny_model):
    """Greedy CFG, step by step by hand (the model's logits after the prompt and after the negative prompt, each
    followed by the tokens so far), equals what the engine gives with the negative prompt batched beside it."""
    tok = tiny_model.tokenizer
    prompt, negative, scale, n = "Once upon a time", "The end. The end.", 1.8, 6
    params = greedy(n, guidance_scale=scale, negative_prompt=negative, ban_eos=True)
    got = tiny_engine.generate(GenerationRequest(prompt, params))
    cond, uncond, expected = tok.encode(prompt), tok.encode(negative), []
    for _ in range(n):
        c = tiny_model.logits(cond + expected).float().log_softmax(-1)
        u = tiny_model.logits(uncond + expected).float().log_softmax(-1)
        expected.append(int((u + scale * (c - u)).argmax()))
    assert got.token_ids == expected
    plain = tiny_engine.generate(GenerationRequest(prompt, greedy(n, ban_eos=True)))
    assert plain.token_ids != expected and plain.usage.guidance_tokens == 0  # it does steer, and costs nothing off
    assert got.usage.guidance_tokens == len(uncond) + n - 1  # the negative prompt, then each token but the last
    # beside other requests in the same steps (one of them CFG too), the same tokens
    streams = [tiny_engine.submit(GenerationRequest(prompt, params)),
               tiny_engine.submit(GenerationRequest("Tell me a story", greedy(9, ban_eos=True))),
               tiny_engine.submit(GenerationRequest("Hello", greedy(4, guidance_scale=0.5, ban_eos=True)))]
    assert streams[0].result().token_ids == expected
    assert [s.result().usage.completion_tokens for s in streams[1:]] == [9, 4]


def test_cancel_ends_within_one_step_and_spares_others(tok):
    model = ScriptedModel(tok, [100] * 400, step_delay=0.01)
    engine = Engine(model)
    try:
        long = engine.submit(GenerationRequest("a", greedy(400)))
        other = engine.submit(GenerationRequest("b", greedy(30)))
        events = iter(long)
        for _ in range(3):
            next(events)
        steps_at_cancel = model.forward_calls
        long.cancel()
        last = list(events)[-1]
        assert last.finish_reason == "cancelled"
        assert last.usage.completion_tokens <= steps_at_cancel + 1  # at most the step already under way
        assert other.result().usage.completion_tokens == 30
    finally:
        engine.close()


def test_cancel_before_start(tok):
    engine, model = scripted_engine(tok, "x " * 50, step_delay=0.05)
    try:
        engine.config = EngineConfig(max_running=1)
        first = engine.submit(GenerationRequest("a", greedy(20, ban_eos=True)))
        queued = engine.submit(GenerationRequest("b", greedy(20)))
        queued.cancel()
        assert queued.result().finish_reason == "cancelled"
        assert first.result().finish_reason == "length"
    finally:
        engine.close()


def test_async_consumption(tiny_engine):
    async def consume():
        stream = tiny_engine.submit(GenerationRequest("Hi", greedy(8, ban_eos=True)))
        return [e async for e in stream]

    events = run_async(consume())
    assert events[-1].finish_reason == "length" and sum(len(e.token_ids) for e in events) == 8


# -- errors reach the caller ---------------------------------------------------------------

def test_exception_in_forward_reaches_the_caller_and_engine_survives(tok):
    engine, model = scripted_engine(tok, "fine text here", fail_at_step=3)
    try:
        stream = engine.submit(GenerationRequest("q", greedy(20)))
        with pytest.raises(GenerationError, match="scripted failure") as err:
            list(stream)
        assert isinstance(err.value.__cause__, RuntimeError)
        model.fail_at_step = None
        assert engine.generate(GenerationRequest("q", greedy(3))).finish_reason == "length"
    finally:
        engine.close()


def test_prompt_errors_are_raised_at_submit(tiny_engine, tiny_model):
    with pytest.raises(PromptTooLong, match="context of 256 tokens"):
        tiny_engine.submit(GenerationRequest("word " * 300))
    with pytest.raises(ValueError, match="prompt is empty"):
        tiny_engine.submit(GenerationRequest("", add_special_tokens=False))


def test_a_prompt_whose_fewest_tokens_overflow_is_refused_before_it_is_tokenized(tiny_engine, tiny_model):
    """#43: 10 MB of text costs seconds to tokenize; its byte length over the longest token's already says it
    cannot fit, so it is refused at once ("at least N tokens"), and a text that may fit is tokenized as before."""
    import time

    from webui.engine.sequence import longest_token_bytes

    longest = longest_token_bytes(tiny_model.tokenizer, tiny_model.vocab_size)
    assert 4 <= longest < 200
    started = time.monotonic()
    with pytest.raises(PromptTooLong, match="at least .* context of 256 tokens"):
        tiny_engine.submit(GenerationRequest("x" * 10 * 2**20))
    assert time.monotonic() - started < 2
    with pytest.raises(PromptTooLong, match=r"has \d+ tokens"):  # may fit by its bytes: tokenized, then refused
        tiny_engine.submit(GenerationRequest("word " * 300))


def test_output_is_capped_by_the_context(tok):
    engine = Engine(ScriptedModel(tok, [100] * 100, context_length=12))
    try:
        result = engine.generate(GenerationRequest([5] * 10, greedy(50)))
    finally:
        engine.close()
    assert result.usage.completion_tokens == 2 and result.finish_reason == "length"


def test_no_model_loaded():
    engine = Engine()
    try:
        with pytest.raises(NoModelLoaded, match="no model is loaded"):
            engine.submit(GenerationRequest("hi"))
    finally:
        engine.close()


def test_queue_full(tok):
    engine = Engine(ScriptedModel(tok, [100] * 100, step_delay=0.05), EngineConfig(max_running=1, max_waiting=1))
    try:
        running = engine.submit(GenerationRequest("a", greedy(30)))
        running_events = iter(running)
        next(running_events)  # admitted and running
        engine.submit(GenerationRequest("b", greedy(1)))
        with pytest.raises(QueueFull, match="queue is full"):
            engine.submit(GenerationRequest("c", greedy(1)))
        running.cancel()
    finally:
        engine.close()


def test_switching_model_while_generating_ends_with_a_clear_error(tok):
    slow = ScriptedModel(tok, [100] * 200, step_delay=0.02, name="old")
    engine = Engine(slow)
    try:
        stream = engine.submit(GenerationRequest("q", greedy(200)))
        events = iter(stream)
        next(events)
        engine.set_model(ScriptedModel(tok, tok.encode(" new", add_special_tokens=False), name="new"))
        with pytest.raises(GenerationError, match="switched to 'new' while this request was running"):
            list(events)
        assert engine.generate(GenerationRequest("q", greedy(5))).text == " new"
    finally:
        engine.close()


def test_stats_show_running_requests(tok):
    engine = Engine(ScriptedModel(tok, [100] * 100, step_delay=0.02))
    try:
        stream = engine.submit(GenerationRequest("q", greedy(50)))
        next(iter(stream))
        stats = engine.stats()
        assert stats.model == "scripted" and stats.running == 1 and stats.busy
        stream.cancel()
        stream.result()
        assert not engine.stats().busy
    finally:
        engine.close()


def test_logprobs_are_attached_per_token(tiny_engine):
    result = tiny_engine.generate(GenerationRequest("Hi", greedy(4, ban_eos=True), logprobs=3))
    assert len(result.logprobs) == 4
    for lp, token in zip(result.logprobs, result.token_ids):
        assert lp.token_id == token and lp.logprob <= 0
        assert len(lp.top) == 3 and lp.top[0][0] == token  # greedy picks the top alternative


def test_generation_time_limit_ends_with_timeout(tok):
    engine = Engine(ScriptedModel(tok, [100] * 500, step_delay=0.02))
    try:
        result = engine.generate(GenerationRequest("q", greedy(500), timeout=0.2))
    finally:
        engine.close()
    assert result.finish_reason == "timeout" and 0 < result.usage.completion_tokens < 500


def test_queue_wait_limit_ends_with_timeout(tok):
    engine = Engine(ScriptedModel(tok, [100] * 500, step_delay=0.02), EngineConfig(max_running=1))
    try:
        busy = engine.submit(GenerationRequest("a", greedy(100)))
        waiting = engine.generate(GenerationRequest("b", greedy(5), queue_timeout=0.2))
        assert waiting.finish_reason == "timeout" and waiting.usage.completion_tokens == 0
        busy.cancel()
    finally:
        engine.close()


def test_logit_bias_outside_the_vocabulary_is_refused_at_submit(tiny_engine):
    from webui.engine import InvalidParameter

    with pytest.raises(InvalidParameter, match="not in the model's vocabulary") as err:
        tiny_engine.submit(GenerationRequest("hi", SamplingParams(logit_bias={10**6: 1})))
    assert err.value.param == "logit_bias"


def test_logit_bias_forces_a_token(tiny_engine, tok):
    forced = tok.encode(" banana", add_special_tokens=False)[0]
    result = tiny_engine.generate(GenerationRequest("hi", greedy(3, logit_bias={forced: 100})))
    assert result.token_ids == [forced] * 3


def test_interleave_yields_events_of_both_streams_as_they_come(tok):
    from webui.engine.stream import Interleaved

    engine, _ = scripted_engine(tok, "one two three four five", step_delay=0.01)
    try:
        streams = [engine.submit(GenerationRequest("a", greedy(5))), engine.submit(GenerationRequest("b", greedy(3)))]
        seen = list(Interleaved(streams))
    finally:
        engine.close()
    assert {i for i, _ in seen} == {0, 1}
    finals = [e for _, e in seen if e.finish_reason]
    assert len(finals) == 2 and sum(len(e.token_ids) for i, e in seen if i == 1) == 3


def test_interleaved_streams_are_read_the_same_from_an_event_loop_and_a_failure_is_an_item(tok):
    """The API's n > 1 reads the same merger as the A/B view: events of every stream, tagged; a failed request's
    GenerationError comes as its item and the other streams go on."""
    from webui.engine.stream import Interleaved

    engine, _ = scripted_engine(tok, "one two three four five", step_delay=0.01)
    try:
        streams = [engine.submit(GenerationRequest("a", greedy(4))), engine.submit(GenerationRequest("b", greedy(2)))]

        async def read():
            return [item async for item in Interleaved(streams)]

        seen = run_async(read())
        assert [len([e for i, e in seen if i == n and e.finish_reason]) for n in (0, 1)] == [1, 1]
        assert sum(len(e.token_ids) for i, e in seen if i == 0) == 4
    finally:
        engine.close()
    failing, _ = scripted_engine(tok, "one two three", fail_at_step=2)
    try:
        items = list(Interleaved([failing.submit(GenerationRequest("a", greedy(5)))]))
    finally:
        failing.close()
    assert isinstance(items[-1][1], GenerationError) and "scripted failure" in str(items[-1][1])


# -- background work (batch jobs) never makes an interactive request wait ------------------------------------------

def test_background_requests_wait_behind_interactive_ones_and_keep_the_last_slot_free(tok):
    model = ScriptedModel(tok, [100] * 400, step_delay=0.01)
    engine = Engine(model, EngineConfig(max_running=3))
    try:
        background = [engine.submit(GenerationRequest(f"b{i}", greedy(40), priority=BACKGROUND)) for i in range(4)]
        seen = set()
        for _ in range(200):
            seen.add(engine.stats().running)
            if 2 in seen:
                break
            time.sleep(0.01)
        assert max(seen) == 2  # of 3 slots: the last stays free for an interactive request
        chat = engine.submit(GenerationRequest("chat", greedy(3)))
        assert chat.result().usage.completion_tokens == 3  # taken at once, not after the background requests
        assert sum(s.result().usage.completion_tokens == 40 for s in background) == 4
    finally:
        engine.close()


def test_background_requests_pause_while_an_interactive_prompt_is_read(tok):
    model = ScriptedModel(tok, [100] * 400, step_delay=0.005)
    engine = Engine(model, EngineConfig(max_running=4, prefill_chunk=4))
    try:
        background = engine.submit(GenerationRequest("b", greedy(200), priority=BACKGROUND))
        next(iter(background))
        model.batch_sizes.clear()
        prompt = " ".join(["word"] * 40)  # ten chunks of 4 tokens
        chat = engine.submit(GenerationRequest(prompt, greedy(2)))
        first = next(iter(chat))
        read = model.batch_sizes[:model.batch_sizes.index(1) + 10] if 1 in model.batch_sizes else []
        assert first.text and read.count(1) >= 10  # the prompt's chunks went through alone
        background.cancel()
    finally:
        engine.close()


def test_priority_must_be_interactive_or_background():
    with pytest.raises(ValueError, match="priority must be 0"):
        GenerationRequest("x", priority=7)
