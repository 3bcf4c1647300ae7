"""Tiny random vision-language models built from configs, saved as folders a Catalog loads like real ones.

Each has the default model's real tokenizer (SmolLM2's, which SmolVLM uses too) with its family's image tokens
added, and an image processor made here with tiny sizes (32-pixel tiles, 8-pixel patches): nothing comes from a
hub. Weights are random from a seed, so outputs are meaningless but deterministic.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any, Callable

TEXT = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            max_position_embeddings=1024, bos_token_id=1, eos_token_id=2, pad_token_id=2)
IDEFICS3_TOKENS = ["<fake_token_around_image>", "<image>", "<end_of_utterance>", "<global-img>",
                   *[f"<row_{i}_col_{j}>" for i in range(1, 7) for j in range(1, 7)]]


def _tokenizer(default_model_dir: Path, tokens: list[str]) -> Any:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(default_model_dir)
    tokenizer.add_tokens(tokens, special_tokens=True)
    return tokenizer


def tiny_llava(default_model_dir: Path, out: Path, seed: int = 7) -> Path:
    """LLaVA: a CLIP vision tower (one 32-pixel tile, 16 patches: 16 image tokens) and a Llama."""
    from transformers import (CLIPImageProcessorPil, CLIPVisionConfig, LlamaConfig, LlavaConfig,
                              LlavaForConditionalGeneration, LlavaProcessor)

    tokenizer = _tokenizer(default_model_dir, ["<image>"])
    images = CLIPImageProcessorPil(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})
    processor = LlavaProcessor(image_processor=images, tokenizer=tokenizer, patch_size=8,
                               vision_feature_select_strategy="default", image_token="<image>",
                               num_additional_image_tokens=1, chat_template=tokenizer.chat_template)
    vision = CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                              image_size=32, patch_size=8, projection_dim=32)
    config = LlavaConfig(vision_config=vision, text_config=LlamaConfig(vocab_size=len(tokenizer), **TEXT),
                         image_token_id=tokenizer.convert_tokens_to_ids("<image>"), vision_feature_layer=-1,
                         vision_feature_select_strategy="default")
    return _save(LlavaForConditionalGeneration, config, processor, out, seed, louder="multi_modal_projector")


def tiny_idefics3(default_model_dir: Path, out: Path, seed: int = 11) -> Path:
    """Idefics3 (SmolVLM's architecture): a SigLIP tower on 32-pixel tiles (an image is split into tiles plus
    the whole image), pixel shuffle by 2 (4 image tokens a tile) and a Llama."""
    from transformers import (Idefics3Config, Idefics3ForConditionalGeneration, Idefics3ImageProcessorPil,
                              Idefics3Processor, Idefics3VisionConfig, LlamaConfig)

    tokenizer = _tokenizer(default_model_dir, IDEFICS3_TOKENS)
    images = Idefics3ImageProcessorPil(do_image_splitting=True, size={"longest_edge": 64},
                                    max_image_size={"longest_edge": 32})
    processor = Idefics3Processor(image_processor=images, tokenizer=tokenizer, image_seq_len=4,
                                  chat_template=tokenizer.chat_template)
    vision = Idefics3VisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                                  image_size=32, patch_size=8)
    config = Idefics3Config(vision_config=vision, text_config=LlamaConfig(vocab_size=len(tokenizer), **TEXT),
                            scale_factor=2, image_token_id=tokenizer.convert_tokens_to_ids("<image>"))
    return _save(Idefics3ForConditionalGeneration, config, processor, out, seed)


def sharpened(model: Any, factor: float = 6.0) -> Any:
    """``model`` with its text layers' query and key weights scaled up: at a random model's initial scale every
    token attends to all others almost equally, so a token at a wrong position would change nothing."""
    import torch

    with torch.no_grad():
        for name, weight in model.named_parameters():
            if ("q_proj" in name or "k_proj" in name) and ("language_model" in name or "text_model" in name):
                weight.mul_(factor)
    return model


def _save(model_class: Callable[[Any], Any], config: Any, processor: Any, out: Path, seed: int,
          louder: str = "", prepare: Callable[[Any], None] | None = None) -> Path:
    """Save a random model and its processor; ``louder``: a module whose weights are scaled up so its outputs
    (the image features) weigh as much as the token embeddings (else a misplaced feature might change nothing);
    ``prepare``: what else to do to the model's weights before it is saved."""
    import torch

    torch.manual_seed(seed)
    model = sharpened(model_class(config))
    if louder:
        with torch.no_grad():
            for weight in getattr(model.model, louder).parameters():
                weight.mul_(3)
    if prepare is not None:
        with torch.no_grad():
            prepare(model)
    model.generation_config.eos_token_id = 2
    model.save_pretrained(out)
    processor.save_pretrained(out)
    return out


