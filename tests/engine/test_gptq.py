"""The GPTQ loader and `launch.py quantize gptq`: quantize the default model (cached), load, generate, perplexity.

The test command installs the gptq extra, so these run in CI; they are skipped (with
the reason) only where gptqmodel is not installed. Quantizing takes a minute or two
here, so the result is kept in the test cache, keyed by what it was made from.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import re
import shutil

import pytest

from loaders.base import LoadOptions, ModelLoadError
from tests.conftest import TEST_CACHE, TEST_THREADS
from webui.engine import Engine, GenerationRequest, SamplingParams

pytestmark = [
    pytest.mark.real_model,
    pytest.mark.skipif(importlib.util.find_spec("gptqmodel") is None,
                       reason="the gptq extra is not installed (python launch.py install gptq)"),
]

TEXT = ("The Eiffel Tower is a wrought-iron lattice tower in Paris, France. It is named after the engineer "
        "Gustave Eiffel, whose company designed and built the tower from 1887 to 1889.")


@pytest.fixture(scope="module")
def gptq_dir(default_model_dir):
    """The default model quantized to 4 bits (group size 64), made once per gptqmodel version and calibration."""
    from webui.quantize import CALIBRATION_FILE, quantize_gptq

    key = {"gptqmodel": importlib.metadata.version("gptqmodel"), "bits": 4, "group_size": 64,
           "calibration": hashlib.sha256(CALIBRATION_FILE.read_bytes()).hexdigest()}
    out = TEST_CACHE / "gptq" / "SmolLM2-135M-Instruct-gptq-4bit"
    marker = out / "made_with.json"
    if not (marker.is_file() and json.loads(marker.read_text()) == key):
        quantize_gptq(default_model_dir, out, bits=4, group_size=None)  # 576 wide: the group size must be 64
        marker.write_text(json.dumps(key))
    return out


@pytest.fixture(scope="module")
def gptq_engine(gptq_dir):
    from loaders.registry import default_registry

    loader = default_registry().for_path(gptq_dir)
    assert loader.name == "gptq"  # chosen from quantize_config.json
    model = loader.load(gptq_dir, LoadOptions(device="cpu", threads=TEST_THREADS))
    engine = Engine(model)
    yield engine
    engine.close()
    model.close()


def test_a_cuda_kernel_backend_without_cuda_is_refused_before_loading(gptq_dir):
    from loaders.gptq_loader import GPTQLoader, gptqmodel_backend

    assert gptqmodel_backend("triton") in ("gptq_triton", "triton")  # as this gptqmodel version spells it
    with pytest.raises(ModelLoadError, match=r"the GPTQ kernel backend marlin runs on CUDA, but this load runs on cpu "
                                             r"\(.+\); choose auto or torch"):
        GPTQLoader().load(gptq_dir, LoadOptions(device="cpu", extra={"backend": "marlin"}))


def test_quantized_folder_is_gptq_with_the_asked_bits_and_group(gptq_dir):
    config = json.loads((gptq_dir / "quantize_config.json").read_text())
    assert config["bits"] == 4 and config["group_size"] == 64


def test_quantized_model_still_answers_a_simple_fact(gptq_engine):
    model = gptq_engine.model
    assert model.loader == "gptq" and not model.capabilities.lora
    prompt = model.tokenizer.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}])
    result = gptq_engine.generate(GenerationRequest(prompt, SamplingParams(temperature=0, max_new_tokens=12),
                                                    add_special_tokens=False))
    assert "Paris" in result.text


def test_quantized_perplexity_within_a_reasonable_factor_of_fp32(gptq_engine, real_engine):
    from webui.insight import perplexity

    quantized, fp32 = perplexity(gptq_engine, TEXT), perplexity(real_engine, TEXT)
    assert quantized.tokens == fp32.tokens
    # 4 bits cost a 135M model more than a large one: ~1.3-1.6x here on a 30-line calibration set
    assert fp32.ppl < quantized.ppl < fp32.ppl * 2, (quantized.ppl, fp32.ppl)


def test_structured_output_on_the_quantized_model(gptq_engine):
    schema = {"type": "object", "properties": {"answer": {"enum": ["yes", "no"]}}, "required": ["answer"],
              "additionalProperties": False}
    streams = [gptq_engine.submit(GenerationRequest("Is Paris in France?", SamplingParams(
        temperature=1.0, seed=seed, max_new_tokens=48, structured_outputs=form)))
        for seed, form in ((1, {"regex": "(yes|no), [0-9]"}), (2, {"json": schema}))]  # side by side in a batch
    results = [stream.result() for stream in streams]
    assert re.fullmatch("(yes|no), [0-9]", results[0].text) and results[0].finish_reason == "stop"
    assert results[1].finish_reason == "stop", (results[1].text, results[1].finish_reason)
    assert json.loads(results[1].text)["answer"] in ("yes", "no")


def test_bad_group_size_and_bits_are_clear_errors(default_model_dir, tmp_path):
    from webui.quantize import QuantizeError, quantize_gptq

    with pytest.raises(QuantizeError, match="group size 128 does not divide .*576.*--group-size 64"):
        quantize_gptq(default_model_dir, tmp_path / "out", bits=4, group_size=128)
    with pytest.raises(QuantizeError, match="--bits must be one of"):
        quantize_gptq(default_model_dir, tmp_path / "out", bits=5)
    with pytest.raises(ModelLoadError, match="not a Hugging Face model folder"):
        quantize_gptq(tmp_path, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_cli_refuses_to_overwrite_and_names_unknown_models(gptq_dir, tmp_path, capsys):
    from webui.quantize import main

    models = tmp_path / "models"
    models.mkdir()
    shutil.copytree(gptq_dir, models / "SmolLM2-135M-Instruct-gptq-4bit")
    before = sorted(p.name for p in (models / "SmolLM2-135M-Instruct-gptq-4bit").iterdir())
    (tmp_path / "converted").mkdir()
    assert main(["gptq", "SmolLM2-135M-Instruct", "--user-data-dir", str(tmp_path)]) == 2
    assert "exists; pass --force" in capsys.readouterr().err
    assert sorted(p.name for p in (models / "SmolLM2-135M-Instruct-gptq-4bit").iterdir()) == before
    assert not any((tmp_path / "converted").iterdir())  # refused before the slow work (converting the .gguf)
    assert main(["gptq", "no-such-model", "--user-data-dir", str(tmp_path)]) == 2
    assert "unknown model 'no-such-model'" in capsys.readouterr().err


def test_gptq_loader_refuses_a_plain_folder(default_model_dir):
    from loaders.gptq_loader import GPTQLoader

    with pytest.raises(ModelLoadError, match="not a GPTQ model folder.*quantize gptq"):
        GPTQLoader().load(default_model_dir, LoadOptions(device="cpu"))


def test_prefix_cache_on_the_quantized_model_keeps_its_tokens(gptq_engine):
    from webui.engine import EngineConfig

    model = gptq_engine.model
    assert model.capabilities.prefix_cache == "blocks"
    prompt = model.tokenizer.apply_chat_template([{"role": "system", "content": "Answer briefly. " * 10},
                                                  {"role": "user", "content": "What is the capital of France?"}])
    params = SamplingParams(temperature=0, max_new_tokens=6)
    runs = {}
    for name, config in (("off", EngineConfig(prefix_cache_mb=0)), ("on", EngineConfig(prefix_cache_mb=64))):
        engine = Engine(model, config)
        try:
            runs[name] = [engine.generate(GenerationRequest(prompt, params, add_special_tokens=False))
                          for _ in range(2)]
        finally:
            engine.close()
    assert [r.token_ids for r in runs["on"]] == [r.token_ids for r in runs["off"]]
    assert runs["on"][1].usage.cached_tokens >= 48 and runs["off"][1].usage.cached_tokens == 0
