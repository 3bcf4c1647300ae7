"""The transformers loader: Hugging Face safetensors folders and .gguf files.

torch and transformers are imported only when a model is loaded, so listing
loaders stays cheap and a missing backend is reported with an install hint.
"""

from __future__ import annotations

import gc
import logging
import uuid
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from loaders.base import (CONVERTS, NATIVE, BaseLoader, Capabilities, EmbeddingModel, ImagePrompt, LoadedModel,
                          LoaderUnavailable, LoadOptions, LoraModel, Progress, PromptImage, SupportsBlockPrefix,
                          SupportsGuidance, SupportsImages, missing_module, require_backend)
from loaders.hf import (DTYPE_BYTES, HF_INSTALL, HF_OPTIONS, HF_REQUIRES, HFTokenizer, check_model_path, cuda_note,
                        ensure_converted, eos_ids, from_pretrained, hf_load_kwargs, is_hf_folder, loaded_bytes,
                        quant_method, resolve_device, resolve_dtype)
from loaders.embedding_loader import is_sentence_folder
from loaders.gguf_header import is_projector, read_header
from loaders.options import check_options, refuse_off_device
from loaders.lora import Adapters, Selection, check_fits
from loaders.vision import IMAGE_FAMILIES, VisionModel, is_vision_folder, takes_images

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)


def register_loaders(register: Callable[[Any], None]) -> None:
    register(TransformersLoader())


class TransformersLoader(BaseLoader):
    name = "transformers"
    description = ("Hugging Face transformers: safetensors model folders (vision-language ones too) and .gguf files "
                   "(dequantized on load)")
    capabilities = Capabilities(batched_forward=True, lora=True, logprobs=True,
                                devices=("cpu", "cuda", "mps"), formats=("hf-folder", "gguf"), prefix_cache="blocks",
                                embeddings=True, images=True)
    requires = HF_REQUIRES
    install_hint = HF_INSTALL
    options = HF_OPTIONS
    smaller_load = "a smaller dtype (bfloat16 or float16 instead of float32), or load_in 8bit or 4bit on CUDA"

    def match(self, path: Path) -> int:
        """A Hugging Face folder of plain weights is its own format; a .gguf it reads by converting it.
        Folders that declare a quantization (GPTQ, EXL2, ...) are left to the loaders that read them, as are a
        llama.cpp model's projector files (mmproj)."""
        if is_hf_folder(path):  # (a sentence-embedding folder is the embedding loader's)
            return NATIVE if quant_method(path) is None and not is_sentence_folder(path) else 0
        return CONVERTS if path.is_file() and path.suffix == ".gguf" and not is_projector(path) else 0

    def prepare(self, path: Path, workdir: Path, progress: Progress | None = None) -> Path:
        """A .gguf is dequantized once into ``workdir`` (a safetensors folder loads in seconds after that)."""
        return ensure_converted(path, workdir, progress) if path.suffix == ".gguf" else path

    def estimate_bytes(self, path: Path, options: LoadOptions) -> int:
        """The weights in the dtype they will be loaded as (a .gguf not converted yet: its parameter count, from
        its header, in that dtype)."""
        device = "cuda" if options.device.startswith("cuda") else options.device
        dtype = options.dtype if options.dtype != "auto" else ("float32" if device in ("cpu", "auto") else "float16")
        header = read_header(path) if Path(path).suffix == ".gguf" else None
        full = header.tensor_values * DTYPE_BYTES[dtype] if header else loaded_bytes(path, dtype)
        shrink = {"8bit": 2, "4bit": 3.5}.get(check_options(self, options.extra)["load_in"], 1)
        return int(full / shrink)

    def load(self, path: Path, options: LoadOptions, progress: Progress | None = None) -> LoadedModel:
        require_backend(self)
        path = Path(path)
        check_model_path(path)
        if path.suffix == ".gguf" and missing_module(["gguf"]):
            raise LoaderUnavailable(self.name, "gguf", "pip install gguf")
        import torch

        if options.threads:
            torch.set_num_threads(options.threads)
        values = check_options(self, options.extra)
        device = resolve_device(options.device)
        refuse_off_device(self, values, device, cuda_note(device))
        dtype = resolve_dtype(options.dtype, device)
        kwargs = hf_load_kwargs(values, device, dtype)
        if progress:
            progress(0.0, f"loading {path.name} on {device} as {dtype}")
        vision = path.is_dir() and is_vision_folder(path)
        model, tokenizer = from_pretrained(path, device, dtype, vision=vision, **kwargs)
        if progress:
            progress(1.0, f"loaded {path.name}")
        loaded = TransformersModel(path, model, tokenizer.tokenizer if vision else tokenizer,
                                   str(model.device) if "device_map" in kwargs else device, dtype,
                                   processor=tokenizer if vision else None)
        loaded.load_options = values
        return loaded


