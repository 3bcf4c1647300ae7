"""The llama.cpp loader: .gguf files run natively by llama-cpp-python (an optional extra).

llama.cpp gives us next-token logits, so our own sampling pipeline runs on them
and every slider means what it means with the other loaders. All running
sequences share one llama.cpp context: each holds a sequence id in a unified KV
cache, and one ``llama_decode`` per step feeds every sequence its new tokens
(llama.cpp's batch API), the way its own parallel server example works.

Only the public C API exposed by ``llama_cpp`` (ctypes) is used; the package is
imported when a model is loaded, so listing loaders stays cheap.
"""

from __future__ import annotations

import ctypes
import logging
import os
from pathlib import Path
from typing import Any, Callable, Sequence

from loaders.base import Capabilities, LoadedModel, LoaderError, LoadOptions, ModelLoadError, require_backend

Progress = Callable[[float, str], None]

INSTALL_HINT = ("python launch.py install llamacpp (builds llama-cpp-python from source: about 12 minutes "
                "on 2 CPU cores), or the Install button in the Model tab")
MAX_SEQUENCES = 64
"""Sequence ids in the shared context; the last one is kept for out-of-band logits (insight, perplexity)."""
KV_TOKENS = 16384
"""Tokens the shared KV cache holds across all running sequences (one sequence gets at most n_ctx_train)."""
BATCH_TOKENS = 2048
"""Most tokens one llama_decode call takes; longer steps are split into several calls."""


def register_loaders(register: Callable[[Any], None]) -> None:
    register(LlamaCppLoader())


class LlamaCppLoader:
    name = "llamacpp"
    description = "llama.cpp (llama-cpp-python): .gguf files natively, quantized; the fastest choice on a CPU"
    capabilities = Capabilities(batched_forward=True, lora=False, logprobs=True, devices=("cpu",),
                                formats=("gguf",))
    requires = ("llama_cpp",)
    install_hint = INSTALL_HINT

    def can_load(self, path: Path) -> bool:
        return path.is_file() and path.suffix == ".gguf"

    native_format = can_load

    def load(self, path: Path, options: LoadOptions, progress: Progress | None = None) -> LoadedModel:
        require_backend(self)
        path = Path(path)
        if not path.is_file():
            raise ModelLoadError(f"model path '{path}' does not exist" if not path.exists()
                                 else f"'{path}' is not a .gguf file; llama.cpp reads .gguf files only")
        if path.suffix != ".gguf":
            raise ModelLoadError(f"'{path}' is not a .gguf file; llama.cpp reads .gguf files only")
        if options.device not in ("auto", "cpu"):
            raise ModelLoadError(f"this llama-cpp-python build runs on the CPU; device '{options.device}' "
                                 "is not supported (use --device cpu or auto)")
        if progress:
            progress(0.0, f"loading {path.name} with llama.cpp")
        model = LlamaCppModel(path, threads=options.threads or os.cpu_count() or 1)
        if progress:
            progress(1.0, f"loaded {path.name}")
        return model


class SeqSlot:
    """A running sequence's place in the shared context: its sequence id and how many tokens it holds."""

    def __init__(self, seq_id: int):
        self.seq_id, self.length = seq_id, 0


