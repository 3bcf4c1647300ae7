"""The ExLlamaV2 loader: EXL2-quantized model folders, on an NVIDIA GPU with CUDA only.

ExLlamaV2 gives us next-token logits, so our own sampling pipeline runs on them
(every slider means what it means with the other loaders). Each running sequence
owns an ``ExLlamaV2Cache`` (kept in a pool and reused once the sequence ends);
a step runs the sequences one after another. The folder's Hugging Face tokenizer
files (the converter copies them) give the same chat template and token strings
as the transformers loader. Make an EXL2 folder with
``python launch.py quantize exl2 MODEL --bits 4`` (on a CUDA machine).

Where there is no CUDA GPU (or the exllamav2 package is missing) it is listed
as unavailable with the reason, and choosing it raises a clear error; nothing
else depends on it.
"""

from __future__ import annotations

import gc
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from loaders.base import (NATIVE, BaseLoader, Capabilities, LoadedModel, LoaderError, LoaderUnavailable, LoadOptions,
                          ModelLoadError, Progress, SteppedModel, require_backend, weights_on_disk)
from loaders.extras import EXTRAS
from loaders.hf import quant_method
from loaders.options import LoadOption, LoadOptionError, check_options

if TYPE_CHECKING:
    import torch

NEEDS_GPU = "ExLlamaV2 needs an NVIDIA GPU with CUDA; this machine has none (use the transformers loader)"
INSTALL_HINT = EXTRAS["exllamav2"].hint


CACHE_CLASSES = {"fp16": "ExLlamaV2Cache", "q8": "ExLlamaV2Cache_Q8", "q6": "ExLlamaV2Cache_Q6",
                 "q4": "ExLlamaV2Cache_Q4"}
CACHE_BYTES = {"fp16": 2.0, "q8": 1.0 + 1 / 16, "q6": 0.75 + 1 / 16, "q4": 0.5 + 1 / 16}
"""Bytes per cached element (with the quantized caches' scales)."""
OPTIONS = (
    LoadOption("cache_size", int, 0, "Tokens each running sequence's cache holds (its context length); 0: the "
               "model's own max_seq_len.", label="cache size", minimum=0, maximum=1 << 20),
    LoadOption("cache_quant", str, "fp16", "The cache's precision: fp16, or q8/q6/q4 to hold more tokens in the "
               "same memory (slightly less exact).", label="cache quantization", choices=tuple(CACHE_CLASSES)),
    LoadOption("gpu_split", str, "", "GB of weights per GPU, comma-separated (e.g. '20,24'); empty: all on "
               "the first GPU.", label="GPU split"),
)


def gpu_split(text: str, gpus: int) -> list[float] | None:
    """'20,24' -> [20.0, 24.0] (GB per GPU), checked against the GPUs there are; '' -> None."""
    if not text.strip():
        return None
    try:
        split = [float(part) for part in text.split(",")]
    except ValueError:
        split = []
    if not split or any(gb <= 0 for gb in split):
        raise LoadOptionError("gpu_split", f"gpu_split is GB per GPU separated by commas, e.g. '20,24'; got {text!r}")
    if len(split) > gpus:
        raise LoadOptionError("gpu_split", f"gpu_split names {len(split)} GPUs, but torch sees {gpus} here")
    return split


def register_loaders(register: Callable[[Any], None]) -> None:
    register(ExLlamaV2Loader())


def is_exl2_folder(path: Path) -> bool:
    """An EXL2 folder: config.json with a quantization_config of quant_method 'exl2' (or an exl2 marker file)."""
    return (path / "config.json").is_file() and quant_method(path) == "exl2"


def cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