class TransformersModel:
    """A transformers causal LM (or vision-language model: ``processor`` given) driven step by step; joined
    sequences decode in one batched forward."""

    loader = "transformers"

    def __init__(self, path: Path, model: Any, tokenizer: Any, device: str, dtype: str, processor: Any = None):
        self.path, self.name = path, path.stem if path.is_file() else path.name
        self.model, self.device, self.dtype = model, device, dtype
        self.load_options: dict[str, Any] = {}  # the loader sets the options it loaded with
        self.tokenizer = HFTokenizer(tokenizer, eos_ids(getattr(model, "generation_config", None), tokenizer))
        text_config = model.config.get_text_config()
        self.context_length = int(getattr(text_config, "max_position_embeddings", 0) or 2048)
        self.vocab_size = int(model.get_output_embeddings().weight.shape[0])
        self.embedding_size = int(model.get_input_embeddings().weight.shape[1])
        self.embedding_source = f"{self.name} (mean-pooled hidden states)"
        attention = getattr(model.config, "_attn_implementation", None) or "sdpa"
        batched = _plain_dynamic_cache(self._empty_cache()) and attention in ("sdpa", "eager")
        # Sliding-window layers keep only their last W tokens, so their KV cannot be paged into reusable
        # blocks, and flash attention takes no 4D mask: such models neither batch nor cache prefixes (outputs
        # stay exact; the Model tab says so).
        self.vision = VisionModel(processor, model) if processor is not None and takes_images(model) else None
        if processor is not None and self.vision is None:
            log.warning("%s is a %s vision-language model, whose images this workbench cannot feed yet (it takes "
                        "text only); image families: %s", self.name, model.config.model_type,
                        ", ".join(IMAGE_FAMILIES))
        self.image_placeholder = self.vision.placeholder if self.vision is not None else ""
        self.capabilities = replace(TransformersLoader.capabilities, batched_forward=batched,
                                    prefix_cache="blocks" if batched else "", images=self.vision is not None)
        from loaders.kv_batch import KVPool

        self._pool = KVPool(device, attention)
        self.adapters = Adapters(model)
        self._instance = uuid.uuid4().hex  # a reload is another instance: its prefix-cache blocks never mix

    def _empty_cache(self) -> Any:
        from transformers import DynamicCache

        return DynamicCache(config=self.model.config)

    def new_cache(self, loras: Selection = ()) -> Any:
        from loaders.kv_batch import SequenceCache

        adapter = self.adapters.resolve(tuple(loras))
        if self.capabilities.batched_forward:
            return SequenceCache(self._pool, adapter)
        return SequenceCache(None, adapter, own=self._empty_cache())

    def logits(self, ids: Sequence[int], last_only: bool = True, loras: Selection = ()) -> torch.Tensor:
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

    def embed(self, inputs: Sequence[Sequence[int]]) -> list[list[float]]:
        """The base model's last hidden states (adapters off), mean-pooled over each input's tokens, L2-normalised;
        run it between engine steps (webui/embeddings.py does)."""
        from loaders.embedding import embed_batched

        def hidden(ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            out = self.adapters.base(input_ids=ids, attention_mask=mask, output_hidden_states=True, use_cache=False,
                                     logits_to_keep=1)
            return out.hidden_states[-1]

        if self.adapters.peft is None:
            return embed_batched(hidden, inputs, 0, self.device, "mean")
        with self.adapters.peft.disable_adapter():  # the adapters' layers sit inside the base model
            return embed_batched(hidden, inputs, 0, self.device, "mean")

    # -- images (loaders/vision.py) ----------------------------------------------------
    def encode_images(self, text: str, images: Sequence[PromptImage], add_special_tokens: bool) -> ImagePrompt:
        if self.vision is None:
            raise ValueError(f"{self.name} takes no images: it is a text-only model; load a vision-language model")
        return self.vision.encode(text, images, add_special_tokens)

    def image_tokens(self, images: Sequence[PromptImage]) -> list[int]:
        return self.vision.added_tokens(images) if self.vision is not None else [0] * len(images)

    def attach_images(self, cache: Any, media: Any) -> None:
        if cache.length:
            raise RuntimeError("images are attached to a sequence before it reads its prompt")
        cache.images = media

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
        if cache.pool is not None:
            cache.pool.release(cache)
        cache.released, cache.own = True, None

    # -- prefix cache (see webui/engine/prefix_cache.py) ------------------------------------
    def prefix_namespace(self, loras: Selection = ()) -> str:
        """What a sequence's KV depends on besides its tokens: this model instance and its adapters."""
        return f"{self._instance}|{self.adapters.identity(tuple(loras))}"

    def prefix_namespace_live(self, namespace: str) -> bool:
        """False once the namespace's model instance or one of its adapters is gone."""
        instance, _, adapters = namespace.partition("|")
        return instance == self._instance and self.adapters.identity_live(adapters)

    def export_kv(self, cache: Any, start: int, end: int) -> tuple[Any, int]:
        import torch

        from loaders.kv_batch import export_kv

        with torch.inference_mode():  # the pool is made in the forward's inference mode
            return export_kv(self._pool, cache, start, end)

    def import_kv(self, cache: Any, blocks: Sequence[Any], n_tokens: int) -> None:
        import torch

        from loaders.kv_batch import import_kv

        with torch.inference_mode():
            import_kv(self._pool, cache, blocks, n_tokens)

    def forward(self, caches: Sequence[Any], new_ids: Sequence[Sequence[int]]) -> torch.Tensor:
        import torch

        from loaders.kv_batch import batched_forward

        net, with_adapters = self.adapters.model, self.adapters.peft is not None
        with torch.inference_mode():
            if self.capabilities.batched_forward:
                return batched_forward(net, self._pool, caches, new_ids, with_adapters)
            rows = []
            for handle, ids in zip(caches, new_ids):  # e.g. sliding-window caches: one sequence at a time
                rows.append(self._forward_alone(net, handle, ids, with_adapters))
            return torch.stack(rows)

    def _forward_alone(self, net: Any, handle: Any, ids: Sequence[int], with_adapters: bool) -> torch.Tensor:
        """One sequence's step in its own DynamicCache; its next-token logits."""
        import torch

        from loaders.vision import done_with_features, image_feed

        feed: dict[str, Any] = {"input_ids": torch.tensor([list(ids)], dtype=torch.long, device=self.device)}
        if handle.images is not None:
            places = torch.arange(handle.length, handle.length + len(ids), device=self.device).unsqueeze(0)
            feed = image_feed(net, [handle], feed["input_ids"], places, [handle.length])
        extra = {"adapter_names": [handle.adapter]} if with_adapters else {}
        out = net(**feed, cache=handle.own, use_cache=True, logits_to_keep=1, **extra)
        handle.length += len(ids)
        done_with_features(handle)
        return out.logits[0, -1]

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


if TYPE_CHECKING:  # the type checker holds the model to what its capabilities promise
    def _promises(model: TransformersModel) -> tuple[LoraModel, SupportsBlockPrefix, SupportsGuidance,
                                                     EmbeddingModel, SupportsImages]:
        return model, model, model.tokenizer, model, model
