"""The embedding loader: sentence-embedding model folders (sentence-transformers' layout), for embeddings only.

A folder with ``modules.json`` or ``sentence_bert_config.json`` beside its ``config.json`` is read with
transformers' ``AutoModel`` and pooled as its ``1_Pooling/config.json`` says (mean, CLS or last token), then
L2-normalised: what sentence-transformers computes for its Transformer, Pooling and Normalize modules, without
the package (which would bring scikit-learn and scipy for nothing used here). A folder with other modules (a
Dense projection, say) is refused with their names rather than embedded differently. The model generates no
text (``Capabilities.generates`` False): the engine refuses text requests for it; /v1/embeddings and the
``similar`` assert use it.
"""

from __future__ import annotations

import gc
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from loaders.base import NATIVE, BaseLoader, Capabilities, EmbeddingModel, LoadedModel, LoadOptions, ModelLoadError
from loaders.base import Progress, require_backend
from loaders.embedding import Pooling, embed_batched
from loaders.hf import (HF_INSTALL, HF_REQUIRES, HFTokenizer, check_model_path, eos_ids, loaded_bytes,
                        resolve_device, resolve_dtype)

if TYPE_CHECKING:
    import torch

SENTENCE_FILES = ("modules.json", "sentence_bert_config.json")
MODULES = "sentence_transformers.models."
KNOWN_MODULES = {MODULES + name for name in ("Transformer", "Pooling", "Normalize")}
POOLING_KEYS: dict[Pooling, str] = {"mean": "pooling_mode_mean_tokens", "cls": "pooling_mode_cls_token",
                                    "last": "pooling_mode_lasttoken"}
OTHER_POOLINGS = ("pooling_mode_max_tokens", "pooling_mode_mean_sqrt_len_tokens", "pooling_mode_weightedmean_tokens")


def register_loaders(register: Callable[[Any], None]) -> None:
    register(EmbeddingLoader())


def is_sentence_folder(path: Path) -> bool:
    """Whether ``path`` is a sentence-embedding model folder (sentence-transformers' files beside config.json)."""
    return path.is_dir() and (path / "config.json").is_file() and any((path / f).is_file() for f in SENTENCE_FILES)


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"could not read '{path}': {exc}") from exc


def read_pooling(folder: Path) -> Pooling:
    """How the folder pools its token vectors; a ModelLoadError naming what is not supported."""
    modules = _json(folder / "modules.json") if (folder / "modules.json").is_file() else []
    if not isinstance(modules, list) or not all(isinstance(m, dict) for m in modules):
        raise ModelLoadError(f"'{folder / 'modules.json'}' is not a list of modules")
    unknown = [str(m.get("type")) for m in modules if m.get("type") not in KNOWN_MODULES]
    if unknown:
        raise ModelLoadError(f"'{folder.name}' has sentence-transformers modules this loader does not run: "
                             f"{', '.join(unknown)} (it runs Transformer, Pooling and Normalize); use a model "
                             f"without them")
    pooling_dir = next((str(m.get("path") or "") for m in modules if m.get("type") == MODULES + "Pooling"),
                       "1_Pooling")
    config = folder / pooling_dir / "config.json"
    if not config.is_file():
        return "mean"  # sentence-transformers' pooling for a folder that names none
    data = _json(config)
    chosen = [mode for mode, key in POOLING_KEYS.items() if isinstance(data, dict) and data.get(key)]
    others = [key for key in OTHER_POOLINGS if isinstance(data, dict) and data.get(key)]
    if others or len(chosen) != 1:
        asked = ", ".join([*others, *chosen]) or "none"
        raise ModelLoadError(f"'{config}' asks for pooling {asked}; this loader pools by exactly one of "
                             f"{', '.join(POOLING_KEYS.values())}")
    return chosen[0]


