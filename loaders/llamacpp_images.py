"""Images for llama.cpp models with a projector file (``mmproj``), through llama.cpp's multimodal library (mtmd).

A GGUF vision-language model comes as two files: the language model and its projector (``mmproj-*.gguf``: the
vision tower and the projection into the model's embeddings), kept side by side. mtmd reads a prompt with images
into chunks: text chunks of token ids, and one chunk per image holding its tokens as the model's family frames
them (each image marker, mtmd's "<__media__>", is this model's image placeholder). A sequence's image is encoded
by the vision tower when the forward first reaches it; its embeddings go into the sequence's cells with the
positions mtmd gives them (M-RoPE models such as Qwen2-VL take 2D positions, fewer than their tokens, so the
tokens after an image sit that much earlier) and, where the image's tokens attend to each other both ways
(Gemma 3), with causal attention off for that decode. Image tokens are decoded per sequence; text tokens of all
running sequences still share one llama_decode.
"""

from __future__ import annotations

import ctypes
import threading
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from loaders.base import ImagePrompt, LoaderError, ModelLoadError, PromptImage
from loaders.gguf_header import is_projector
from loaders.options import LoadOptionError

AUTO, NONE = "auto", "none"
IMAGE_TOKEN_NAMES = ("<image_soft_token>", "<|image_pad|>", "<image>", "<|image|>", "[IMG]")
"""Vocabulary entries that stand for an image token; a prompt's ids hold the first one found at each image token's
place (the sequence's own record of its cells holds IMAGE_CELL there)."""
IMAGE_CELL = -1
"""What a sequence's record of its cells holds for an image token: no text prompt matches it, so no prompt takes
over cells that hold an image."""


def find_projector(model: Path, value: str) -> Path | None:
    """The projector for the .gguf ``model``: ``value`` "auto" finds the projector file beside it (the one, or the
    one whose name holds the model's), "none" loads no projector, anything else names a file in its folder."""
    if value == NONE:
        return None
    folder = model.parent
    if value != AUTO:
        if Path(value).name != value:
            raise LoadOptionError("mmproj", f"mmproj takes a file name in the model's folder ({folder}), not a path: "
                                            f"got {value!r}")
        path = folder / value
        if not path.is_file():
            raise LoadOptionError("mmproj", f"no projector file '{value}' in {folder}; put the model's mmproj .gguf "
                                            "beside it, or set mmproj to auto or none")
        if not is_projector(path):
            raise LoadOptionError("mmproj", f"'{value}' is not a projector (mmproj) file; its header says it is a "
                                            "model of its own")
        return path
    found = sorted(p for p in folder.glob("*.gguf") if p != model and is_projector(p))
    if len(found) > 1:
        named = [p for p in found if model.stem.lower() in p.stem.lower()]
        if len(named) != 1:
            raise LoadOptionError("mmproj", f"{len(found)} projector files beside {model.name} "
                                            f"({', '.join(p.name for p in found)}); set mmproj to the one made for "
                                            "this model, or none")
        found = named
    return found[0] if found else None


class CacheFull(LoaderError):
    """No room in the KV cache for an image's tokens (llama_process code 1)."""


@dataclass
class ImageChunk:
    """An image's chunk in a prompt: where its tokens are and what mtmd needs to decode them."""

    first: int
    end: int
    chunk: Any  # mtmd_input_chunk_p (owned by the prompt's chunks)
    n_pos: int  # positions its tokens take (fewer than its tokens for M-RoPE models)


class PromptChunks:
    """One prompt's mtmd chunks (freed with this object) and its images' chunks in order."""

    def __init__(self, mtmd: Any, chunks: Any):
        self.chunks = chunks
        self.images: list[ImageChunk] = []
        weakref.finalize(self, mtmd.mtmd_input_chunks_free, chunks)  # (at exit too, while mtmd is still there)