def png(color: tuple[int, int, int], size: tuple[int, int] = (40, 30), stripe: int = 0) -> bytes:
    """A small PNG: a pattern around ``color`` that differs from patch to patch (so features differ by place),
    with a stripe of the opposite colour ``stripe`` pixels wide."""
    from PIL import Image

    image = Image.new("RGB", size)
    r, g, b = color
    image.putdata([((r + 37 * x) % 256, (g + 53 * y) % 256, (b + 17 * (x + y)) % 256) if x >= stripe
                   else (255 - r, 255 - g, 255 - b) for y in range(size[1]) for x in range(size[0])])
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def noise_png(size: tuple[int, int], seed: int = 0) -> bytes:
    """A PNG of random pixels (which do not compress: about 3 bytes a pixel)."""
    import random

    from PIL import Image

    image = Image.frombytes("RGB", size, random.Random(seed).randbytes(size[0] * size[1] * 3))
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


QWEN2_VL_TOKENS = ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]
QWEN_VISION = dict(hidden_size=32, num_heads=4, patch_size=8, spatial_merge_size=2, temporal_patch_size=2)
QWEN_FAMILIES = {  # model_type: (the vision config beyond QWEN_VISION, the processor class real folders name)
    "qwen2_vl": (dict(embed_dim=32, mlp_ratio=2), "Qwen2VLProcessor"),
    # windows of 4x4 patches (2x2 image tokens) in the first layer, full attention in the second
    "qwen2_5_vl": (dict(intermediate_size=64, out_hidden_size=32, window_size=32, fullatt_block_indexes=[1]),
                   "Qwen2_5_VLProcessor"),
}


def tiny_qwen_vl(default_model_dir: Path, out: Path, family: str = "qwen2_vl", seed: int = 13,
                 for_llamacpp: bool = False) -> Path:
    """Qwen2-VL or Qwen2.5-VL (``family``) as a folder laid out as the real ones are: a vision tower on 8-pixel
    patches merged 2x2, a text model with 3D rotary positions, the tokenizer, and the image processor's
    preprocessor_config.json naming the processor class. Written piece by piece: transformers' processor cannot
    be made (nor saved) without its video processor, which needs torchvision; the loader makes it without one.
    ``for_llamacpp``: three vision layers, not two (llama.cpp's converter maps the merger's layers by the tower's
    layer numbers), and no padding token (transformers zeroes its embedding, and llama.cpp's Qwen2-VL gives NaN
    logits for an all-zero embedding: the chat template's <|im_end|> is the pad token here)."""
    import json

    import torch
    from transformers import AutoConfig, AutoModelForImageTextToText, Qwen2VLImageProcessorPil

    vision_extra, processor_class = QWEN_FAMILIES[family]
    tokenizer = _tokenizer(default_model_dir, QWEN2_VL_TOKENS)
    ids = {name: tokenizer.convert_tokens_to_ids(token) for name, token in (
        ("vision_start_token_id", "<|vision_start|>"), ("vision_end_token_id", "<|vision_end|>"),
        ("image_token_id", "<|image_pad|>"), ("video_token_id", "<|video_pad|>"))}
    text = dict(TEXT, vocab_size=len(tokenizer),
                rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 1, 1]})
    if for_llamacpp:
        text["pad_token_id"] = None
    vision = dict(QWEN_VISION, **vision_extra, depth=3 if for_llamacpp else 2)
    config = AutoConfig.for_model(family, text_config=text, vision_config=vision, **ids)
    torch.manual_seed(seed)
    model = sharpened(AutoModelForImageTextToText.from_config(config))
    model.generation_config.eos_token_id = 2
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    Qwen2VLImageProcessorPil(patch_size=8, merge_size=2, temporal_patch_size=2, min_pixels=16 * 16,
                             max_pixels=64 * 64).save_pretrained(out)
    settings = out / "preprocessor_config.json"
    settings.write_text(json.dumps(dict(json.loads(settings.read_text()), processor_class=processor_class)))
    return out


