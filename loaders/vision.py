"""Images for vision-language models of the transformers family (LLaVA, Idefics3/SmolVLM, Qwen2-VL, ...).

A prompt with images goes through the model's processor once, when it is submitted: the processor expands each
image's placeholder into the image's tokens and turns the image into pixel values. The sequence's cache holds
them (:class:`ImageInputs`). The forward that first reads one of the prompt's image tokens runs the vision tower
on all of the prompt's images at once, as ``generate`` does, and the image tokens of every chunk the sequence
prefills are fed as those features (``inputs_embeds``) instead of their embeddings. So prompts with images
prefill in chunks, batch with other sequences and decode like any other; the features are dropped once the
prompt's last image token is in the cache. Models with 3D rotary positions (Qwen2-VL) get each prompt token's
(temporal, height, width) position from the model's own ``get_rope_index``; the tokens after the prompt continue
from there. Gemma 3's image tokens attend to each other both ways within each image, as transformers' own mask for
it has them (one image's tokens form a block; OR(causal, same block)): the engine reads an image's tokens in one
forward (:attr:`ImagePrompt.whole_images`), and the forward is given which tokens are images from the sequence's
start (``token_type_ids`` for one sequence in its own cache; the same blocks in the batched forward's 4D mask).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Sequence

from loaders.base import ImagePrompt, PromptImage

log = logging.getLogger(__name__)

IMAGE_FAMILIES = ("llava", "idefics3", "qwen2_vl", "qwen2_5_vl", "gemma3")
"""Model types whose images are exactly their features in the image tokens' places (and, for the Qwen ones, 3D
positions from get_rope_index; for Gemma 3, image tokens that attend to each other both ways). Others differ:
Qwen3-VL adds features inside its layers, LLaVA-NeXT packs tiles with newline features. They load, and take no
images."""
BOTH_WAYS = ("gemma3",)
"""Families whose image tokens attend to all tokens of their own image, before and after them."""
PROCESSOR_FILES = ("processor_config.json", "preprocessor_config.json")
TEXT_KEYS = ("input_ids", "attention_mask", "token_type_ids", "mm_token_type_ids")
"""What a processor returns for the text; the rest are the image inputs of ``get_image_features``."""


def is_vision_folder(path: Path) -> bool:
    """A Hugging Face folder of an image-text-to-text model: a config with a vision part and a processor file."""
    try:
        config = json.loads((Path(path) / "config.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and "vision_config" in config and any(
        (Path(path) / name).is_file() for name in PROCESSOR_FILES)


def load_processor(folder: Path, **kwargs: Any) -> Any:
    """The processor of the vision-language model in ``folder``. Where its video processor cannot be made (Qwen2-VL's
    and Qwen2.5-VL's need torchvision), the processor without it: images and text work, videos do not."""
    from transformers import AutoProcessor

    try:
        return AutoProcessor.from_pretrained(folder, **kwargs)
    except ImportError as exc:
        images_only = _images_only_class(folder)
        if images_only is None:
            raise
        try:
            processor = images_only.from_pretrained(folder, **kwargs)
        except (ImportError, OSError, ValueError, TypeError) as again:
            raise exc from again
        log.warning("%s: its video processor could not be made (%s); it takes images and text, not videos",
                    Path(folder).name, str(exc).strip().split(". ")[0])
        return processor


def _images_only_class(folder: Path) -> Any:
    """The folder's processor class without its video processor, or None where it has none to leave out."""
    from transformers.models.auto.processing_auto import PROCESSOR_MAPPING_NAMES, processor_class_from_name

    try:
        model_type = json.loads((Path(folder) / "config.json").read_text()).get("model_type", "")
    except (OSError, ValueError, AttributeError):
        return None
    name = PROCESSOR_MAPPING_NAMES.get(model_type)
    full = processor_class_from_name(name) if isinstance(name, str) else None
    if full is None or "video_processor" not in full.get_attributes():
        return None

    class ImagesOnly(full):  # type: ignore[valid-type, misc]
        """The processor's sub-processors are the arguments its __init__ names: here, all but the video one."""

        def __init__(self, image_processor: Any = None, tokenizer: Any = None, chat_template: Any = None,
                     **kwargs: Any):
            kwargs.pop("video_processor", None)
            super().__init__(image_processor, tokenizer, None, chat_template=chat_template, **kwargs)

    ImagesOnly.__name__ = ImagesOnly.__qualname__ = f"{full.__name__}WithoutVideos"
    return ImagesOnly


def takes_images(model: Any) -> bool:
    """Whether this workbench feeds images to ``model`` (a loaded image-text-to-text model) as its family needs."""
    return getattr(model.config, "model_type", "") in IMAGE_FAMILIES


class ImageInputs:
    """One sequence's images: the processor's pixel inputs, where the image tokens are in its prompt, their
    features while the prompt is read, and (3D rotary models) each prompt token's position."""

    __slots__ = ("vision", "pixels", "positions", "features", "rope", "rope_delta", "both_ways")

    def __init__(self, vision: "VisionModel", pixels: dict[str, Any], positions: Any, rope: Any, rope_delta: int):
        self.vision, self.pixels, self.positions = vision, pixels, positions  # positions: LongTensor, ascending
        self.features: Any = None  # [image tokens, hidden], computed by the first forward that needs them
        self.rope, self.rope_delta = rope, rope_delta  # [3, prompt tokens] and the offset after the prompt
        self.both_ways = vision.both_ways  # its image tokens attend to their whole image (Gemma 3)

    def blocks(self, length: int) -> Any:
        """[length] each of the sequence's first ``length`` tokens' image block, -1 for text: a block is a run of
        consecutive image tokens (one image), numbered from 0 in order, as transformers numbers them."""
        import torch

        positions = self.positions
        starts = torch.ones_like(positions, dtype=torch.bool)
        starts[1:] = positions[1:] != positions[:-1] + 1
        out = torch.full((length,), -1, dtype=torch.long)
        inside = positions < length
        out[positions[inside]] = (torch.cumsum(starts.long(), 0) - 1)[inside]
        return out

    def image_features(self) -> Any:
        if self.features is None:
            self.features = self.vision.features(self.pixels, int(self.positions.numel()))
        return self.features


class VisionModel:
    """What a loaded vision-language model needs for images: its processor and which tokens are images."""

    def __init__(self, processor: Any, model: Any):
        self.processor, self.model = processor, model
        tokenizer = processor.tokenizer
        self.image_token = str(getattr(processor, "image_token", None) or "<image>")  # a prompt's, per image
        # the token whose places take the image's features: the model's own (Gemma 3's prompts write another one,
        # <start_of_image>, that the processor expands into it)
        feature_token = getattr(model.config, "image_token_id", None)
        self.image_token_id = int(feature_token) if isinstance(feature_token, int) \
            else int(tokenizer.convert_tokens_to_ids(self.image_token))
        self.both_ways = getattr(model.config, "model_type", "") in BOTH_WAYS
        self.mrope = callable(getattr(getattr(model, "model", None), "get_rope_index", None))
        # the text that stands for an image in a prompt, as the model's own chat template writes it
        start, end = "<|vision_start|>", "<|vision_end|>"
        wrapped = self.mrope and all(t in tokenizer.get_vocab() for t in (start, end))
        self.placeholder = f"{start}{self.image_token}{end}" if wrapped else self.image_token

    def encode(self, text: str, images: Sequence[PromptImage], add_special_tokens: bool) -> ImagePrompt:
        """The prompt's ids with each placeholder expanded, each image's span and the inputs for its features."""
        import torch

        found = text.count(self.placeholder)
        if found != len(images):
            raise ValueError(f"the prompt has {found} image placeholder(s) ({self.placeholder}) for {len(images)} "
                             f"image(s); put one placeholder where each image goes")
        if not images:
            raise ValueError("a prompt with images needs at least one image")
        extra = {"return_mm_token_type_ids": True} if self.mrope else {}
        try:
            out = self.processor(text=[text], images=[i.image for i in images], return_tensors="pt",
                                 add_special_tokens=add_special_tokens, **extra)
        except (ValueError, TypeError, OSError) as exc:
            raise ValueError(f"the model's processor could not read the image(s): {exc}") from exc
        ids = [int(t) for t in out["input_ids"][0]]
        positions = torch.tensor([i for i, t in enumerate(ids) if t == self.image_token_id], dtype=torch.long)
        counts = self._counts(images, int(positions.numel()))
        spans, first = [], 0
        for image, count in zip(images, counts):
            spans.append((int(positions[first]), int(positions[first + count - 1]) + 1, image.digest))
            first += count
        pixels = {k: v for k, v in out.items() if k not in TEXT_KEYS}
        rope, delta = self._rope(out, pixels) if self.mrope else (None, 0)
        return ImagePrompt(ids, spans, ImageInputs(self, pixels, positions, rope, delta), whole_images=self.both_ways)

    def image_tokens(self, images: Sequence[PromptImage], total: int | None = None) -> list[int]:
        """How many image tokens each image becomes: the processor's own count from the image's size, else (or
        where that does not add up to ``total``) the image run through the processor alone."""
        sizes = [(i.image.height, i.image.width) for i in images]
        try:
            counts = [int(n) for n in self.processor._get_num_multimodal_tokens(image_sizes=sizes).num_image_tokens]
        except (AttributeError, TypeError, KeyError, NotImplementedError):
            counts = []
        if len(counts) != len(images) or (total is not None and sum(counts) != total):
            counts = [sum(1 for t in self.processor(text=[self.placeholder], images=[i.image])["input_ids"][0]
                          if int(t) == self.image_token_id) for i in images]
        return counts

    def added_tokens(self, images: Sequence[PromptImage]) -> list[int]:
        """How many tokens each image adds to a prompt beyond its placeholder's text: the processor's expansion of
        the placeholder alone with the image (image tokens and the marks around them, which Gemma 3 and Idefics3
        add)."""
        own = len(self.processor.tokenizer(self.placeholder, add_special_tokens=False)["input_ids"])
        return [len(self.processor(text=[self.placeholder], images=[i.image], add_special_tokens=False)["input_ids"][0])
                - own for i in images]

    def _counts(self, images: Sequence[PromptImage], total: int) -> list[int]:
        """How many image tokens each image of a prompt with ``total`` of them became."""
        counts = self.image_tokens(images, total)
        if sum(counts) != total or min(counts) < 1:
            raise ValueError(f"the processor made {total} image tokens, which do not divide among the {len(images)} "
                             f"image(s) as {counts}")
        return counts

    def _rope(self, out: Any, pixels: dict[str, Any]) -> tuple[Any, int]:
        """Each prompt token's 3D rotary position [3, tokens], and the offset of the tokens after the prompt."""
        grids = {k: v for k, v in pixels.items() if k.endswith("grid_thw")}
        positions, deltas = self.model.model.get_rope_index(out["input_ids"], out["mm_token_type_ids"],
                                                            attention_mask=out["attention_mask"], **grids)
        return positions[:, 0].to(self.model.device), int(deltas.reshape(-1)[0])

    def features(self, pixels: dict[str, Any], expected: int) -> Any:
        """The image tokens' features [tokens, hidden] in prompt order, as ``generate`` computes them."""
        import torch

        inputs = {k: v.to(self.model.device) if hasattr(v, "to") else v for k, v in pixels.items()}
        if "pixel_values" in inputs:
            inputs["pixel_values"] = inputs["pixel_values"].to(self.model.dtype)
        pooled = self.model.get_image_features(**inputs, return_dict=True).pooler_output
        features = torch.cat([p.reshape(-1, p.shape[-1]) for p in pooled]) if isinstance(pooled, (list, tuple)) \
            else pooled.reshape(-1, pooled.shape[-1])
        if features.shape[0] != expected:
            raise ValueError(f"the vision tower gave {features.shape[0]} image features for {expected} image tokens")
        return features


def image_feed(model: Any, handles: Sequence[Any], input_ids: Any, places: Any, lengths: Sequence[int]
               ) -> dict[str, Any]:
    """The forward's inputs for a group with sequences that have images: ``inputs_embeds`` where a chunk holds
    image tokens (their features in place of their embeddings) and 3D positions for a 3D rotary model.
    ``input_ids`` [rows, new] left-padded, ``places`` [rows, new] each token's place in its sequence."""
    feed: dict[str, Any] = {"input_ids": input_ids, "position_ids": places}
    width = input_ids.shape[1]
    touched = []
    for row, handle in enumerate(handles):
        images = handle.images
        if images is None:
            continue
        positions = images.positions.to(input_ids.device)
        start = lengths[row]
        inside = (positions >= start) & (positions <= places[row, -1])
        if bool(inside.any()):
            touched.append((row, positions, inside, start))
    if touched:
        embeds = model.get_input_embeddings()(input_ids)
        for row, positions, inside, start in touched:
            images = handles[row].images
            fed = int(places[row, -1]) - start + 1  # this row's real tokens (the rest of the row is padding)
            features = images.image_features()
            embeds[row, width - fed + positions[inside] - start] = features[inside].to(embeds.dtype)
        feed = {"inputs_embeds": embeds, "position_ids": places}
        if len(handles) == 1 and handles[0].images.both_ways:  # alone in its own cache: the model makes the mask
            types = (handles[0].images.blocks(int(places[0, -1]) + 1) >= 0).long()  # from the sequence's start
            feed["token_type_ids"] = types.unsqueeze(0).to(input_ids.device)
    if any(h.images is not None and h.images.rope is not None for h in handles):
        feed["position_ids"] = rope_positions(handles, places)
    return feed


def both_ways_mask(handles: Sequence[Any], places: Any, width: int) -> Any:
    """[rows, 1, new, width] True where a row's new token and a token of its sequence (by place, as the batched
    forward's keys are laid out) belong to the same image of a model whose image tokens attend both ways; None
    where no row has such an image in this step."""
    import torch

    out = None
    for row, handle in enumerate(handles):
        images = handle.images
        if images is None or not images.both_ways or int(places[row, -1]) < int(images.positions[0]):
            continue
        blocks = images.blocks(width).to(places.device)
        query = blocks[places[row]]  # [new]
        same = (query.unsqueeze(1) == blocks.unsqueeze(0)) & (query >= 0).unsqueeze(1)  # [new, width]
        if out is None:
            out = torch.zeros((len(handles), 1, places.shape[1], width), dtype=torch.bool, device=places.device)
        out[row, 0] = same
    return out


def rope_positions(handles: Sequence[Any], places: Any) -> Any:
    """[3, rows, new] positions: a prompt token with images at its 3D position, any other token at its place
    (shifted by its sequence's offset after a prompt with images)."""
    out = places.unsqueeze(0).repeat(3, 1, 1)
    for row, handle in enumerate(handles):
        images = handle.images
        if images is None or images.rope is None:
            continue
        rope = images.rope
        row_places = places[row]
        in_prompt = row_places < rope.shape[1]
        out[:, row] = row_places + images.rope_delta
        out[:, row, in_prompt] = rope[:, row_places[in_prompt]]
    return out


def done_with_features(handle: Any) -> None:
    """Once a sequence's last image token is in its cache, its features are not needed again."""
    images = handle.images
    if images is not None and images.features is not None and handle.length > int(images.positions[-1]):
        images.features = None
