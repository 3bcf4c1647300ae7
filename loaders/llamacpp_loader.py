"""The llama.cpp loader: .gguf files run natively by llama-cpp-python (an optional extra).

llama.cpp gives us next-token logits, so our own sampling pipeline runs on them
and every slider means what it means with the other loaders. All running
sequences share one llama.cpp context: each holds a sequence id in a unified KV
cache, and one ``llama_decode`` per step feeds every sequence its new tokens
(llama.cpp's batch API), the way its own parallel server example works.

Prompts already read are not read again ("native" prefix reuse): a finished
sequence keeps its cells until its id is handed out again, and a new sequence
whose prompt starts the same way takes those cells over (or, from a sequence
still running, gets them copied, which in the unified cache only tags the cells).

A projector file (``mmproj``) beside the .gguf makes it a vision-language model: prompts may carry images
(loaders/llamacpp_images.py).

Only the public C API exposed by ``llama_cpp`` (ctypes) is used; the package is
imported when a model is loaded, so listing loaders stays cheap.
"""

from __future__ import annotations


import ctypes
import logging
import os
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from loaders.base import (NATIVE, BaseLoader, Capabilities, ImagePrompt, LoadedModel, LoaderError, LoadOptions,
                          ModelLoadError, Progress, PromptImage, SteppedModel, SupportsGuidance, SupportsImages,
                          SupportsNativePrefix, available_memory_bytes, common_prefix, require_backend)
from loaders.extras import EXTRAS
from loaders.gguf_header import is_projector, read_header
from loaders.llamacpp_images import AUTO, IMAGE_CELL, CacheFull, PromptChunks, Projector, find_projector
from loaders.llamacpp_tokenizer import LlamaCppTokenizer
from loaders.options import LoadOption, LoadOptionError, check_options, refuse_off_device

if TYPE_CHECKING:
    import torch

INSTALL_HINT = EXTRAS["llamacpp"].hint
MAX_SEQUENCES = 64
"""Sequence ids in the shared context; the last one is kept for out-of-band logits (insight, perplexity)."""
BATCH_TOKENS = 2048
"""Most tokens one llama_decode call takes by default; longer steps are split into several calls."""
KV_SHARE = 0.5
"""With n_ctx 0 (auto), the KV cache may take at most this share of the memory available at load."""
MIN_AUTO_CTX = 512
CACHE_TYPES = {"f16": (2.0, "GGML_TYPE_F16"), "q8_0": (34 / 32, "GGML_TYPE_Q8_0"), "q4_0": (18 / 32, "GGML_TYPE_Q4_0")}
"""KV-cache element type -> (bytes per element, its ggml type constant)."""
FLASH_ATTN = {"auto": "LLAMA_FLASH_ATTN_TYPE_AUTO", "on": "LLAMA_FLASH_ATTN_TYPE_ENABLED",
              "off": "LLAMA_FLASH_ATTN_TYPE_DISABLED"}

OPTIONS = (
    LoadOption("n_ctx", int, 0, "Tokens the KV cache holds, shared by all running sequences (one sequence gets at "
               "most the model's training context). 0: the training context, capped by memory.",
               label="context size (n_ctx)", minimum=0, maximum=1 << 20),
    LoadOption("n_gpu_layers", int, 0, "Layers offloaded to the GPU (-1: all). Needs a llama-cpp-python built "
               "with GPU support.", label="GPU layers", minimum=-1, maximum=1000, devices=("cuda",)),
    LoadOption("flash_attn", str, "auto", "Flash attention: auto (llama.cpp decides), on or off; a quantized "
               "KV cache needs it.", label="flash attention", choices=tuple(FLASH_ATTN)),
    LoadOption("cache_type", str, "f16", "KV-cache element type: f16, or q8_0/q4_0 to fit more tokens in "
               "the same memory (slightly less exact).", label="KV cache type", choices=tuple(CACHE_TYPES)),
    LoadOption("n_batch", int, BATCH_TOKENS, "Most tokens one llama_decode call reads (prompt chunks).",
               label="batch size", minimum=32, maximum=65536),
    LoadOption("threads_batch", int, 0, "Threads for reading prompts (batch); 0: the same as threads, which "
               "generation (decode) uses.", label="prompt threads", minimum=0, maximum=1024),
    LoadOption("mmproj", str, AUTO, "The projector (mmproj .gguf) that lets the model read images: auto (the one "
               "beside the model file), none (text only), or a file name in the model's folder.",
               label="image projector (mmproj)"),
)