def max_length(folder: Path, model_limit: int) -> int:
    """The tokens an input may have: the folder's max_seq_length (sentence_bert_config.json) within the model's."""
    config = folder / "sentence_bert_config.json"
    data = _json(config) if config.is_file() else {}
    given = data.get("max_seq_length") if isinstance(data, dict) else None
    return min(int(given), model_limit) if isinstance(given, int) and given > 0 else model_limit


class EmbeddingLoader(BaseLoader):
    name = "embedding"
    description = ("Sentence-embedding model folders (sentence-transformers' layout: modules.json, 1_Pooling), read "
                   "with transformers; embeddings only (/v1/embeddings, the similar assert)")
    capabilities = Capabilities(logprobs=False, devices=("cpu", "cuda", "mps"), formats=("sentence-transformers",),
                                embeddings=True, generates=False)
    requires = HF_REQUIRES
    install_hint = HF_INSTALL

    def match(self, path: Path) -> int:
        return NATIVE if is_sentence_folder(Path(path)) else 0

    def prepare(self, path: Path, workdir: Path, progress: Progress | None = None) -> Path:
        return path

    def estimate_bytes(self, path: Path, options: LoadOptions) -> int:
        dtype = options.dtype if options.dtype != "auto" else "float32"
        return loaded_bytes(path, dtype)

    def load(self, path: Path, options: LoadOptions, progress: Progress | None = None) -> LoadedModel:
        require_backend(self)
        path = Path(path)
        check_model_path(path)
        import torch
        from transformers import AutoModel, AutoTokenizer

        if options.threads:
            torch.set_num_threads(options.threads)
        pooling = read_pooling(path)
        device = resolve_device(options.device)
        dtype = resolve_dtype(options.dtype, device)
        if progress:
            progress(0.0, f"loading {path.name} on {device} as {dtype}")
        try:
            tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
            model = AutoModel.from_pretrained(path, dtype=getattr(torch, dtype), local_files_only=True)
        except (OSError, ValueError, KeyError, ImportError, RuntimeError) as exc:
            raise ModelLoadError(f"could not load '{path}' with transformers: {exc}") from exc
        model.to(device)
        model.eval()
        if progress:
            progress(1.0, f"loaded {path.name}")
        return SentenceEmbeddingModel(path, model, tokenizer, device, dtype, pooling)


class SentenceEmbeddingModel:
    """A sentence-embedding model: a vector per input, no text."""

    loader = "embedding"
    capabilities = EmbeddingLoader.capabilities

    def __init__(self, path: Path, model: Any, tokenizer: Any, device: str, dtype: str, pooling: Pooling):
        self.path, self.name, self.model, self.device, self.dtype = path, path.name, model, device, dtype
        self.pooling: Pooling = pooling
        self.load_options: dict[str, Any] = {}
        self.tokenizer = HFTokenizer(tokenizer, eos_ids(None, tokenizer))
        limit = int(getattr(model.config, "max_position_embeddings", 0) or 512)
        self.context_length = max_length(path, limit)
        self.embedding_size = int(model.config.hidden_size)
        self.vocab_size = int(model.get_input_embeddings().weight.shape[0])
        self.embedding_source = self.name
        self._pad = int(getattr(tokenizer, "pad_token_id", None) or 0)

    def embed(self, inputs: Sequence[Sequence[int]]) -> list[list[float]]:
        """The last hidden states pooled as the folder says, L2-normalised (run between engine steps)."""
        def hidden(ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            return self.model(input_ids=ids, attention_mask=mask).last_hidden_state

        return embed_batched(hidden, inputs, self._pad, self.device, self.pooling)

    def memory_bytes(self) -> int:
        return sum(p.numel() * p.element_size() for p in self.model.parameters())

    def close(self) -> None:
        self.model = None
        gc.collect()


if TYPE_CHECKING:  # the type checker holds the model to what its capabilities promise
    def _promises(model: SentenceEmbeddingModel) -> EmbeddingModel:
        return model
