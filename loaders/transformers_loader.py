"""The transformers loader: Hugging Face safetensors folders and .gguf files.

torch and transformers are imported only when a model is loaded, so listing
loaders stays cheap and a missing backend is reported with an install hint.
"""

from __future__ import annotations

import gc
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Sequence

from loaders.base import (Capabilities, LoadedModel, LoaderUnavailable, LoadOptions, ModelLoadError,
                          atomic_folder, missing_module, require_backend)
from loaders.lora import Adapters, Selection, check_fits

Progress = Callable[[float, str], None]


def register_loaders(register: Callable[[Any], None]) -> None:
    register(TransformersLoader())


class TransformersLoader:
    name = "transformers"
    description = "Hugging Face transformers: safetensors model folders and .gguf files (dequantized on load)"
    capabilities = Capabilities(batched_forward=True, lora=True, logprobs=True,
                                devices=("cpu", "cuda", "mps"), formats=("hf-folder", "gguf"), prefix_cache="blocks")
    requires = ("torch", "transformers", "safetensors")
    install_hint = "pip install torch==2.13.0 transformers safetensors"

    def can_load(self, path: Path) -> bool:
        from loaders.exllamav2_loader import is_exl2_folder
        from loaders.gptq_loader import is_gptq_folder

        if path.is_dir():  # quantized folders belong to their own loaders
            return (path / "config.json").is_file() and not is_exl2_folder(path) and not is_gptq_folder(path)
        return path.is_file() and path.suffix == ".gguf"

    def native_format(self, path: Path) -> bool:
        """A Hugging Face folder is read as is; a .gguf is dequantized (a native reader is preferred for it)."""
        return path.is_dir()

    def load(self, path: Path, options: LoadOptions, progress: Progress | None = None) -> LoadedModel:
        require_backend(self)
        path = Path(path)
        check_model_path(path)
        if path.suffix == ".gguf" and missing_module(["gguf"]):
            raise LoaderUnavailable(self.name, "gguf", "pip install gguf")
        import torch

        if options.threads:
            torch.set_num_threads(options.threads)
        device = resolve_device(options.device)
        dtype = resolve_dtype(options.dtype, device)
        if progress:
            progress(0.0, f"loading {path.name} on {device} as {dtype}")
        model, tokenizer = _from_pretrained(path, device, dtype)
        if progress:
            progress(1.0, f"loaded {path.name}")
        return TransformersModel(path, model, tokenizer, device, dtype)


def check_model_path(path: Path) -> None:
    if not path.exists():
        raise ModelLoadError(f"model path '{path}' does not exist")
    if path.is_dir() and not (path / "config.json").is_file():
        raise ModelLoadError(f"'{path}' is not a model folder: it has no config.json (expected a Hugging Face "
                             "folder with config.json and *.safetensors, or a .gguf file)")
    if path.is_file() and path.suffix != ".gguf":
        raise ModelLoadError(f"'{path}' is not a model: expected a folder with config.json or a .gguf file")


def resolve_device(device: str) -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ModelLoadError(f"device '{device}' was asked for, but torch sees no CUDA GPU here; choose cpu or auto "
                             "(Device in the Model tab, or --device cpu)")
    if device == "mps" and not torch.backends.mps.is_available():
        raise ModelLoadError("device 'mps' was asked for, but torch has no MPS support here; choose cpu or auto "
                             "(Device in the Model tab, or --device cpu)")
    return device


def resolve_dtype(dtype: str, device: str) -> str:
    if dtype != "auto":
        return dtype
    if device.startswith("cuda"):
        import torch

        return "bfloat16" if torch.cuda.is_bf16_supported() else "float16"
    return "float32"


def _from_pretrained(path: Path, device: str, dtype: str):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kwargs: dict[str, Any] = {}
    folder = path
    if path.suffix == ".gguf":
        folder, kwargs["gguf_file"] = path.parent, path.name
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True, **kwargs)
        model = AutoModelForCausalLM.from_pretrained(
            folder, dtype=getattr(torch, dtype), local_files_only=True, **kwargs)
    except (OSError, ValueError, KeyError) as exc:
        raise ModelLoadError(f"could not load '{path}' with transformers: {exc}") from exc
    model.to(device).eval()
    return model, tokenizer