def kv_bytes_per_token(n_layer: int, n_head: int, n_head_kv: int, n_embd: int, cache_type: str) -> float:
    """Keys and values of one token in every layer."""
    head_dim = n_embd // max(n_head, 1)
    return 2 * n_layer * n_head_kv * head_dim * CACHE_TYPES[cache_type][0]


def context_tokens(n_ctx: int, n_ctx_train: int, per_token: float, available: int) -> int:
    """The KV cache's size: ``n_ctx`` as asked, or (0) the training context halved until it fits in
    KV_SHARE of ``available`` memory."""
    if n_ctx:
        return n_ctx
    tokens = n_ctx_train if n_ctx_train > 0 else 4096
    while tokens > MIN_AUTO_CTX and tokens * per_token > available * KV_SHARE:
        tokens //= 2
    return max(tokens, MIN_AUTO_CTX)


def gguf_shape(path: Path) -> dict[str, int] | None:
    """(From the file's header) the training context and what the KV cache's size depends on; None if unread."""
    header = read_header(path)
    if header is None:
        return None  # an unusual header: the estimate is the file alone
    meta = header.meta
    try:
        arch = meta["general.architecture"]
        head = int(meta[f"{arch}.attention.head_count"])
        return {"n_ctx_train": int(meta[f"{arch}.context_length"]), "n_layer": int(meta[f"{arch}.block_count"]),
                "n_head": head, "n_head_kv": int(meta.get(f"{arch}.attention.head_count_kv", head)),
                "n_embd": int(meta[f"{arch}.embedding_length"])}
    except (KeyError, TypeError, ValueError):
        return None


def register_loaders(register: Callable[[Any], None]) -> None:
    register(LlamaCppLoader())


