"""Images in prompts of vision-language models: our engine's greedy tokens equal transformers' own ``generate``
with the same processor inputs, alone and batched with text and other image requests; the prefix cache keys
image tokens by the image's content; usage counts image tokens (tiny random LLaVA, Idefics3, Qwen2-VL, Qwen2.5-VL
and Gemma 3 folders, loaded as a user's are; Gemma 3's image tokens attend to each other both ways, and it runs
one sequence at a time with its sliding-window layer, batched without)."""

from __future__ import annotations

import pytest

from loaders.registry import default_registry
from tests.conftest import TEST_THREADS
from tests.vision_models import png
from webui.config import AppConfig
from webui.engine import Engine, EngineConfig, GenerationRequest, InvalidParameter, SamplingParams
from webui.images import read_image
from webui.models import ModelManager

RED = png((200, 30, 30), stripe=5)
BLUE = png((20, 40, 220), size=(30, 44), stripe=9)
NEW = 10


@pytest.fixture(scope="module", params=["llava", "idefics3", "qwen2_vl", "qwen2_5_vl", "gemma3", "gemma3_global"])
def vlm(request, tmp_path_factory):
    """The tiny model's folder loaded as a user's would be: found in the models folder, loaded by the manager."""
    config = AppConfig(user_data_dir=tmp_path_factory.mktemp("data"), threads=TEST_THREADS, device="cpu")
    config.make_dirs()
    folder = request.getfixturevalue(f"tiny_{request.param}_dir")
    (config.models_dir / folder.name).symlink_to(folder, target_is_directory=True)
    engine = Engine()
    manager = ModelManager(config, engine, default_registry())
    yield manager.load(folder.name)
    manager.unload()
    engine.close()


def chat(model, text: str, images: int = 1) -> str:
    return model.tokenizer.apply_chat_template([{"role": "user", "content": model.image_placeholder * images + text}])


def greedy(n: int = NEW) -> SamplingParams:
    return SamplingParams(temperature=0, max_new_tokens=n)


def reference(model, prompt: str, images: list[bytes], n: int = NEW) -> list[int]:
    """transformers' own greedy generate on the processor's inputs for the same prompt and images."""
    import torch

    inputs = model.vision.processor(text=[prompt], images=[read_image(b, 2**24).image for b in images] or None,
                                    return_tensors="pt", add_special_tokens=False)
    with torch.inference_mode():
        out = model.model.generate(**inputs, max_new_tokens=n, do_sample=False, eos_token_id=None)
    return out[0, inputs["input_ids"].shape[1]:].tolist()


def request(model, text: str, images: list[bytes], n: int = NEW) -> GenerationRequest:
    return GenerationRequest(chat(model, text, len(images)), greedy(n), add_special_tokens=False,
                             images=tuple(read_image(b, 2**24) for b in images))


def test_the_model_says_it_takes_images(vlm, tiny_model):
    assert vlm.capabilities.images and vlm.image_placeholder
    assert not tiny_model.capabilities.images


def test_alone_equals_generate_and_usage_counts_image_tokens(vlm):
    engine = Engine(vlm, EngineConfig(prefix_cache_mb=0))
    try:
        result = engine.generate(request(vlm, "What is this?", [RED]))
    finally:
        engine.close()
    assert result.token_ids == reference(vlm, chat(vlm, "What is this?"), [RED])
    expected = vlm.vision.processor(text=[chat(vlm, "What is this?")], images=[read_image(RED, 2**24).image],
                                    add_special_tokens=False)["input_ids"][0]
    assert result.usage.prompt_tokens == len(expected) > len(vlm.tokenizer.encode(chat(vlm, "What is this?")))


def test_image_tokens_count_what_images_add_to_a_prompt(vlm):
    """What a chat is fitted by: the text's tokens and each image's count make the prompt's tokens, up to a token
    per image where the marks around an image merge with the text beside it (Gemma 3's blank lines)."""
    images = [read_image(RED, 2**24), read_image(BLUE, 2**24)]
    text = chat(vlm, "Which differs?", 2)
    counted = len(vlm.tokenizer.encode(text, add_special_tokens=False)) + sum(vlm.image_tokens(images))
    assert abs(counted - len(vlm.encode_images(text, images, False).ids)) <= len(images)