def convert_gguf(gguf_path: Path, out_dir: Path) -> Path:
    """Dequantize a .gguf file once into a safetensors folder (written atomically)."""
    require_backend(TransformersLoader())
    if missing_module(["gguf"]):
        raise LoaderUnavailable("transformers", "gguf", "pip install gguf")
    check_model_path(gguf_path)
    model, tokenizer = _from_pretrained(gguf_path, "cpu", "float32")
    if getattr(model, "hf_quantizer", None) is not None:
        model.hf_quantizer.remove_quantization_config(model)
    with atomic_folder(out_dir) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    return out_dir


def folder_tokenizer(folder: Path) -> "HFTokenizer":
    """The Hugging Face tokenizer (and eos ids from generation_config.json) of a model folder.

    For backends that run a folder's weights themselves (ExLlamaV2) but keep its HF tokenizer files,
    so chat templates and token strings are the same as with the transformers loader.
    """
    from transformers import AutoTokenizer, GenerationConfig

    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    except (OSError, ValueError, KeyError) as exc:
        raise ModelLoadError(f"could not read the tokenizer in '{folder}': {exc}") from exc
    try:
        generation = GenerationConfig.from_pretrained(folder, local_files_only=True)
    except (OSError, ValueError):
        generation = None
    return HFTokenizer(tokenizer, _eos_ids(generation, tokenizer))


class HFTokenizer:
    """Our Tokenizer protocol over a transformers tokenizer."""

    def __init__(self, tokenizer: Any, eos_ids: frozenset[int]):
        self._tok = tokenizer
        self.eos_token_ids = eos_ids
        self.chat_template: str | None = getattr(tokenizer, "chat_template", None)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=add_special_tokens))

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return self._tok.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def apply_chat_template(self, messages: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        if not self.chat_template:
            raise ModelLoadError("this model has no chat template; use a raw completion instead")
        return self._tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)

    def token_strings(self, ids: Sequence[int]) -> list[str]:
        return [self._tok.decode([i], skip_special_tokens=False) for i in ids]