class LlamaCppModel:
    loader = "llamacpp"
    capabilities = LlamaCppLoader.capabilities
    device = "cpu"

    def __init__(self, path: Path, threads: int):
        import llama_cpp

        logging.getLogger("llama-cpp-python").setLevel(logging.ERROR)  # llama.cpp logs every tensor otherwise
        self._lib = lib = llama_cpp
        self.path, self.name = path, path.stem
        lib.llama_backend_init()
        mparams = lib.llama_model_default_params()
        self._model = lib.llama_model_load_from_file(str(path).encode(), mparams)
        if not self._model:
            raise ModelLoadError(f"llama.cpp could not read '{path}' (not a valid .gguf, or an architecture this "
                                 "llama-cpp-python build does not know)")
        self._vocab = lib.llama_model_get_vocab(self._model)
        self.vocab_size = int(lib.llama_vocab_n_tokens(self._vocab))
        n_ctx_train = int(lib.llama_model_n_ctx_train(self._model))
        self.context_length = min(n_ctx_train, KV_TOKENS) if n_ctx_train > 0 else KV_TOKENS
        self.max_sequences = min(MAX_SEQUENCES, int(lib.llama_max_parallel_sequences()))
        cparams = lib.llama_context_default_params()
        cparams.n_ctx = KV_TOKENS
        cparams.n_batch = BATCH_TOKENS
        cparams.n_ubatch = 512
        cparams.n_seq_max = self.max_sequences
        cparams.kv_unified = True
        cparams.n_threads = cparams.n_threads_batch = threads
        self._ctx = lib.llama_init_from_model(self._model, cparams)
        if not self._ctx:
            lib.llama_model_free(self._model)
            raise ModelLoadError(f"llama.cpp could not create a context for '{path}' (out of memory?)")
        self._memory = lib.llama_get_memory(self._ctx)
        self._batch = lib.llama_batch_init(BATCH_TOKENS, 0, 1)
        self._free_ids = list(range(self.max_sequences - 2, -1, -1))  # pop() hands out 0 first
        self._scratch_id = self.max_sequences - 1
        self.dtype = _file_type(self._meta("general.file_type"))
        self.tokenizer = LlamaCppTokenizer(lib, self._vocab, self._meta("tokenizer.chat_template"))

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
        if not self._free_ids:
            raise LoaderError(f"llama.cpp runs at most {self.max_sequences - 1} sequences at once; "
                              "lower --max-running")
        return SeqSlot(self._free_ids.pop())

    def release(self, cache: SeqSlot) -> None:
        if cache.seq_id >= 0:
            self._lib.llama_memory_seq_rm(self._memory, cache.seq_id, -1, -1)
            self._free_ids.append(cache.seq_id)
            cache.seq_id = -1

    def forward(self, caches: Sequence[SeqSlot], new_ids: Sequence[Sequence[int]]):
        """One step for every running sequence: their new tokens in as few llama_decode calls as fit."""
        for slot in caches:
            if slot.seq_id < 0:
                raise LoaderError("a released sequence was fed to the model")
        feeds = [(row, slot.seq_id, slot.length, list(ids)) for row, (slot, ids) in enumerate(zip(caches, new_ids))]
        rows = self._decode(feeds, all_logits=False)
        for slot, ids in zip(caches, new_ids):
            slot.length += len(ids)
        return rows

    def logits(self, ids: Sequence[int], last_only: bool = True, loras: tuple = ()):
        """Logits for ``ids`` alone, in the scratch sequence (the running ones are not touched)."""
        if loras:
            raise LoaderError("the llamacpp loader cannot apply LoRA adapters")
        self._lib.llama_memory_seq_rm(self._memory, self._scratch_id, -1, -1)
        try:
            out = self._decode([(0, self._scratch_id, 0, list(ids))], all_logits=not last_only)
        finally:
            self._lib.llama_memory_seq_rm(self._memory, self._scratch_id, -1, -1)
        return out[0] if last_only else out

    def _decode(self, feeds: list[tuple[int, int, int, list[int]]], all_logits: bool):
        """Decode (row, seq_id, first position, ids) feeds; logits of each row's last token (or of every token).

        Tokens are packed into llama_batch chunks of at most BATCH_TOKENS; each chunk is one llama_decode.
        """
        import numpy as np
        import torch

        lib, batch = self._lib, self._batch
        n_out = sum(len(ids) for *_, ids in feeds) if all_logits else len(feeds)
        out = np.empty((n_out, self.vocab_size), dtype=np.float32)
        pending: list[tuple[int, int]] = []  # (output row, index in the chunk)
        batch.n_tokens = 0
        next_row = 0

        def flush() -> None:
            if batch.n_tokens == 0:
                return
            code = lib.llama_decode(self._ctx, batch)
            if code != 0:
                raise LoaderError(_decode_error(code))
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
                if batch.n_tokens == BATCH_TOKENS:
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
        return int(self._lib.llama_model_size(self._model))

    def close(self) -> None:
        lib = self._lib
        if self._ctx:
            lib.llama_batch_free(self._batch)
            lib.llama_free(self._ctx)
            lib.llama_model_free(self._model)
            self._ctx = self._model = None


def _decode_error(code: int) -> str:
    if code == 1:
        return (f"llama.cpp's KV cache is full ({KV_TOKENS} tokens shared by all running sequences); "
                "lower --max-running or ask for fewer tokens")
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


class LlamaCppTokenizer:
    """Our Tokenizer protocol over llama.cpp's vocabulary and the GGUF's own chat template."""

    def __init__(self, lib: Any, vocab: Any, chat_template: str | None):
        self._lib, self._vocab = lib, vocab
        self.chat_template = chat_template
        n = int(lib.llama_vocab_n_tokens(vocab))
        self.eos_token_ids = frozenset(i for i in range(n) if lib.llama_vocab_is_eog(vocab, i))
        self._special = {"bos_token": self._piece(lib.llama_vocab_bos(vocab), True),
                         "eos_token": self._piece(lib.llama_vocab_eos(vocab), True)}

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        data = text.encode("utf-8")
        size = len(data) + 8
        while True:
            buf = (self._lib.llama_token * size)()
            n = self._lib.llama_tokenize(self._vocab, data, len(data), buf, size, add_special_tokens, True)
            if n >= 0:
                return list(buf[:n])
            size = -n

    def _piece(self, token: int, special: bool) -> bytes:
        if token < 0:
            return b""
        buf = ctypes.create_string_buffer(64)
        n = self._lib.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, special)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = self._lib.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, special)
        return buf.raw[:n]

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return b"".join(self._piece(int(i), not skip_special_tokens) for i in ids).decode("utf-8", errors="replace")

    def token_strings(self, ids: Sequence[int]) -> list[str]:
        return [self._piece(int(i), True).decode("utf-8", errors="replace") for i in ids]

    def apply_chat_template(self, messages: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        if not self.chat_template:
            raise ModelLoadError("this .gguf file has no chat template; use a raw completion instead")
        from transformers.utils.chat_template_utils import render_jinja_template

        special = {k: v.decode("utf-8", errors="replace") for k, v in self._special.items()}
        rendered, _ = render_jinja_template([messages], chat_template=self.chat_template,
                                            add_generation_prompt=add_generation_prompt, **special)
        return rendered[0]
