"""Images through the llama.cpp loader: a .gguf with its projector (mmproj) beside it, as llama.cpp's own converter
makes them from tiny random Idefics3 and Qwen2-VL folders (Idefics3 splits an image into tiles; Qwen2-VL's image
tokens take 2D positions, fewer than its tokens, so what follows an image sits earlier). The engine's greedy tokens
for images and text equal transformers' own ``generate`` on the folder the files were made from (prompt ids
included), alone and batched with text and other image requests; a model loaded without its projector, or with
another model's, says so."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from loaders.base import LoadOptions, ModelLoadError
from loaders.options import LoadOptionError
from loaders.registry import default_registry
from tests.conftest import TEST_THREADS
from tests.vision_models import png
from webui.config import AppConfig
from webui.engine import Engine, EngineConfig, GenerationRequest, InvalidParameter, SamplingParams
from webui.images import read_image
from webui.models import ModelManager

pytestmark = pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None,
                                reason="the llamacpp extra is not installed (python launch.py install llamacpp)")

# one colour each: llama.cpp and transformers resize images with different filters, which agree on flat areas
RED = png((200, 30, 30), size=(64, 64), stripe=64)
BLUE = png((20, 40, 220), size=(64, 64), stripe=64)
NEW = 8


@pytest.fixture(scope="module", params=["idefics3", "qwen2_vl"])
def files(request) -> tuple[Path, Path]:
    """(the source folder, the .gguf with its projector beside it)."""
    return request.getfixturevalue(f"tiny_{request.param}_gguf")


@pytest.fixture(scope="module")
def manager(files, tmp_path_factory):
    """A models folder holding the .gguf and its projector side by side, as a user keeps them."""
    config = AppConfig(user_data_dir=tmp_path_factory.mktemp("data"), threads=TEST_THREADS, device="cpu")
    config.make_dirs()
    for file in files[1].parent.iterdir():
        (config.models_dir / file.name).symlink_to(file)
    engine = Engine()
    manager = ModelManager(config, engine, default_registry())
    yield manager
    manager.unload()
    engine.close()


@pytest.fixture(scope="module")
def model(manager, files):
    return manager.load(files[1].name)


@pytest.fixture(scope="module")
def hf_model(files):
    from loaders.transformers_loader import TransformersLoader

    model = TransformersLoader().load(files[0], LoadOptions(device="cpu", dtype="float32", threads=TEST_THREADS))
    yield model
    model.close()


def chat(model, text: str, images: int = 1) -> str:
    return model.tokenizer.apply_chat_template([{"role": "user", "content": model.image_placeholder * images + text}])


def request(model, text: str, images: list[bytes]) -> GenerationRequest:
    return GenerationRequest(chat(model, text, len(images)), SamplingParams(temperature=0, max_new_tokens=NEW),
                             add_special_tokens=False, images=tuple(read_image(b, 2**24) for b in images))


def reference(hf_model, text: str, images: list[bytes]) -> tuple[list[int], list[int]]:
    """(prompt ids, greedy tokens) of transformers' own processor and ``generate`` on the source folder."""
    import torch

    prompt = chat(hf_model, text, len(images))
    inputs = hf_model.vision.processor(text=[prompt], images=[read_image(b, 2**24).image for b in images],
                                       return_tensors="pt", add_special_tokens=False)
    with torch.inference_mode():
        out = hf_model.model.generate(**inputs, max_new_tokens=NEW, do_sample=False, eos_token_id=None)
    return inputs["input_ids"][0].tolist(), out[0, inputs["input_ids"].shape[1]:].tolist()


def test_the_models_folder_lists_the_model_not_its_projector(manager, files):
    names = [e.name for e in manager.catalog.available()]
    assert files[1].name in names
    assert not [n for n in names if n.startswith("mmproj")]


def test_the_model_loads_with_its_projector_and_takes_images(model):
    assert model.loader == "llamacpp"
    assert model.capabilities.images and model.image_placeholder == "<__media__>"
    assert model.projector.path.name.startswith("mmproj-")


def test_prompt_ids_and_greedy_tokens_equal_transformers(model, hf_model):
    prompt = request(model, "What is this?", [RED])
    ours = model.encode_images(str(prompt.prompt), prompt.images, False)
    ids, expected = reference(hf_model, "What is this?", [RED])
    assert ours.ids == ids  # the image's tokens framed as the processor frames them
    engine = Engine(model)
    try:
        result = engine.generate(prompt)
        other = engine.generate(request(model, "What is this?", [BLUE]))
    finally:
        engine.close()
    assert result.token_ids == expected
    assert result.usage.prompt_tokens == len(ids)
    assert other.token_ids == reference(hf_model, "What is this?", [BLUE])[1] != expected  # it sees the image