class TransformersModel:
    """A transformers causal LM driven step by step; joined sequences decode in one batched forward."""

    loader = "transformers"

    def __init__(self, path: Path, model: Any, tokenizer: Any, device: str, dtype: str):
        from loaders.kv_batch import BatchKV

        self.path, self.name = path, path.stem if path.is_file() else path.name
        self.model, self.device, self.dtype = model, device, dtype
        self.tokenizer = HFTokenizer(tokenizer, _eos_ids(getattr(model, "generation_config", None), tokenizer))
        self.context_length = int(getattr(model.config, "max_position_embeddings", 0) or 2048)
        self.vocab_size = int(model.get_output_embeddings().weight.shape[0])
        batched = _plain_dynamic_cache(self._empty_cache())
        # Sliding-window layers keep only their last W tokens, so their KV cannot be sliced into reusable
        # blocks: such models neither batch nor cache prefixes (outputs stay exact; the Model tab says so).
        self.capabilities = replace(TransformersLoader.capabilities, batched_forward=batched,
                                    prefix_cache="blocks" if batched else "")
        self._batch = BatchKV(device)
        self.adapters = Adapters(model)
        self._instance = uuid.uuid4().hex  # a reload is another instance: its prefix-cache blocks never mix

    def _empty_cache(self) -> Any:
        from transformers import DynamicCache

        return DynamicCache(config=self.model.config)

    def new_cache(self, loras: Selection = ()) -> Any:
        from loaders.kv_batch import SequenceCache

        return SequenceCache(self._empty_cache(), self.adapters.resolve(tuple(loras)))

    def logits(self, ids: Sequence[int], last_only: bool = True, loras: Selection = ()):
        """Logits for ``ids`` run alone, outside the batch (the engine's step is not disturbed).

        Shape [vocab] with ``last_only``, else [len(ids), vocab] (e.g. for perplexity).
        """
        import torch

        extra = {"adapter_names": [self.adapters.resolve(tuple(loras))]} if self.adapters.peft is not None else {}
        with torch.inference_mode():
            out = self.adapters.model(input_ids=torch.tensor([list(ids)], dtype=torch.long, device=self.device),
                                      cache=self._empty_cache(), use_cache=True,
                                      logits_to_keep=1 if last_only else 0, **extra)
        return out.logits[0, -1] if last_only else out.logits[0]

    # -- LoRA -------------------------------------------------------------------------
    def check_lora(self, path: Path) -> None:
        """Raise LoRAError unless the adapter at ``path`` fits this model's layers (nothing is loaded)."""
        check_fits(self.adapters.base, path)

    def add_lora(self, name: str, path: Path) -> None:
        """Load an adapter (refused, with the model untouched, if it does not fit)."""
        self.adapters.add(name, path)

    def remove_lora(self, name: str) -> None:
        self.adapters.remove(name)

    @property
    def loras(self) -> dict[str, Path]:
        return dict(self.adapters.loaded)

    def release(self, cache: Any) -> None:
        cache.released = True

    # -- prefix cache (see webui/engine/prefix_cache.py) ------------------------------------
    def prefix_namespace(self, loras: Selection = ()) -> str:
        """What a sequence's KV depends on besides its tokens: this model instance and its adapters."""
        return f"{self._instance}|{self.adapters.identity(tuple(loras))}"

    def prefix_namespace_live(self, namespace: str) -> bool:
        """False once the namespace's model instance or one of its adapters is gone."""
        instance, _, adapters = namespace.partition("|")
        return instance == self._instance and self.adapters.identity_live(adapters)

    def export_kv(self, cache: Any, start: int, end: int) -> tuple[Any, int]:
        from loaders.kv_batch import export_kv

        return export_kv(self._batch, cache, start, end)

    def import_kv(self, cache: Any, blocks: Sequence[Any], n_tokens: int) -> None:
        from loaders.kv_batch import import_kv

        import_kv(cache, blocks, n_tokens)

    def forward(self, caches: Sequence[Any], new_ids: Sequence[Sequence[int]]):
        import torch

        from loaders.kv_batch import batched_forward

        net, with_adapters = self.adapters.model, self.adapters.peft is not None
        with torch.inference_mode():
            if self.capabilities.batched_forward:
                return batched_forward(net, self._batch, caches, new_ids, with_adapters, self._empty_cache)
            rows = []
            for handle, ids in zip(caches, new_ids):  # e.g. sliding-window caches: one sequence at a time
                input_ids = torch.tensor([list(ids)], dtype=torch.long, device=self.device)
                extra = {"adapter_names": [handle.adapter]} if with_adapters else {}
                out = net(input_ids=input_ids, cache=handle.own, use_cache=True, logits_to_keep=1, **extra)
                handle.length += len(ids)
                rows.append(out.logits[0, -1])
            return torch.stack(rows)

    def memory_bytes(self) -> int:
        return sum(p.numel() * p.element_size() for p in self.model.parameters())

    def close(self) -> None:
        self.model = None
        self.adapters = Adapters(None)
        gc.collect()
        try:
            import torch

            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        except ImportError:
            pass


def _plain_dynamic_cache(cache: Any) -> bool:
    """Batching pads and slices layers' keys/values directly; only plain DynamicLayers allow that."""
    from transformers.cache_utils import DynamicLayer

    return all(type(layer) is DynamicLayer for layer in cache.layers)


def _eos_ids(generation_config: Any, tokenizer: Any) -> frozenset[int]:
    """The ids that end a reply: the generation config's eos ids and the tokenizer's."""
    ids: set[int] = set()
    for source in (getattr(generation_config, "eos_token_id", None), getattr(tokenizer, "eos_token_id", None)):
        if isinstance(source, int):
            ids.add(source)
        elif isinstance(source, (list, tuple)):
            ids.update(int(i) for i in source)
    return frozenset(ids)