class LlamaCppLoader(BaseLoader):
    name = "llamacpp"
    description = "llama.cpp (llama-cpp-python): .gguf files natively, quantized; the fastest choice on a CPU"
    capabilities = Capabilities(batched_forward=True, lora=False, logprobs=True, devices=("cpu",),
                                formats=("gguf",), prefix_cache="native", images=True)
    requires = ("llama_cpp",)
    install_hint = INSTALL_HINT
    options = OPTIONS
    takes_dtype = False  # a GGUF runs in the types it holds
    smaller_load = "a smaller context size (n_ctx), or a quantized KV cache (cache_type q8_0 or q4_0)"

    def match(self, path: Path) -> int:
        return NATIVE if path.is_file() and path.suffix == ".gguf" and not is_projector(path) else 0

    def estimate_bytes(self, path: Path, options: LoadOptions) -> int:
        """The file (llama.cpp maps it as stored) and the KV cache for the context size it will get."""
        size = Path(path).stat().st_size if Path(path).is_file() else 0
        shape = gguf_shape(Path(path)) if size else None
        if shape is None:
            return size
        values = check_options(self, options.extra)
        per_token = kv_bytes_per_token(shape["n_layer"], shape["n_head"], shape["n_head_kv"], shape["n_embd"],
                                       values["cache_type"])
        tokens = context_tokens(values["n_ctx"], shape["n_ctx_train"], per_token, available_memory_bytes())
        try:
            projector = find_projector(Path(path), values["mmproj"])
        except ModelLoadError:
            projector = None  # the load says what is wrong
        return int(size + tokens * per_token + (projector.stat().st_size if projector else 0))

    def prepare(self, path: Path, workdir: Path, progress: Progress | None = None) -> Path:
        return path

    def load(self, path: Path, options: LoadOptions, progress: Progress | None = None) -> LoadedModel:
        require_backend(self)
        path = Path(path)
        if not path.is_file():
            raise ModelLoadError(f"model path '{path}' does not exist" if not path.exists()
                                 else f"'{path}' is not a .gguf file; llama.cpp reads .gguf files only")
        if path.suffix != ".gguf":
            raise ModelLoadError(f"'{path}' is not a .gguf file; llama.cpp reads .gguf files only")
        if is_projector(path):
            raise ModelLoadError(f"'{path.name}' is an image projector (mmproj), not a model: load the model .gguf "
                                 "beside it, which finds its projector")
        import llama_cpp

        values = check_options(self, options.extra)
        gpu = bool(llama_cpp.llama_supports_gpu_offload())
        if options.device not in ("auto", "cpu") and not (gpu and options.device.startswith("cuda")):
            raise ModelLoadError(f"this llama-cpp-python build runs on the CPU; device '{options.device}' "
                                 "is not supported (use --device cpu or auto)")
        refuse_off_device(self, values, "cuda" if gpu and options.device != "cpu" else "cpu",
                          "" if gpu else "this llama-cpp-python build has no GPU offload")
        if values["cache_type"] != "f16" and values["flash_attn"] == "off":
            raise LoadOptionError("cache_type", f"llama.cpp's quantized KV cache (cache_type={values['cache_type']}) "
                                                "needs flash attention; set flash_attn to auto or on, or cache_type "
                                                "to f16")
        if progress:
            progress(0.0, f"loading {path.name} with llama.cpp")
        projector = find_projector(path, values["mmproj"])
        model = LlamaCppModel(path, threads=options.threads or os.cpu_count() or 1, options=values,
                              projector=projector)
        if progress:
            progress(1.0, f"loaded {path.name}")
        return model


class SeqSlot:
    """A running sequence's place in the shared context: its sequence id and the tokens its cells hold."""

    def __init__(self, seq_id: int):
        self.seq_id = seq_id
        self.tokens: list[int] = []  # IMAGE_CELL where an image token is
        self.images: PromptChunks | None = None  # its prompt's images, until they are read
        self.shift = 0  # how much earlier than its place the next token sits (after M-RoPE images)

    @property
    def length(self) -> int:
        return len(self.tokens)

    @property
    def position(self) -> int:
        """The position the next token takes."""
        return len(self.tokens) - self.shift


