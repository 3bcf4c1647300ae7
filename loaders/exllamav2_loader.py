"""The ExLlamaV2 loader: EXL2-quantized model folders, on an NVIDIA GPU with CUDA only.

Where there is no CUDA GPU (or the exllamav2 package is missing) it is listed
as unavailable with the reason, and choosing it raises a clear error; nothing
else depends on it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from loaders.base import Capabilities, LoadedModel, LoaderUnavailable, LoadOptions, ModelLoadError, require_backend

NEEDS_GPU = "ExLlamaV2 needs an NVIDIA GPU with CUDA; this machine has none (use the transformers loader)"


def register_loaders(register: Callable[[Any], None]) -> None:
    register(ExLlamaV2Loader())


def is_exl2_folder(path: Path) -> bool:
    """An EXL2 folder: config.json with a quantization_config of quant_method 'exl2' (or an exl2 marker file)."""
    config = path / "config.json"
    if not (path.is_dir() and config.is_file()):
        return False
    try:
        quant = json.loads(config.read_text()).get("quantization_config") or {}
    except ValueError:
        return False
    return str(quant.get("quant_method", "")).lower() == "exl2" or (path / "measurement.json").is_file()


def cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


class ExLlamaV2Loader:
    name = "exllamav2"
    description = "ExLlamaV2: EXL2-quantized models on an NVIDIA GPU (CUDA only)"
    capabilities = Capabilities(batched_forward=False, lora=False, logprobs=True, devices=("cuda",),
                                formats=("exl2",))
    requires = ("exllamav2",)
    install_hint = "pip install exllamav2 (on a machine with an NVIDIA GPU and CUDA)"

    def unavailable_reason(self) -> str | None:
        """Why it cannot run here (checked after the package is found)."""
        return None if cuda_available() else NEEDS_GPU

    def can_load(self, path: Path) -> bool:
        return is_exl2_folder(path)

    native_format = can_load

    def load(self, path: Path, options: LoadOptions, progress=None) -> LoadedModel:
        if not cuda_available():
            raise LoaderUnavailable(self.name, "CUDA", self.install_hint, message=NEEDS_GPU)
        require_backend(self)
        raise ModelLoadError("the ExLlamaV2 backend is installed and a GPU is present, but running EXL2 models "
                             "through the engine is not implemented yet; use the transformers loader")