def test_batched_with_text_and_other_images_equals_generate(vlm):
    """Three requests in one running batch (an image, text only, two other images), their prompts read in
    7-token chunks so the images' tokens are split across steps and rows."""
    engine = Engine(vlm, EngineConfig(prefix_cache_mb=0, prefill_chunk=7, max_batch_tokens=24))
    asks = [("Describe it.", [RED]), ("Just text here, no image at all.", []), ("Which differs?", [BLUE, RED])]
    try:
        streams = [engine.submit(request(vlm, text, images) if images else GenerationRequest(
            vlm.tokenizer.apply_chat_template([{"role": "user", "content": text}]), greedy(),
            add_special_tokens=False)) for text, images in asks]
        results = [s.result() for s in streams]
    finally:
        engine.close()
    for (text, images), result in zip(asks, results):
        prompt = chat(vlm, text, len(images)) if images else vlm.tokenizer.apply_chat_template(
            [{"role": "user", "content": text}])
        assert result.token_ids == reference(vlm, prompt, images), text


def test_prefix_cache_keys_image_tokens_by_content(vlm):
    if vlm.capabilities.prefix_cache != "blocks":
        pytest.skip("a model with sliding-window layers caches no prefixes")
    engine = Engine(vlm, EngineConfig(prefix_cache_mb=64))
    try:
        first = engine.generate(request(vlm, "What is this?", [RED]))
        again = engine.generate(request(vlm, "What is this?", [RED]))
        other = engine.generate(request(vlm, "What is this?", [BLUE]))
    finally:
        engine.close()
    prompt = request(vlm, "What is this?", [RED])
    ids = vlm.encode_images(str(prompt.prompt), prompt.images, False)
    image_start = ids.spans[0][0]
    assert first.usage.cached_tokens == 0
    assert again.usage.cached_tokens > ids.spans[0][1]  # the image's blocks were found again
    assert again.token_ids == first.token_ids
    assert other.usage.cached_tokens <= image_start  # only the blocks before the image: never another's
    assert other.token_ids == reference(vlm, chat(vlm, "What is this?"), [BLUE])


def test_images_for_a_text_only_model_are_refused(tiny_model):
    engine = Engine(tiny_model)
    try:
        with pytest.raises(InvalidParameter, match="takes no images"):
            engine.submit(GenerationRequest("<image>hi", greedy(), images=(read_image(RED, 2**24),)))
    finally:
        engine.close()


def test_placeholders_must_pair_with_images(vlm):
    engine = Engine(vlm)
    try:
        with pytest.raises(ValueError, match="1 image placeholder.*2 image"):
            engine.submit(GenerationRequest(chat(vlm, "two?"), greedy(), add_special_tokens=False,
                                            images=(read_image(RED, 2**24), read_image(BLUE, 2**24))))
    finally:
        engine.close()


def test_a_qwen_folder_loads_without_a_video_processor(tiny_qwen2_vl_dir, caplog):
    """torchvision is not installed here, so transformers cannot make the Qwen processor's video part: the loader
    makes it without one and says so once."""
    import importlib.util

    from tests.conftest import load_model

    if importlib.util.find_spec("torchvision") is not None:
        pytest.skip("torchvision is installed, so the processor has its video part")

    with caplog.at_level("WARNING", logger="loaders.vision"):
        model = load_model(tiny_qwen2_vl_dir)
    try:
        said = [r.getMessage() for r in caplog.records if "not videos" in r.getMessage()]
        assert len(said) == 1 and "video processor could not be made" in said[0]
        assert model.capabilities.images and not hasattr(model.vision.processor, "video_processor")
    finally:
        model.close()


def test_a_cached_prefix_that_ends_inside_an_image_resumes_exactly(tiny_gemma3_global_dir):
    """Gemma 3 (global layers: it caches prefixes): the cached blocks of an image whose tokens attended to each
    other both ways are exact for the same image, so a prompt that shares the image but not the text after it
    starts inside the image and reads the image's rest together."""
    from tests.conftest import load_model

    model = load_model(tiny_gemma3_global_dir)
    engine = Engine(model, EngineConfig(prefix_cache_mb=64, prefix_block_tokens=16))
    try:
        engine.generate(request(model, "What is this?", [RED]))
        later = engine.generate(request(model, "Why?", [RED]))
        prompt = request(model, "Why?", [RED])
        first, end, _ = model.encode_images(str(prompt.prompt), prompt.images, False).spans[0]
        assert first < later.usage.cached_tokens < end
        assert later.token_ids == reference(model, chat(model, "Why?"), [RED])
    finally:
        engine.close()
        model.close()