class LlamaCppModel:
    loader = "llamacpp"
    capabilities = LlamaCppLoader.capabilities
    device = "cpu"

    def __init__(self, path: Path, threads: int, options: dict[str, Any] | None = None,
                 projector: Path | None = None):
        import llama_cpp

        options = check_options(LlamaCppLoader, options)
        self.load_options: dict[str, Any] = options

        logging.getLogger("llama-cpp-python").setLevel(logging.ERROR)  # llama.cpp logs every tensor otherwise
        self._lib = lib = llama_cpp
        self.path, self.name = path, path.stem
        lib.llama_backend_init()
        mparams = lib.llama_model_default_params()
        mparams.n_gpu_layers = options["n_gpu_layers"] if options["n_gpu_layers"] >= 0 else 1000
        self._model = lib.llama_model_load_from_file(str(path).encode(), mparams)
        if not self._model:
            raise ModelLoadError(f"llama.cpp could not read '{path}' (not a valid .gguf, or an architecture this "
                                 "llama-cpp-python build does not know)")
        self._vocab = lib.llama_model_get_vocab(self._model)
        self.vocab_size = int(lib.llama_vocab_n_tokens(self._vocab))
        n_ctx_train = int(lib.llama_model_n_ctx_train(self._model))
        per_token = kv_bytes_per_token(int(lib.llama_model_n_layer(self._model)),
                                       int(lib.llama_model_n_head(self._model)),
                                       int(lib.llama_model_n_head_kv(self._model)),
                                       int(lib.llama_model_n_embd(self._model)), options["cache_type"])
        self.kv_tokens = context_tokens(options["n_ctx"], n_ctx_train, per_token, available_memory_bytes())
        self.kv_bytes = int(self.kv_tokens * per_token)
        self.context_length = min(n_ctx_train, self.kv_tokens) if n_ctx_train > 0 else self.kv_tokens
        self.max_sequences = min(MAX_SEQUENCES, int(lib.llama_max_parallel_sequences()))
        self.batch_tokens = options["n_batch"]
        cparams = lib.llama_context_default_params()
        cparams.n_ctx = self.kv_tokens
        cparams.n_batch = self.batch_tokens
        cparams.n_ubatch = min(512, self.batch_tokens)
        cparams.flash_attn_type = getattr(lib, FLASH_ATTN[options["flash_attn"]])
        cparams.type_k = cparams.type_v = getattr(lib, CACHE_TYPES[options["cache_type"]][1])
        cparams.n_seq_max = self.max_sequences
        # One unified cache: sequences that share a prompt share its cells (llama_memory_seq_cp only tags them).
        # Per-sequence streams (kv_unified False) measured no faster here (bench/loader_speed.py: raw
        # llama_decode of 16 sequences is ~1.5x one sequence's tokens/s either way on the Q4_1 file).
        cparams.kv_unified = True
        cparams.n_threads = threads
        cparams.n_threads_batch = options["threads_batch"] or threads
        self._ctx = lib.llama_init_from_model(self._model, cparams)
        if not self._ctx:
            lib.llama_model_free(self._model)
            raise ModelLoadError(f"llama.cpp could not create a context for '{path}' (out of memory?)")
        self._memory = lib.llama_get_memory(self._ctx)
        self._batch = lib.llama_batch_init(self.batch_tokens, 0, 1)
        self._free_ids = list(range(self.max_sequences - 1))  # least recently released first
        self._kept: dict[int, list[int]] = {}  # free sequence ids whose cells still hold these tokens
        self._running: dict[int, SeqSlot] = {}
        self._scratch_id = self.max_sequences - 1
        self.dtype = _file_type(self._meta("general.file_type"))
        self.tokenizer = LlamaCppTokenizer(lib, self._vocab, self._meta("tokenizer.chat_template"))
        self.projector: Projector | None = None
        if projector is not None:
            try:
                self.projector = Projector(lib, projector, self._model, self._ctx, threads,
                                           gpu=mparams.n_gpu_layers != 0 and bool(lib.llama_supports_gpu_offload()))
            except ModelLoadError:
                self.close()
                raise
        self.capabilities = replace(LlamaCppLoader.capabilities, images=self.projector is not None)
        self.image_placeholder = self.projector.placeholder if self.projector is not None else ""

    def _meta(self, key: str) -> str | None:
        buf = ctypes.create_string_buffer(1 << 16)
        n = self._lib.llama_model_meta_val_str(self._model, key.encode(), buf, len(buf))
        if n < 0:
            return None
        if n >= len(buf):
            buf = ctypes.create_string_buffer(n + 1)
            self._lib.llama_model_meta_val_str(self._model, key.encode(), buf, len(buf))
        return buf.value.decode("utf-8", errors="replace")

    # -- sequences ---------------------------------------------------------------------
    def new_cache(self) -> SeqSlot:
        """A free sequence id, emptied: one that keeps nothing if there is one, else the least recently used."""
        if not self._free_ids:
            raise LoaderError(f"llama.cpp runs at most {self.max_sequences - 1} sequences at once; "
                              "lower --max-running")
        seq_id = next((i for i in self._free_ids if i not in self._kept), self._free_ids[0])
        self._take(seq_id)
        self._lib.llama_memory_seq_rm(self._memory, seq_id, -1, -1)
        slot = SeqSlot(seq_id)
        self._running[seq_id] = slot
        return slot

    def _take(self, seq_id: int) -> None:
        self._free_ids.remove(seq_id)
        self._kept.pop(seq_id, None)

    def release(self, cache: SeqSlot) -> None:
        """The sequence ended; its cells stay (a later prompt with the same start reuses them) until its id is
        handed out again."""
        cache.images = None
        if cache.seq_id >= 0:
            self._running.pop(cache.seq_id, None)
            self._kept[cache.seq_id] = cache.tokens
            self._free_ids.append(cache.seq_id)
            cache.seq_id = -1

    # -- prefix reuse ("native": prompts already read stay in llama.cpp's own cells) ------------------
    def _best_source(self, ids: Sequence[int]) -> tuple[int, int, bool]:
        """(sequence id, tokens in common with ``ids``, whether it is free) of the longest match."""
        best = (-1, 0, False)
        for seq_id, tokens in self._kept.items():
            n = common_prefix(tokens, ids)
            if n > best[1]:
                best = (seq_id, n, True)
        for seq_id, slot in self._running.items():
            n = common_prefix(slot.tokens, ids)
            if n > best[1]:
                best = (seq_id, n, False)
        return best

    def drop_prefixes(self) -> None:
        """Free the cells finished sequences kept."""
        for seq_id in self._kept:
            self._lib.llama_memory_seq_rm(self._memory, seq_id, -1, -1)
        self._kept.clear()

    def prefix_match(self, ids: Sequence[int]) -> int:
        """How many leading tokens of ``ids`` some sequence's cells already hold."""
        return self._best_source(ids)[1]

    def reuse_prefix(self, cache: SeqSlot, ids: Sequence[int]) -> int:
        """Start the empty ``cache`` with the longest prefix of ``ids`` already in the context: a free sequence's
        cells are taken over as they are (its id is swapped in), a running one's are copied."""
        if cache.tokens:
            raise LoaderError("a prefix can only start an empty sequence")
        source, n, free = self._best_source(ids)
        if n == 0:
            return 0
        lib = self._lib
        if free:  # take the kept cells over: this sequence runs under that id, its own goes back
            tokens = self._kept[source]
            self._take(source)
            del self._running[cache.seq_id]
            self._free_ids.insert(0, cache.seq_id)
            cache.seq_id = source
            self._running[source] = cache
        else:
            tokens = self._running[source].tokens
            lib.llama_memory_seq_cp(self._memory, source, cache.seq_id, -1, -1)
        lib.llama_memory_seq_rm(self._memory, cache.seq_id, n, -1)
        cache.tokens = list(tokens[:n])
        return n

    def forward(self, caches: Sequence[SeqSlot], new_ids: Sequence[Sequence[int]]) -> torch.Tensor:
        """One step for every running sequence: their new tokens in as few llama_decode calls as fit."""
        for slot in caches:
            if slot.seq_id < 0:
                raise LoaderError("a released sequence was fed to the model")
        feeds, with_images = [], []
        for row, (slot, ids) in enumerate(zip(caches, new_ids)):
            if slot.images is not None and slot.length + len(ids) > slot.images.images[0].first:
                with_images.append(row)  # this step reads some of its images
            else:
                feeds.append((row, slot.seq_id, slot.position, list(ids)))
        rows = self._decode(feeds, all_logits=False, n_rows=len(caches))
        for row, _, _, ids in feeds:
            caches[row].tokens.extend(ids)
        for row in with_images:
            rows[row] = self._read_images(caches[row], list(new_ids[row]))
        return rows

    # -- images (loaders/llamacpp_images.py) ------------------------------------------------------------
    def encode_images(self, text: str, images: Sequence[PromptImage], add_special_tokens: bool) -> ImagePrompt:
        if self.projector is None:
            raise ValueError(f"{self.name} takes no images: it was loaded without an image projector (put its "
                             "mmproj .gguf beside it and load it again), or it is a text-only model")
        return self.projector.encode(text, images, add_special_tokens)

    def image_tokens(self, images: Sequence[PromptImage]) -> list[int]:
        return self.projector.image_tokens(images) if self.projector is not None else [0] * len(images)

    def attach_images(self, cache: SeqSlot, media: PromptChunks) -> None:
        if cache.tokens:
            raise RuntimeError("images are attached to a sequence before it reads its prompt")
        cache.images = media

    def _read_images(self, slot: SeqSlot, ids: list[int]) -> torch.Tensor:
        """Feed ``ids`` to ``slot`` where they hold images: the text before, between and after them with
        llama_decode, each image's embeddings as the projector makes them; the logits of the last token."""
        import torch

        assert slot.images is not None and self.projector is not None
        start, end = slot.length, slot.length + len(ids)
        logits: torch.Tensor | None = None

        def text(upto: int) -> None:
            nonlocal logits
            part = ids[slot.length - start:upto - start]
            if part:
                logits = self._decode([(0, slot.seq_id, slot.position, part)], all_logits=False)[0]
                slot.tokens.extend(part)

        for image in slot.images.images:
            if image.end <= start or image.first >= end:
                continue
            if image.first < start or image.end > end:
                raise LoaderError("an image's tokens were split between two steps; llama.cpp reads each image "
                                  "whole")
            text(image.first)
            count = image.end - image.first
            if slot.position + count > self.context_length:
                raise LoaderError(f"the sequence would hold {slot.length + count} tokens; this model's context "
                                  f"is {self.context_length}")
            index = self._decode_image(slot, image, last=image.end == end)
            slot.tokens.extend([IMAGE_CELL] * count)
            slot.shift += count - image.n_pos
            if image.end == end:
                logits = self._logits_at(index)
        text(end)
        if slot.length >= slot.images.images[-1].end:
            slot.images = None  # every image is in its cells
        assert logits is not None
        return logits

    def _decode_image(self, slot: SeqSlot, image: Any, last: bool) -> int:
        assert self.projector is not None
        try:
            return self.projector.decode(image, slot.seq_id, slot.position, self.batch_tokens, last)
        except CacheFull:
            if not self._kept:
                raise LoaderError(_decode_error(1, self.kv_tokens)) from None
        self._lib.llama_memory_seq_rm(self._memory, slot.seq_id, slot.position, -1)
        self.drop_prefixes()  # no room: give up the cells finished sequences kept, then retry
        try:
            return self.projector.decode(image, slot.seq_id, slot.position, self.batch_tokens, last)
        except CacheFull:
            raise LoaderError(_decode_error(1, self.kv_tokens)) from None

    def _logits_at(self, index: int) -> torch.Tensor:
        import numpy as np
        import torch

        ptr = self._lib.llama_get_logits_ith(self._ctx, index)
        return torch.from_numpy(np.ctypeslib.as_array(ptr, shape=(self.vocab_size,)).copy())

    def logits(self, ids: Sequence[int], last_only: bool = True, loras: tuple = ()) -> torch.Tensor:
        """Logits for ``ids`` alone, in the scratch sequence (the running ones are not touched)."""
        if loras:
            raise LoaderError("the llamacpp loader cannot apply LoRA adapters")
        self._lib.llama_memory_seq_rm(self._memory, self._scratch_id, -1, -1)
        try:
            out = self._decode([(0, self._scratch_id, 0, list(ids))], all_logits=not last_only)
        finally:
            self._lib.llama_memory_seq_rm(self._memory, self._scratch_id, -1, -1)
        return out[0] if last_only else out

    def _decode(self, feeds: list[tuple[int, int, int, list[int]]], all_logits: bool,
                n_rows: int | None = None) -> torch.Tensor:
        """Decode (row, seq_id, first position, ids) feeds; logits of each row's last token (or of every token);
        ``n_rows``: rows of the result when some are filled elsewhere.

        Tokens are packed into llama_batch chunks of at most n_batch tokens; each chunk is one llama_decode.
        """
        import numpy as np
        import torch

        lib, batch = self._lib, self._batch
        n_out = sum(len(ids) for *_, ids in feeds) if all_logits else len(feeds) if n_rows is None else n_rows
        out = np.empty((n_out, self.vocab_size), dtype=np.float32)
        pending: list[tuple[int, int]] = []  # (output row, index in the chunk)
        batch.n_tokens = 0
        next_row = 0

        def flush() -> None:
            if batch.n_tokens == 0:
                return
            code = lib.llama_decode(self._ctx, batch)
            if code == 1 and self._kept:  # no room: give up the cells finished sequences kept, then retry
                self.drop_prefixes()
                code = lib.llama_decode(self._ctx, batch)
            if code != 0:
                raise LoaderError(_decode_error(code, self.kv_tokens))
            for row, index in pending:
                ptr = lib.llama_get_logits_ith(self._ctx, index)
                out[row] = np.ctypeslib.as_array(ptr, shape=(self.vocab_size,))
            pending.clear()
            batch.n_tokens = 0

        for row, seq_id, start, ids in feeds:
            if start + len(ids) > self.context_length:
                raise LoaderError(f"the sequence would hold {start + len(ids)} tokens; this model's context "
                                  f"is {self.context_length}")
            for offset, token in enumerate(ids):
                if batch.n_tokens == self.batch_tokens:
                    flush()
                i = batch.n_tokens
                last = offset == len(ids) - 1
                wanted = all_logits or last
                batch.token[i], batch.pos[i] = token, start + offset
                batch.n_seq_id[i], batch.seq_id[i][0] = 1, seq_id
                batch.logits[i] = wanted
                if wanted:
                    pending.append((next_row if all_logits else row, i))
                    next_row += 1
                batch.n_tokens = i + 1
        flush()
        return torch.from_numpy(out)

    def memory_bytes(self) -> int:
        projector = self.projector.path.stat().st_size if self.projector is not None else 0
        return int(self._lib.llama_model_size(self._model)) + self.kv_bytes + projector

    def close(self) -> None:
        lib = self._lib
        projector = getattr(self, "projector", None)
        if projector is not None:
            projector.close()
            self.projector = None
        if self._ctx:
            lib.llama_batch_free(self._batch)
            lib.llama_free(self._ctx)
            lib.llama_model_free(self._model)
            self._ctx = self._model = None


def _decode_error(code: int, kv_tokens: int) -> str:
    if code == 1:
        return (f"llama.cpp's KV cache is full ({kv_tokens} tokens shared by all running sequences); "
                "lower --max-running, ask for fewer tokens, or load with a larger n_ctx")
    return f"llama_decode failed with code {code}"


# llama_ftype values of the common files (general.file_type in the GGUF header).
_FILE_TYPES = {0: "float32", 1: "float16", 2: "q4_0", 3: "q4_1", 7: "q8_0", 8: "q5_0", 9: "q5_1", 10: "q2_k",
               11: "q3_k_s", 12: "q3_k_m", 13: "q3_k_l", 14: "q4_k_s", 15: "q4_k_m", 16: "q5_k_s", 17: "q5_k_m",
               18: "q6_k", 32: "bfloat16"}


def _file_type(value: str | None) -> str:
    try:
        return _FILE_TYPES.get(int(value or ""), f"gguf type {value}")
    except ValueError:
        return "gguf"


if TYPE_CHECKING:  # the type checker holds the model to what its capabilities promise
    def _promises(model: LlamaCppModel) -> tuple[SteppedModel, SupportsNativePrefix, SupportsGuidance,
                                                   SupportsImages]:
        return model, model, model.tokenizer, model
