"""The ExLlamaV2 loader and `launch.py quantize exl2`.

Without an NVIDIA GPU (CI, this machine) the clear refusals are tested (the loader's
unavailable state is in test_loaders.py, the converter's refusal here), and our side of
the backend contract runs over a CPU stand-in for exllamav2's API. The real test
(convert the default model with exllamav2's converter, load it, generate, compare with
the transformers output) needs CUDA and the exllamav2 package; it runs where both are,
the lent GPU machine included (see tests/gpu/README.md), and is skipped elsewhere with
that reason.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import shutil
import sys
import types
from pathlib import Path

import pytest

from loaders.base import LoadOptions
from loaders.options import LoadOptionError
from loaders.exllamav2_loader import cuda_available
from tests.conftest import TEST_CACHE
from webui.engine import Engine, GenerationRequest, SamplingParams

pytestmark = pytest.mark.real_model
needs_gpu = pytest.mark.skipif(
    not (cuda_available() and importlib.util.find_spec("exllamav2")),
    reason="needs an NVIDIA GPU with CUDA and the exllamav2 extra (python launch.py install exllamav2)")

TEXT = ("The Eiffel Tower is a wrought-iron lattice tower in Paris, France. It is named after the engineer "
        "Gustave Eiffel, whose company designed and built the tower from 1887 to 1889.")
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


def test_converting_to_exl2_without_a_gpu_is_a_clear_error(default_model_dir, tmp_path, capsys):
    from webui.quantize import main

    if cuda_available():
        pytest.skip("this machine has a CUDA GPU")
    out = tmp_path / "out"
    assert main(["exl2", str(default_model_dir), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "converting to EXL2 runs exllamav2's CUDA kernels" in err and "quantize with gptq instead" in err
    assert not out.exists()


def test_exl2_options_are_checked_before_any_work(default_model_dir, tmp_path, capsys):
    from webui.quantize import main

    out = tmp_path / "out"
    assert main(["exl2", str(default_model_dir), "--bits", "9", "--out", str(out)]) == 2
    assert "average bits per weight, from 2 to 8; got 9" in capsys.readouterr().err
    assert main(["exl2", str(default_model_dir), "--group-size", "64", "--out", str(out)]) == 2
    assert "--calibration and --group-size apply to gptq" in capsys.readouterr().err
    assert main(["gptq", str(default_model_dir), "--bits", "4.5", "--out", str(out)]) == 2
    assert "--bits for gptq must be one of 2, 3, 4, 8, got 4.5" in capsys.readouterr().err
    assert main(["exl2", str(default_model_dir), "--rows", "0", "--out", str(out)]) == 2
    assert "--rows is the number of calibration rows, from 1 to 1000; got 0" in capsys.readouterr().err
    assert main(["gptq", str(default_model_dir), "--rows", "20", "--out", str(out)]) == 2
    assert "--rows applies to exl2" in capsys.readouterr().err
    assert not out.exists()


class _StandInBackend:
    """The part of exllamav2's API the loader uses, computed by a transformers model on the CPU.

    Real ExLlamaV2 needs CUDA; this checks our side of the contract here: a cache is a buffer
    whose ``current_seq_len`` says how much of it is valid (the pool resets it to reuse the
    buffer), ``forward`` advances it and returns [batch, tokens, padded vocab] logits.
    """

    HEAD_PADDING = 32
    weights: Path  # the plain folder the weights come from (transformers has no exl2 reader)

    class ExLlamaV2Config:
        def __init__(self, model_dir: str):
            config = json.loads((Path(model_dir) / "config.json").read_text())
            self.model_dir, self.vocab_size = model_dir, config["vocab_size"]
            self.max_seq_len = config["max_position_embeddings"]

    class ExLlamaV2:
        def __init__(self, config):
            self.config, self.net = config, None

        def load(self):
            from transformers import AutoModelForCausalLM

            self.net = AutoModelForCausalLM.from_pretrained(_StandInBackend.weights).eval()

        def unload(self):
            self.net = None

        def forward(self, input_ids, cache, last_id_only=False):
            import torch
            from transformers import DynamicCache

            assert cache.current_seq_len + input_ids.shape[-1] <= cache.max_seq_len
            if cache.current_seq_len == 0:  # a reused buffer: only current_seq_len tokens are valid
                cache.kv = DynamicCache()
            assert cache.kv.get_seq_length() == cache.current_seq_len
            logits = self.net(input_ids=input_ids, cache=cache.kv, use_cache=True).logits
            cache.current_seq_len += input_ids.shape[-1]
            pad = torch.full((*logits.shape[:-1], _StandInBackend.HEAD_PADDING), -65504.0)
            logits = torch.cat([logits, pad], dim=-1)
            return logits[:, -1:] if last_id_only else logits

    class ExLlamaV2Cache:
        made = 0

        def __init__(self, model, batch_size=1, max_seq_len=-1):
            from transformers import DynamicCache

            assert batch_size == 1
            self.kv, self.current_seq_len, self.max_seq_len = DynamicCache(), 0, max_seq_len
            type(self).made += 1


@pytest.fixture
def stand_in_exl2(tiny_model_dir, tmp_path, monkeypatch):
    """The tiny model as an 'EXL2 folder', loaded by ExLlamaV2Model over the stand-in backend."""
    import torch

    from loaders.exllamav2_loader import ExLlamaV2Model

    folder = tmp_path / "tiny-exl2"
    shutil.copytree(tiny_model_dir, folder)
    config = json.loads((folder / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "exl2", "bits": 8.0}
    (folder / "config.json").write_text(json.dumps(config))
    backend = types.ModuleType("exllamav2")
    for name in ("ExLlamaV2Config", "ExLlamaV2", "ExLlamaV2Cache"):
        setattr(backend, name, getattr(_StandInBackend, name))
    backend.ExLlamaV2Cache_Q4 = type("ExLlamaV2Cache_Q4", (_StandInBackend.ExLlamaV2Cache,), {})
    monkeypatch.setitem(sys.modules, "exllamav2", backend)
    monkeypatch.setattr(_StandInBackend, "weights", tiny_model_dir, raising=False)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda *a: 0)
    model = ExLlamaV2Model(folder)
    yield model
    model.close()


def test_exl2_model_drives_the_engine_like_the_transformers_model(stand_in_exl2, tiny_model):
    from webui.insight import perplexity

    model = stand_in_exl2
    assert (model.vocab_size, model.context_length) == (tiny_model.vocab_size, tiny_model.context_length)
    ids = model.tokenizer.encode("Hello there")
    assert ids == tiny_model.tokenizer.encode("Hello there")
    assert model.logits(ids).shape == (model.vocab_size,)  # the head's padding is cut off
    assert model.logits(ids, last_only=False).shape == (len(ids), model.vocab_size)
    ours, theirs = Engine(model), Engine(tiny_model)
    try:
        prompts = ["The capital of France is", "1, 2, 3,", "Once upon a time"]
        for params in (SamplingParams(temperature=0, max_new_tokens=8),
                       SamplingParams(temperature=1.0, top_k=50, seed=3, max_new_tokens=8),
                       SamplingParams(temperature=1.0, seed=4, max_new_tokens=8,
                                      structured_outputs={"regex": "(yes|no), [0-9]+"})):
            streams = [ours.submit(GenerationRequest(p, params)) for p in prompts]  # several at once
            expected = [theirs.generate(GenerationRequest(p, params)).token_ids for p in prompts]
            assert [s.result().token_ids for s in streams] == expected
        made = _StandInBackend.ExLlamaV2Cache.made
        ours.generate(GenerationRequest(prompts[0], SamplingParams(temperature=0, max_new_tokens=2)))
        assert _StandInBackend.ExLlamaV2Cache.made == made  # finished sequences' caches are reused
        assert perplexity(ours, TEXT).ppl == pytest.approx(perplexity(theirs, TEXT).ppl, rel=1e-2)
    finally:
        ours.close()
        theirs.close()


def test_cache_options_choose_the_cache_class_and_its_size(stand_in_exl2):
    from loaders.exllamav2_loader import ExLlamaV2Model, gpu_split

    model = ExLlamaV2Model(stand_in_exl2.path, cache_size=64, cache_quant="q4")
    try:
        assert model.context_length == 64
        handle = model.new_cache()
        assert type(handle.cache).__name__ == "ExLlamaV2Cache_Q4" and handle.cache.max_seq_len == 64
        model.release(handle)
    finally:
        model.close()
    from loaders.base import weights_on_disk
    from loaders.exllamav2_loader import ExLlamaV2Loader

    def estimate(**extra):
        return ExLlamaV2Loader().estimate_bytes(stand_in_exl2.path, LoadOptions(extra=extra))

    weights = weights_on_disk(stand_in_exl2.path)
    assert estimate() > estimate(cache_quant="q4") > estimate(cache_quant="q4", cache_size=64) > weights
    assert gpu_split("", 1) is None and gpu_split("20, 24", 2) == [20.0, 24.0]
    with pytest.raises(LoadOptionError, match="gpu_split names 2 GPUs, but torch sees 1 here"):
        gpu_split("20,24", 1)
    with pytest.raises(LoadOptionError, match="gpu_split is GB per GPU separated by commas"):
        gpu_split("lots", 1)


@pytest.fixture(scope="module")
def exl2_dir(default_model_dir):
    """The default model converted to EXL2 at 8 bits per weight (kept in the test cache)."""
    from webui.quantize import quantize_exl2

    out = TEST_CACHE / "exl2" / "SmolLM2-135M-Instruct-exl2-8bit"
    key = {"exllamav2": importlib.metadata.version("exllamav2"), "bits": 8}
    marker = out / "made_with.json"
    if not (marker.is_file() and json.loads(marker.read_text()) == key):
        quantize_exl2(default_model_dir, out, bits=8)
        marker.write_text(json.dumps(key))
    return out


@pytest.fixture(scope="module")
def exl2_engine(exl2_dir):
    from loaders.registry import default_registry

    loader = default_registry().for_path(exl2_dir)
    assert loader.name == "exllamav2"  # chosen from the exl2 quantization_config
    model = loader.load(exl2_dir, LoadOptions())
    engine = Engine(model)
    yield engine
    engine.close()
    model.close()


def _greedy(engine: Engine, tokens: int) -> list[int]:
    prompt = engine.model.tokenizer.apply_chat_template(QUESTION)
    result = engine.generate(GenerationRequest(prompt, SamplingParams(temperature=0, max_new_tokens=tokens),
                                               add_special_tokens=False))
    return list(result.token_ids)


@needs_gpu
def test_exl2_model_answers_like_the_transformers_model(exl2_engine, real_engine):
    model = exl2_engine.model
    assert model.loader == "exllamav2" and model.device == "cuda"
    ours = _greedy(exl2_engine, 12)
    assert "Paris" in model.tokenizer.decode(ours)
    # 8 bits per weight: the first greedy tokens are those of the full-precision model
    assert ours[:4] == _greedy(real_engine, 4)


@needs_gpu
def test_exl2_seeded_sampling_repeats_and_concurrent_requests_match_alone(exl2_engine):
    prompt = exl2_engine.model.tokenizer.apply_chat_template(QUESTION)
    params = SamplingParams(temperature=0.9, top_p=0.95, seed=7, max_new_tokens=10)
    runs = [exl2_engine.generate(GenerationRequest(prompt, params, add_special_tokens=False)).token_ids
            for _ in range(2)]
    assert runs[0] == runs[1]
    streams = [exl2_engine.submit(GenerationRequest(prompt, params, add_special_tokens=False)) for _ in range(3)]
    assert all(s.result().token_ids == runs[0] for s in streams)


@needs_gpu
def test_exl2_perplexity_close_to_full_precision(exl2_engine, real_engine):
    from webui.insight import perplexity

    exl2, fp32 = perplexity(exl2_engine, TEXT), perplexity(real_engine, TEXT)
    assert exl2.tokens == fp32.tokens
    assert fp32.ppl * 0.9 < exl2.ppl < fp32.ppl * 1.2, (exl2.ppl, fp32.ppl)


@needs_gpu
def test_exl2_structured_output_holds(exl2_engine):
    prompt = exl2_engine.model.tokenizer.apply_chat_template(QUESTION)
    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}}, "required": ["city"],
              "additionalProperties": False}
    streams = [exl2_engine.submit(GenerationRequest(prompt, SamplingParams(
        temperature=1.0, seed=seed, max_new_tokens=40, structured_outputs={"json": schema}), add_special_tokens=False))
        for seed in range(4)]
    for stream in streams:
        result = stream.result()
        assert result.finish_reason == "stop" and set(json.loads(result.text)) == {"city"}, result.text