def test_image_tokens_count_what_images_add_to_a_prompt(model):
    """The text's tokens and each image's count make the prompt's tokens, up to a token per image where the
    marker's text merges with what is beside it ("><" between two markers is one token)."""
    images = [read_image(RED, 2**24), read_image(BLUE, 2**24)]
    text = chat(model, "Which differs?", 2)
    counted = len(model.tokenizer.encode(text, add_special_tokens=False)) + sum(model.image_tokens(images))
    assert abs(counted - len(model.encode_images(text, images, False).ids)) <= len(images)


def test_batched_with_text_and_other_images_equals_transformers(model, hf_model):
    """Three requests in one running batch (an image, text only, two images), prompts read in small chunks; the
    text-only one equals its own greedy run alone."""
    asks = [("Describe it.", [RED]), ("Just text here, no image at all.", []), ("Which differs?", [BLUE, RED])]
    engine = Engine(model, EngineConfig(prefill_chunk=7, max_batch_tokens=40))
    try:
        alone = engine.generate(request(model, asks[1][0], []))
        streams = [engine.submit(request(model, text, images)) for text, images in asks]
        results = [s.result() for s in streams]
    finally:
        engine.close()
    for (text, images), result in zip(asks, results):
        expected = reference(hf_model, text, images)[1] if images else alone.token_ids
        assert result.token_ids == expected, text


def test_cells_holding_an_image_are_never_taken_by_another_prompt(model):
    """llama.cpp keeps a finished sequence's cells for a prompt that starts the same way; a sequence's image tokens
    never match, so a text prompt takes over only the cells before the image, and an image prompt none."""
    prompt = request(model, "What is this?", [RED])
    image_start = model.encode_images(str(prompt.prompt), prompt.images, False).spans[0][0]
    fresh = Engine(model, EngineConfig(prefix_cache_mb=0))
    try:
        text_alone = fresh.generate(request(model, "What is this?", []))
    finally:
        fresh.close()
    model.drop_prefixes()  # (the model kept that prompt's cells)
    engine = Engine(model)
    try:
        first = engine.generate(prompt)
        text = engine.generate(request(model, "What is this?", []))
        again = engine.generate(request(model, "What is this?", [RED]))
    finally:
        engine.close()
    assert 0 < text.usage.cached_tokens <= image_start and text.token_ids == text_alone.token_ids
    assert again.usage.cached_tokens == 0 and again.token_ids == first.token_ids


@pytest.fixture
def idefics3_gguf(tiny_idefics3_gguf) -> Path:
    return tiny_idefics3_gguf[1]


def test_without_its_projector_the_model_takes_no_images(idefics3_gguf):
    from loaders.llamacpp_loader import LlamaCppLoader

    model = LlamaCppLoader().load(idefics3_gguf, LoadOptions(threads=TEST_THREADS, extra={"mmproj": "none"}))
    engine = Engine(model)
    try:
        assert not model.capabilities.images
        with pytest.raises(InvalidParameter, match="takes no images"):
            engine.submit(GenerationRequest("<__media__>hi", SamplingParams(max_new_tokens=2),
                                            images=(read_image(RED, 2**24),)))
    finally:
        engine.close()
        model.close()


def test_a_projector_for_another_model_is_refused(idefics3_gguf, tmp_path):
    """The default model's .gguf beside the tiny model's projector: their embedding sizes differ."""
    from loaders.llamacpp_loader import LlamaCppLoader
    from webui.catalog import default_model_gguf

    (tmp_path / "smollm2.gguf").symlink_to(default_model_gguf())
    (tmp_path / "mmproj-tiny.gguf").symlink_to(idefics3_gguf.with_name(f"mmproj-{idefics3_gguf.name}"))
    with pytest.raises(ModelLoadError, match="made for another model"):
        LlamaCppLoader().load(tmp_path / "smollm2.gguf", LoadOptions(threads=TEST_THREADS))


@pytest.mark.parametrize("value, message", [("../mmproj.gguf", "a file name in the model's folder"),
                                            ("missing.gguf", "no projector file 'missing.gguf'"),
                                            ("MODEL", "not a projector")])
def test_a_bad_mmproj_option_says_what_to_set(idefics3_gguf, value, message):
    from loaders.llamacpp_loader import LlamaCppLoader

    value = idefics3_gguf.name if value == "MODEL" else value
    with pytest.raises(LoadOptionError, match=message) as error:
        LlamaCppLoader().load(idefics3_gguf, LoadOptions(threads=TEST_THREADS, extra={"mmproj": value}))
    assert error.value.option == "mmproj"


def test_a_projector_is_not_a_model(idefics3_gguf):
    from loaders.llamacpp_loader import LlamaCppLoader

    projector = idefics3_gguf.with_name(f"mmproj-{idefics3_gguf.name}")
    assert LlamaCppLoader().match(projector) == 0
    with pytest.raises(ModelLoadError, match="is an image projector"):
        LlamaCppLoader().load(projector, LoadOptions(threads=TEST_THREADS))