class ExLlamaV2Loader(BaseLoader):
    name = "exllamav2"
    description = "ExLlamaV2: EXL2-quantized models on an NVIDIA GPU (CUDA only)"
    capabilities = Capabilities(batched_forward=False, lora=False, logprobs=True, devices=("cuda",),
                                formats=("exl2",))
    requires = ("exllamav2",)
    install_hint = INSTALL_HINT
    options = OPTIONS
    takes_dtype = False  # it computes in float16
    smaller_load = "a smaller cache_size, or a quantized cache (cache_quant q8, q6 or q4)"

    def unavailable_reason(self) -> str | None:
        """Why it cannot run here (checked after the package is found)."""
        return None if cuda_available() else NEEDS_GPU

    def match(self, path: Path) -> int:
        return NATIVE if is_exl2_folder(path) else 0

    def estimate_bytes(self, path: Path, options: LoadOptions) -> int:
        """The weights as stored and one sequence's cache (each running sequence gets its own)."""
        import json

        values = check_options(self, options.extra)
        weights = weights_on_disk(path)
        try:
            config = json.loads((Path(path) / "config.json").read_text())
            heads = int(config["num_attention_heads"])
            head_dim = int(config.get("head_dim") or int(config["hidden_size"]) // heads)
            tokens = values["cache_size"] or int(config.get("max_position_embeddings", 2048))
            per_token = 2 * int(config["num_hidden_layers"]) * int(config.get("num_key_value_heads", heads)) * head_dim
        except (OSError, ValueError, KeyError, TypeError):
            return weights
        return int(weights + tokens * per_token * CACHE_BYTES[values["cache_quant"]])

    def prepare(self, path: Path, workdir: Path, progress: Progress | None = None) -> Path:
        return path

    def load(self, path: Path, options: LoadOptions, progress: Progress | None = None) -> LoadedModel:
        values = check_options(self, options.extra)
        if not cuda_available():
            raise LoaderUnavailable(self.name, "CUDA", self.install_hint, message=NEEDS_GPU)
        require_backend(self)
        path = Path(path)
        if not is_exl2_folder(path):
            raise ModelLoadError(f"'{path}' is not an EXL2 model folder (its config.json has no exl2 "
                                 "quantization_config); make one with python launch.py quantize exl2 MODEL")
        if options.device not in ("auto", "cuda", "cuda:0"):
            raise ModelLoadError(f"ExLlamaV2 runs on the first CUDA GPU; device '{options.device}' is not "
                                 "supported (use auto or cuda)")
        if options.dtype not in ("auto", "float16"):
            raise ModelLoadError(f"ExLlamaV2 computes in float16; dtype '{options.dtype}' is not supported "
                                 "(use auto or float16)")
        if progress:
            progress(0.0, f"loading the EXL2 model {path.name} on cuda")
        import torch

        model = ExLlamaV2Model(path, values["cache_size"], values["cache_quant"],
                               gpu_split(values["gpu_split"], torch.cuda.device_count()))
        model.load_options = values
        if progress:
            progress(1.0, f"loaded {path.name}")
        return model


class SequenceCache:
    """One sequence's place in the model: an ExLlamaV2Cache (its length is ``cache.current_seq_len``)."""

    def __init__(self, cache: Any):
        self.cache = cache


class ExLlamaV2Model:
    loader = "exllamav2"
    capabilities = ExLlamaV2Loader.capabilities
    device, dtype = "cuda", "float16"

    def __init__(self, path: Path, cache_size: int = 0, cache_quant: str = "fp16",
                 split: list[float] | None = None):
        import exllamav2
        import torch
        from exllamav2 import ExLlamaV2, ExLlamaV2Config

        from loaders.hf import folder_tokenizer

        self.path, self.name = path, path.name
        self.load_options: dict[str, Any] = {}  # the loader sets the options it loaded with
        self._cache_class = getattr(exllamav2, CACHE_CLASSES[cache_quant])
        before = torch.cuda.memory_allocated()
        try:
            config = ExLlamaV2Config(str(path))
            if cache_size:
                config.max_seq_len = cache_size
            model = ExLlamaV2(config)
            model.load(gpu_split=split) if split else model.load()
        except (OSError, ValueError, KeyError, TypeError, AssertionError, RuntimeError) as exc:  # OOM included
            raise ModelLoadError(f"could not load '{path}' with ExLlamaV2: {exc}") from exc
        self.model, self.config = model, config
        self._weights = torch.cuda.memory_allocated() - before
        self.tokenizer = folder_tokenizer(path)
        self.context_length = int(config.max_seq_len)
        self.vocab_size = int(config.vocab_size)
        self._pool: list[Any] = []  # caches of finished sequences, ready for new ones

    def _cache(self) -> Any:
        if self._pool:
            cache = self._pool.pop()
            cache.current_seq_len = 0
            return cache
        return self._cache_class(self.model, batch_size=1, max_seq_len=self.context_length)

    def new_cache(self) -> SequenceCache:
        return SequenceCache(self._cache())

    def release(self, cache: SequenceCache) -> None:
        if cache.cache is not None:
            self._pool.append(cache.cache)
            cache.cache = None

    def _run(self, cache: Any, ids: Sequence[int], last_only: bool) -> torch.Tensor:
        import torch

        if cache.current_seq_len + len(ids) > self.context_length:
            raise LoaderError(f"the sequence would hold {cache.current_seq_len + len(ids)} tokens; this model's "
                              f"context is {self.context_length}")
        input_ids = torch.tensor([list(ids)], dtype=torch.long)
        out = self.model.forward(input_ids, cache, last_id_only=last_only)
        return out[0, :, :self.vocab_size].float()  # the head may be padded past the vocabulary

    def forward(self, caches: Sequence[SequenceCache], new_ids: Sequence[Sequence[int]]) -> torch.Tensor:
        import torch

        with torch.inference_mode():
            return torch.stack([self._run(handle.cache, ids, True)[-1] for handle, ids in zip(caches, new_ids)])

    def logits(self, ids: Sequence[int], last_only: bool = True, loras: tuple = ()) -> torch.Tensor:
        """Logits for ``ids`` run alone in a scratch cache: [vocab] with ``last_only``, else [len(ids), vocab]."""
        import torch

        scratch = self._cache()
        try:
            with torch.inference_mode():
                out = self._run(scratch, ids, last_only)
        finally:
            self._pool.append(scratch)
        return out[-1] if last_only else out

    def memory_bytes(self) -> int:
        return int(self._weights)

    def close(self) -> None:
        if self.model is not None:
            self.model.unload()
        self.model, self._pool = None, []
        gc.collect()
        import torch

        torch.cuda.empty_cache()


if TYPE_CHECKING:  # the type checker holds the model to what its capabilities promise
    def _promises(model: ExLlamaV2Model) -> SteppedModel:
        return model