class Projector:
    """A loaded projector (mtmd context) for one llama.cpp model and context."""

    def __init__(self, lib: Any, path: Path, model: Any, ctx: Any, threads: int, gpu: bool):
        from llama_cpp import _logger, mtmd_cpp

        self._lib, self._mtmd, self.path = lib, mtmd_cpp, path
        mtmd_cpp.mtmd_helper_log_set(_logger.llama_log_callback, None)  # quiet, as llama.cpp's own log is
        params = mtmd_cpp.mtmd_context_params_default()
        params.use_gpu, params.n_threads, params.print_timings, params.warmup = gpu, threads, False, False
        self._ctx = mtmd_cpp.mtmd_init_from_file(str(path).encode(), model, params)
        if not self._ctx:
            raise ModelLoadError(f"llama.cpp could not read the projector '{path.name}' for this model: not an "
                                 "mmproj .gguf, or one made for another model (its embedding size must match)")
        if not mtmd_cpp.mtmd_support_vision(self._ctx):
            self.close()
            raise ModelLoadError(f"the projector '{path.name}' takes no images (an audio projector?)")
        self._llama_ctx = ctx
        self.placeholder = (mtmd_cpp.mtmd_default_marker() or b"<__media__>").decode()
        self.mrope = bool(mtmd_cpp.mtmd_decode_use_mrope(self._ctx))
        self.n_embd = int(lib.llama_model_n_embd_inp(model))
        vocab = lib.llama_model_get_vocab(model)
        self.image_id = next((ids[0] for ids in (_exact_token(lib, vocab, name) for name in IMAGE_TOKEN_NAMES)
                              if ids), 0)
        marker = self.placeholder.encode()
        self._marker_tokens = -lib.llama_tokenize(vocab, marker, len(marker), None, 0, False, True)  # (as text)
        self._lock = threading.Lock()  # prompts are read where they are submitted, images encoded by the engine
        self._batch = lib.llama_batch_ext_init(ctx)

    # -- prompts ------------------------------------------------------------------------------------------
    def encode(self, text: str, images: Sequence[PromptImage], add_special_tokens: bool) -> ImagePrompt:
        found = text.count(self.placeholder)
        if found != len(images):
            raise ValueError(f"the prompt has {found} image placeholder(s) ({self.placeholder}) for {len(images)} "
                             "image(s); put one placeholder where each image goes")
        if not images:
            raise ValueError("a prompt with images needs at least one image")
        prompt = self._tokenize(text, images, add_special_tokens)
        mtmd = self._mtmd
        ids: list[int] = []
        owners: list[int] = []  # per image chunk: the image it is part of (one image may be several tiles)
        for i in range(mtmd.mtmd_input_chunks_size(prompt.chunks)):
            chunk = mtmd.mtmd_input_chunks_get(prompt.chunks, i)
            if mtmd.mtmd_input_chunk_get_type(chunk) == mtmd.MTMD_INPUT_CHUNK_TYPE_TEXT:
                n = ctypes.c_size_t(0)
                tokens = mtmd.mtmd_input_chunk_get_tokens_text(chunk, ctypes.byref(n))
                ids.extend(int(tokens[j]) for j in range(n.value))
                continue
            count = int(mtmd.mtmd_input_chunk_get_n_tokens(chunk))
            prompt.images.append(ImageChunk(len(ids), len(ids) + count, chunk,
                                            int(mtmd.mtmd_input_chunk_get_n_pos(chunk))))
            owners.append(_owner(mtmd.mtmd_input_chunk_get_id(chunk)))
            ids.extend([self.image_id] * count)
        spans = []
        for k, image in enumerate(images):
            parts = [c for c, owner in zip(prompt.images, owners) if owner == k]
            if not parts:
                raise ValueError(f"llama.cpp read no tokens for image {k + 1} of {len(images)}")
            spans.append((parts[0].first, parts[-1].end, image.digest))
        # each image is decoded in one piece (its embeddings come from one encode), so a prompt chunk never
        # ends inside an image
        return ImagePrompt(ids, spans, prompt, whole_images=True)

    def image_tokens(self, images: Sequence[PromptImage]) -> list[int]:
        """What each image adds beyond the marker's own text: its tokens with their framing, read alone."""
        counts = []
        for image in images:
            prompt = self._tokenize(self.placeholder, [image], False)
            counts.append(sum(int(self._mtmd.mtmd_input_chunk_get_n_tokens(
                self._mtmd.mtmd_input_chunks_get(prompt.chunks, i)))
                for i in range(self._mtmd.mtmd_input_chunks_size(prompt.chunks))) - self._marker_tokens)
        return counts

    def _tokenize(self, text: str, images: Sequence[PromptImage], add_special_tokens: bool) -> PromptChunks:
        mtmd = self._mtmd
        bitmaps = (ctypes.c_void_p * len(images))()
        try:
            for i, image in enumerate(images):
                rgb = image.image.convert("RGB")
                data = rgb.tobytes()
                bitmaps[i] = mtmd.mtmd_bitmap_init(rgb.width, rgb.height,
                                                   (ctypes.c_uint8 * len(data)).from_buffer_copy(data))
                if not bitmaps[i]:
                    raise ValueError(f"llama.cpp could not take image {i + 1} ({rgb.width}x{rgb.height})")
                mtmd.mtmd_bitmap_set_id(bitmaps[i], f"{i}:{image.digest}".encode())  # its chunks carry it
            data = text.encode("utf-8")
            inp = mtmd.mtmd_input_text(data, len(data), add_special_tokens, True)
            prompt = PromptChunks(mtmd, mtmd.mtmd_input_chunks_init())
            with self._lock:
                code = mtmd.mtmd_tokenize(self._ctx, prompt.chunks, ctypes.byref(inp), bitmaps, len(images))
        finally:
            for bitmap in bitmaps:
                if bitmap:
                    mtmd.mtmd_bitmap_free(bitmap)
        if code != 0:
            raise ValueError(f"llama.cpp's projector could not read the prompt's image(s) (mtmd_tokenize: {code})")
        return prompt

    # -- decoding -----------------------------------------------------------------------------------------
    def decode(self, image: ImageChunk, seq_id: int, pos: int, batch_tokens: int, want_logits: bool) -> int:
        """Encode ``image`` and decode its embeddings into ``seq_id`` from position ``pos``; the logits of its last
        token are then at index ``n - 1`` of the last llama_process when ``want_logits``. Returns that index."""
        lib, mtmd = self._lib, self._mtmd
        with self._lock:
            if mtmd.mtmd_encode_chunk(self._ctx, image.chunk) != 0:
                raise LoaderError("llama.cpp's projector could not encode an image")
            embd = mtmd.mtmd_get_output_embd(self._ctx)
        tokens = mtmd.mtmd_input_chunk_get_tokens_image(image.chunk)
        count = image.end - image.first
        both_ways = bool(mtmd.mtmd_decode_use_non_causal(self._ctx, image.chunk))
        step = count if both_ways else batch_tokens  # tokens attending both ways are decoded together
        base = ctypes.addressof(embd.contents)
        row = ctypes.sizeof(ctypes.c_float) * self.n_embd
        pos4 = (lib.llama_pos * 4)()
        index = 0
        if both_ways:
            lib.llama_set_causal_attn(self._llama_ctx, False)
        try:
            for start in range(0, count, step):
                lib.llama_batch_ext_clear(self._batch)
                for i in range(start, min(start + step, count)):
                    e = lib.llama_embd(ctypes.cast(base + i * row, ctypes.POINTER(ctypes.c_float)), 1, self.n_embd)
                    index = lib.llama_batch_ext_add_embd(self._batch, seq_id, e)
                    if index < 0:
                        raise LoaderError(f"llama.cpp's batch took no more image tokens ({index}); load with a "
                                          "larger batch size (n_batch)")
                    if self.mrope:
                        p = mtmd.mtmd_image_tokens_get_decoder_pos(tokens, pos, i)
                        pos4[0], pos4[1], pos4[2], pos4[3] = p.t, p.y, p.x, p.z
                    else:
                        pos4[0] = pos + i
                    lib.llama_batch_ext_set_pos(self._batch, index, pos4)
                    if want_logits and i == count - 1:
                        lib.llama_batch_ext_set_output_logits(self._batch, index, True)
                code = lib.llama_process(self._llama_ctx, lib.LLAMA_PROCESS_TYPE_DECODE, self._batch)
                if code == 1:
                    raise CacheFull("no room in the KV cache for an image's tokens")
                if code != 0:
                    raise LoaderError(f"llama.cpp could not decode an image's tokens (code {code}); its KV cache "
                                      "may be full: load with a larger n_ctx")
        finally:
            if both_ways:
                lib.llama_set_causal_attn(self._llama_ctx, True)
        return index

    def close(self) -> None:
        if getattr(self, "_batch", None):
            self._lib.llama_batch_ext_free(self._batch)
            self._batch = None
        if self._ctx:
            self._mtmd.mtmd_free(self._ctx)
            self._ctx = None


def _owner(chunk_id: bytes | None) -> int:
    """The prompt's image (by order) that an image chunk belongs to, from the id its bitmap was given."""
    try:
        return int((chunk_id or b"").split(b":", 1)[0])
    except ValueError:
        return -1


def _exact_token(lib: Any, vocab: Any, text: str) -> list[int]:
    """The token id of ``text`` when the vocabulary has it as one special token, else []."""
    data = text.encode()
    buf = (lib.llama_token * 8)()
    n = lib.llama_tokenize(vocab, data, len(data), buf, 8, False, True)
    return [int(buf[0])] if n == 1 else []
