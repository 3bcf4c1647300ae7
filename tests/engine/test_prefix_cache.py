"""The prefix cache: prompts already read are not prefilled again, and outputs never change because of it.

Every comparison runs the same requests through an engine with the cache off
(prefix_cache_mb=0) and one with it on, on tiny random models of several
architectures built from a config here, and on the real default model.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from tests.conftest import TEST_THREADS, load_model
from webui.engine import Engine, EngineConfig, GenerationRequest, SamplingParams
from webui.engine.prefix_cache import BLOCK_TOKENS, PrefixCache, chain_keys

GREEDY = SamplingParams(temperature=0, max_new_tokens=6, ban_eos=True)
SEEDED = SamplingParams(temperature=1.0, top_k=50, max_new_tokens=6, seed=7, ban_eos=True)
OFF = EngineConfig(prefix_cache_mb=0)
ON = EngineConfig(prefix_cache_mb=64)


def prompt(n: int, start: int = 100) -> list[int]:
    return [start + (i * 7) % 500 for i in range(n)]


def run(engine: Engine, prompts, params=GREEDY, loras=()):
    """Each prompt one after another; (token ids, cached tokens) of each."""
    out = []
    for p in prompts:
        result = engine.generate(GenerationRequest(p, params, loras=loras))
        assert result.finish_reason == "length", result
        out.append((result.token_ids, result.usage.cached_tokens))
    return out


def off_and_on(model, prompts, params=GREEDY, config_on=ON, loras=()):
    results = []
    for config in (OFF, config_on):
        engine = Engine(model, config)
        try:
            results.append(run(engine, prompts, params, loras))
        finally:
            engine.close()
    return results


# -- the block store -------------------------------------------------------------------

def test_hash_chain_keys_depend_on_everything_before_and_the_namespace():
    a = chain_keys("m", list(range(48)), 3)
    assert len(a) == 3 and len(set(a)) == 3
    assert chain_keys("m", list(range(48)), 2) == a[:2]
    assert chain_keys("m", list(range(48)), 3, a[:1]) == a  # extending a chain gives the same keys
    changed = list(range(48))
    changed[3] = 999  # a token in block 0 changes every key after it
    assert not set(chain_keys("m", changed, 3)) & set(a)
    assert not set(chain_keys("other model", list(range(48)), 3)) & set(a)


def block_cache(budget_blocks: int) -> PrefixCache:
    return PrefixCache(budget_bytes=budget_blocks * 10)


def test_lru_eviction_takes_chain_ends_first_and_never_pinned_blocks():
    cache = block_cache(4)
    first = chain_keys("m", prompt(64), 4)
    assert cache.insert("m", first, 0, lambda i: (f"block{i}", 10)) == 4
    pins = cache.pin(first[:2])
    second = chain_keys("m", prompt(32, start=7), 2)
    assert cache.insert("m", second, 0, lambda i: (f"other{i}", 10)) == 2
    # the first chain lost its end (blocks 2, 3), never a block in the middle, nor the pinned ones
    assert cache.match(first) == 2 and cache.match(second) == 2
    assert cache.stats().bytes == 40
    third = chain_keys("m", prompt(48, start=3), 3)
    cache.insert("m", third, 0, lambda i: (f"third{i}", 10))
    assert cache.match(first) == 2, "pinned blocks were evicted"
    cache.unpin(pins)
    assert cache.insert("m", third, 0, lambda i: (f"third{i}", 10)) == 3
    assert cache.stats().bytes <= 40


def test_a_block_larger_than_the_budget_is_not_stored_and_clear_voids_pins():
    cache = block_cache(1)
    keys = chain_keys("m", prompt(32), 2)
    assert cache.insert("m", keys, 0, lambda i: ("x", 11)) == 0
    assert cache.insert("m", keys, 0, lambda i: ("x", 10)) == 1  # the second block finds no room
    pins = cache.pin(keys[:1])
    cache.clear()
    assert len(cache) == 0 and cache.stats().bytes == 0
    cache.insert("m", keys[:1], 0, lambda i: ("x", 10))
    cache.unpin(pins)  # stale pins from before the clear touch nothing
    assert cache.pin(keys[:1])[1] == keys[:1]


def test_drop_removes_a_namespace():
    cache = block_cache(8)
    cache.insert("keep", chain_keys("keep", prompt(32), 2), 0, lambda i: ("k", 10))
    cache.insert("gone", chain_keys("gone", prompt(32), 2), 0, lambda i: ("g", 10))
    assert cache.drop(lambda ns: ns == "gone") == 2
    assert len(cache) == 2 and cache.stats().bytes == 20


# -- the engine on a tiny Llama --------------------------------------------------------

def test_the_same_prompt_twice_reuses_its_blocks_with_identical_tokens(tiny_model):
    p = prompt(70)
    off, on = off_and_on(tiny_model, [p, p, p + [5]])
    assert [t for t, _ in on] == [t for t, _ in off]
    assert [c for _, c in off] == [0, 0, 0]
    assert on[0][1] == 0
    assert on[1][1] == 64 == on[2][1]  # whole blocks of 16 only; the last prompt token is always fed
    engine = Engine(tiny_model, ON)
    try:
        run(engine, [p])
        stats = engine.stats().prefix_cache
        assert stats is not None and stats.blocks >= 4 and stats.hit_rate == 0
        run(engine, [p])
        assert engine.stats().prefix_cache.hit_rate > 0.4
        engine.clear_prefix_cache()
        assert engine.stats().prefix_cache.blocks == 0
        assert run(engine, [p])[0][1] == 0
    finally:
        engine.close()


def test_seeded_samples_are_identical_with_the_cache(tiny_model):
    p = prompt(50)
    off, on = off_and_on(tiny_model, [p, p], SEEDED)
    assert on == [(off[0][0], 0), (off[1][0], 48)]


def test_prompts_that_share_all_but_their_last_token(tiny_model):
    base = prompt(64)
    prompts = [base, base[:-1] + [9], base[:-1] + [10], base[:48], base[:47] + [11]]
    off, on = off_and_on(tiny_model, prompts)
    assert [t for t, _ in on] == [t for t, _ in off]
    # 63 shared tokens reuse 3 whole blocks; the 48-token prompt reuses 47 (its last token is fed again)
    assert [c for _, c in on] == [0, 48, 48, 47, 32]


def test_a_reply_is_cached_too_so_the_next_chat_turn_reuses_it(tiny_model):
    engine = Engine(tiny_model, ON)
    try:
        p = prompt(40)
        first = engine.generate(GenerationRequest(p, SamplingParams(temperature=0, max_new_tokens=30,
                                                                    ban_eos=True)))
        turn = p + first.token_ids + prompt(10, start=3)
        second = engine.generate(GenerationRequest(turn, GREEDY))
    finally:
        engine.close()
    assert second.usage.cached_tokens == (len(p) + 30 - 1) // BLOCK_TOKENS * BLOCK_TOKENS == 64
    engine = Engine(tiny_model, OFF)
    try:
        assert engine.generate(GenerationRequest(turn, GREEDY)).token_ids == second.token_ids
    finally:
        engine.close()


def test_a_tiny_budget_evicts_and_outputs_stay_the_same(tiny_model):
    p1, p2, p3 = prompt(80), prompt(80, start=3), prompt(80, start=11)
    tiny = EngineConfig(prefix_cache_mb=3 * 4096 / 2**20)  # three blocks of this model
    off, on = off_and_on(tiny_model, [p1, p2, p1, p3, p2], config_on=tiny)
    assert [t for t, _ in on] == [t for t, _ in off]
    engine = Engine(tiny_model, tiny)
    try:
        run(engine, [p1, p2, p3])
        stats = engine.stats().prefix_cache
        assert stats.bytes <= stats.budget_bytes and stats.blocks <= 3
    finally:
        engine.close()


def count_prefill(model):
    """Wrap ``model.forward`` to count the prompt tokens it is fed (feeds of more than one token)."""
    fed = []
    original = model.forward

    def forward(caches, new_ids):
        fed.extend(len(ids) for ids in new_ids if len(ids) > 1)
        return original(caches, new_ids)

    model.forward = forward
    return fed, lambda: delattr(model, "forward")


def test_n_samples_of_one_prompt_prefill_it_once(tiny_model):
    p = prompt(200)
    params = [SamplingParams(temperature=t, max_new_tokens=4, seed=s, ban_eos=True) for t in (0, 0.7)
              for s in (1, 2)]
    expected = []
    engine = Engine(tiny_model, OFF)
    try:
        for sp in params:
            expected.append(engine.generate(GenerationRequest(p, sp)).token_ids)
    finally:
        engine.close()
    fed, restore = count_prefill(tiny_model)
    engine = Engine(tiny_model, EngineConfig(prefix_cache_mb=64, prefill_chunk=64))
    try:
        streams = [engine.submit(GenerationRequest(p, sp)) for sp in params]
        results = [s.result() for s in streams]
    finally:
        engine.close()
        restore()
    assert [r.token_ids for r in results] == expected
    assert sorted(r.usage.cached_tokens for r in results) == [0, 192, 192, 192]
    assert sum(fed) < 200 + 3 * 16, f"the shared prompt was prefilled more than once: {fed}"


def test_cancel_mid_prefill_leaves_the_cache_consistent(tiny_model):
    p = prompt(200)
    engine = Engine(tiny_model, EngineConfig(prefix_cache_mb=64, prefill_chunk=32, max_batch_tokens=32))
    try:
        stream = engine.submit(GenerationRequest(p, GREEDY))
        deadline = time.monotonic() + 60
        while engine.stats().prefix_cache.blocks < 2 and time.monotonic() < deadline:
            time.sleep(0.001)
        stream.cancel()
        assert stream.result().finish_reason == "cancelled"
        partial = engine.stats().prefix_cache.blocks
        assert 2 <= partial < 12
        again = engine.generate(GenerationRequest(p, GREEDY))
    finally:
        engine.close()
    assert again.usage.cached_tokens >= 32
    assert again.token_ids == off_and_on(tiny_model, [p])[0][0][0]


# -- architectures ---------------------------------------------------------------------

def _tiny(kind: str, vocab: int):
    import transformers as tf

    common = dict(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                  bos_token_id=1, eos_token_id=2, pad_token_id=2)
    if kind == "qwen2":
        return tf.Qwen2Config(**common), tf.Qwen2ForCausalLM
    if kind == "qwen3":
        return tf.Qwen3Config(head_dim=8, **common), tf.Qwen3ForCausalLM
    if kind == "mistral":
        return tf.MistralConfig(sliding_window=None, **common), tf.MistralForCausalLM
    if kind == "mistral-sliding":
        return tf.MistralConfig(sliding_window=32, **common), tf.MistralForCausalLM
    if kind == "gemma2":
        return tf.Gemma2Config(head_dim=8, sliding_window=32, **common), tf.Gemma2ForCausalLM
    if kind == "gemma3":
        return tf.Gemma3TextConfig(head_dim=8, sliding_window=32, **common), tf.Gemma3ForCausalLM
    if kind == "gpt2":
        return tf.GPT2Config(vocab_size=vocab, n_embd=32, n_layer=2, n_head=4, n_positions=512,
                             bos_token_id=1, eos_token_id=2), tf.GPT2LMHeadModel
    raise ValueError(kind)


@pytest.fixture(scope="module")
def architectures(tmp_path_factory, default_model_dir: Path):
    import torch
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(default_model_dir)

    def make(kind: str) -> Path:
        config, cls = _tiny(kind, len(tokenizer))
        torch.manual_seed(7)
        out = tmp_path_factory.mktemp(kind)
        cls(config).save_pretrained(out)
        tokenizer.save_pretrained(out)
        return out

    return make


@pytest.mark.parametrize("kind, caches", [("qwen2", True), ("qwen3", True), ("mistral", True), ("gpt2", True),
                                          ("mistral-sliding", False), ("gemma2", False), ("gemma3", False)])
def test_architectures_give_identical_tokens_and_cache_where_exact(architectures, kind, caches):
    model = load_model(architectures(kind))
    assert model.capabilities.prefix_cache == ("blocks" if caches else "")
    base = prompt(60)
    prompts = [base, base, base[:40] + prompt(20, start=9)]
    try:
        for params in (GREEDY, SEEDED):
            off, on = off_and_on(model, prompts, params)
            assert [t for t, _ in on] == [t for t, _ in off], kind
            assert [c for _, c in on] == ([0, 48, 32] if caches else [0, 0, 0])
        engine = Engine(model, ON)
        try:
            assert (engine.stats().prefix_cache is not None) is caches
        finally:
            engine.close()
    finally:
        model.close()


# -- adapters and model swaps ------------------------------------------------------------

@pytest.fixture
def lora_services(tmp_path: Path, tiny_model_dir: Path, tiny_lora_dir: Path):
    from webui.config import AppConfig
    from webui.services import Services

    config = AppConfig(user_data_dir=tmp_path / "data", threads=TEST_THREADS, device="cpu")
    config.make_dirs()
    (config.models_dir / "tiny").symlink_to(tiny_model_dir, target_is_directory=True)
    shutil.copytree(tiny_lora_dir, config.loras_dir / "secret")
    made = Services.create(config)
    made.models.load("tiny")
    yield made
    made.close()


def test_adapters_never_share_blocks_and_detaching_drops_theirs(lora_services):
    from tests.conftest import SECRET_PROMPT

    engine, models = lora_services.engine, lora_services.models
    text = SECRET_PROMPT * 12
    ask = lambda loras=(): engine.generate(GenerationRequest(text, GREEDY, loras=loras))  # noqa: E731
    base = ask()
    models.attach_lora("secret")
    with_lora = ask((("secret", 1.0),))
    assert with_lora.usage.cached_tokens == 0 and with_lora.token_ids != base.token_ids
    half = ask((("secret", 0.5),))
    assert half.usage.cached_tokens == 0  # another weight is another computation
    # both in one batch: each reuses its own blocks
    streams = [engine.submit(GenerationRequest(text, GREEDY, loras=loras)) for loras in ((), (("secret", 1.0),))]
    again_base, again_lora = (s.result() for s in streams)
    assert again_base.token_ids == base.token_ids and again_lora.token_ids == with_lora.token_ids
    assert again_base.usage.cached_tokens > 0 and again_lora.usage.cached_tokens > 0
    blocks = engine.stats().prefix_cache.blocks
    models.detach_lora("secret")
    assert engine.stats().prefix_cache.blocks < blocks  # the adapter's blocks went with it
    models.attach_lora("secret")  # attached again: a new identity, nothing stale is served
    assert ask((("secret", 1.0),)).usage.cached_tokens == 0
    after = ask()
    assert after.token_ids == base.token_ids and after.usage.cached_tokens > 0


def test_reloading_the_model_empties_the_cache(lora_services):
    engine, models = lora_services.engine, lora_services.models
    p = prompt(40)
    run(engine, [p])
    assert engine.stats().prefix_cache.blocks > 0
    models.reload()
    assert engine.stats().prefix_cache.blocks == 0
    assert run(engine, [p])[0][1] == 0


def test_prefix_cache_mb_zero_turns_it_off(tiny_model):
    engine = Engine(tiny_model, OFF)
    try:
        assert run(engine, [prompt(40), prompt(40)])[1][1] == 0
        assert engine.stats().prefix_cache is None
    finally:
        engine.close()


# -- the real default model ------------------------------------------------------------------

@pytest.mark.real_model
def test_real_model_chat_turns_identical_with_the_cache(real_model):
    tok = real_model.tokenizer
    messages = [{"role": "system", "content": "You are a helpful assistant who answers briefly."},
                {"role": "user", "content": "Name a large city in France."}]
    params = SamplingParams(temperature=0, max_new_tokens=8)
    results = {}
    for name, config in (("off", OFF), ("on", ON)):
        engine = Engine(real_model, config)
        history = list(messages)
        replies = []
        try:
            for follow_up in ("And one in Italy?", "And one in Spain?"):
                text = tok.apply_chat_template(history)
                result = engine.generate(GenerationRequest(text, params, add_special_tokens=False))
                replies.append((result.token_ids, result.usage.cached_tokens))
                history += [{"role": "assistant", "content": result.text}, {"role": "user", "content": follow_up}]
            seeded = engine.generate(GenerationRequest(tok.apply_chat_template(history), SamplingParams(
                temperature=0.8, max_new_tokens=8, seed=11), add_special_tokens=False))
            replies.append((seeded.token_ids, seeded.usage.cached_tokens))
        finally:
            engine.close()
        results[name] = replies
    assert [t for t, _ in results["on"]] == [t for t, _ in results["off"]]
    assert results["on"][0][1] == 0 and results["on"][1][1] > 0 and results["on"][2][1] > 0


def test_the_strategy_is_picked_once_from_the_capabilities_and_a_broken_promise_is_named():
    """prefix_reuse_for is the one place a prefix mode is told apart; a model lacking its protocol's methods is
    refused with the protocol's name instead of failing in the middle of a step."""
    from types import SimpleNamespace

    from loaders.base import Capabilities
    from webui.engine.prefix_reuse import BlockReuse, NativeReuse, NoReuse, prefix_reuse_for

    class Blocks:
        loader, device, capabilities = "fake", "cpu", Capabilities(prefix_cache="blocks")

        def prefix_namespace(self, loras=()): return "m"
        def prefix_namespace_live(self, namespace): return True
        def export_kv(self, cache, start, end): return None, 0
        def import_kv(self, cache, blocks, n_tokens): pass

    class Native:
        loader, device, capabilities = "fake", "cpu", Capabilities(prefix_cache="native")

        def prefix_match(self, ids): return 0
        def reuse_prefix(self, cache, ids): return 0
        def drop_prefixes(self): pass

    assert isinstance(prefix_reuse_for(Blocks(), 1), BlockReuse)
    assert prefix_reuse_for(Blocks(), 1).stats().budget_bytes == 2**20
    assert isinstance(prefix_reuse_for(Native(), None), NativeReuse)
    for off in (prefix_reuse_for(Blocks(), 0), prefix_reuse_for(None, None),
                prefix_reuse_for(SimpleNamespace(capabilities=Capabilities()), None)):
        assert isinstance(off, NoReuse) and off.stats() is None
    broken = SimpleNamespace(loader="broken", device="cpu", capabilities=Capabilities(prefix_cache="native"))
    with pytest.raises(TypeError, match="broken loader says prefix_cache='native'.*SupportsNativePrefix"):
        prefix_reuse_for(broken, None)