GEMMA3_PROJECTION = 0.05
GEMMA3_IMAGE_TOKENS = 16
GEMMA3_TOKENS = {"boi_token": "<start_of_image>", "eoi_token": "<end_of_image>", "image_token": "<image_soft_token>"}


def tiny_gemma3(default_model_dir: Path, out: Path, seed: int = 17, sliding: bool = True) -> Path:
    """Gemma 3: a SigLIP tower on one 32-pixel tile (16 patches: 16 image tokens, which attend to each other both
    ways), and a Gemma 3 text model with a sliding-window layer (window 12) and a global one, as real ones have
    (so it runs one sequence at a time); without ``sliding``, two global layers (so it batches)."""
    from transformers import (AutoTokenizer, Gemma3Config, Gemma3ForConditionalGeneration, Gemma3ImageProcessorPil,
                              Gemma3Processor, SiglipVisionConfig)

    tokenizer = AutoTokenizer.from_pretrained(default_model_dir, extra_special_tokens=GEMMA3_TOKENS)
    tokenizer.add_tokens(list(GEMMA3_TOKENS.values()), special_tokens=True)
    images = Gemma3ImageProcessorPil(size={"height": 32, "width": 32})
    processor = Gemma3Processor(image_processor=images, tokenizer=tokenizer, image_seq_length=GEMMA3_IMAGE_TOKENS,
                                chat_template=tokenizer.chat_template)
    ids = {f"{name}_index": tokenizer.convert_tokens_to_ids(token) for name, token in (
        ("boi_token", GEMMA3_TOKENS["boi_token"]), ("eoi_token", GEMMA3_TOKENS["eoi_token"]),
        ("image_token", GEMMA3_TOKENS["image_token"]))}
    text = dict(TEXT, vocab_size=len(tokenizer), head_dim=8, query_pre_attn_scalar=8, sliding_window=12,
                layer_types=["sliding_attention" if sliding else "full_attention", "full_attention"])
    vision = SiglipVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                                image_size=32, patch_size=8)
    config = Gemma3Config(text_config=text, vision_config=vision.to_dict(), mm_tokens_per_image=GEMMA3_IMAGE_TOKENS,
                          **ids)
    return _save(Gemma3ForConditionalGeneration, config, processor, out, seed, prepare=_gemma3_projection)


def _gemma3_projection(model: Any, scale: float = GEMMA3_PROJECTION) -> None:
    """Gemma 3 starts its image projection at zeros (every image would be nothing): random, the features a few
    times the (scaled) token embeddings."""
    weight = model.model.multi_modal_projector.mm_input_projection_weight
    weight.normal_(0.0, scale)


GGUF_TEXT_ARCHITECTURES = {"idefics3": "VLlama3ForCausalLM"}
"""The text model's class a real folder of each family names in its text_config (llama.cpp's converter picks
the text part by it); the tiny folders are made from configs, which leave it out."""


def gguf_with_projector(folder: Path, out: Path, converter: Path) -> Path:
    """The vision-language model ``folder`` as llama.cpp reads it: ``out`` holds the language model's .gguf and
    its projector, ``mmproj-<name>.gguf``, side by side as a user keeps them (both f32, so their outputs are
    transformers' own up to rounding), made by llama.cpp's own converter (``converter``). Returns the model's
    .gguf."""
    import json
    import shutil
    import subprocess
    import sys

    source = out.with_name(out.name + "-source")
    shutil.copytree(folder, source, dirs_exist_ok=True)
    config = json.loads((source / "config.json").read_text())
    if config["model_type"] in GGUF_TEXT_ARCHITECTURES:
        config["text_config"].setdefault("architectures", [GGUF_TEXT_ARCHITECTURES[config["model_type"]]])
    (source / "config.json").write_text(json.dumps(config))
    out.mkdir(parents=True, exist_ok=True)
    model, projector = out / f"{folder.name}.gguf", out / f"mmproj-{folder.name}.gguf"
    for target, extra in ((model, []), (projector, ["--mmproj"])):
        done = subprocess.run([sys.executable, str(converter), str(source), "--outfile", str(target),
                               "--outtype", "f32", *extra], capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"llama.cpp's converter failed on {folder.name}:\n{done.stderr[-3000:]}")
    shutil.rmtree(source)
    return model
