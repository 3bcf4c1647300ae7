"""The GPTQ loader: GPTQ-quantized Hugging Face folders, on the CPU or a GPU, through transformers + gptqmodel.

transformers integrates gptqmodel (with optimum) for GPTQ checkpoints, so a loaded
GPTQ model is an ordinary transformers model with quantized linear layers: it runs
through the same TransformersModel (batched steps, our sampling on its logits).
Make one with ``python launch.py quantize gptq MODEL --bits 4``.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from loaders.base import NATIVE, Capabilities, LoadedModel, LoadOptions, ModelLoadError, Progress, require_backend
from loaders.extras import EXTRAS
from loaders.hf import from_pretrained, quant_method, resolve_device
from loaders.transformers_loader import TransformersModel


def register_loaders(register: Callable[[Any], None]) -> None:
    register(GPTQLoader())


def is_gptq_folder(path: Path) -> bool:
    """A folder with quantize_config.json, or a config.json whose quantization_config says gptq."""
    return quant_method(path) == "gptq"


class GPTQLoader:
    name = "gptq"
    description = "GPTQ-quantized folders (quantize_config.json) via transformers + gptqmodel, on CPU or GPU"
    capabilities = Capabilities(batched_forward=True, lora=False, logprobs=True, devices=("cpu", "cuda"),
                                formats=("gptq",), prefix_cache="blocks")
    requires = ("torch", "transformers", "gptqmodel", "optimum")
    install_hint = EXTRAS["gptq"].hint

    def match(self, path: Path) -> int:
        return NATIVE if is_gptq_folder(path) else 0

    def prepare(self, path: Path, workdir: Path, progress: Progress | None = None) -> Path:
        return path

    def load(self, path: Path, options: LoadOptions, progress: Progress | None = None) -> LoadedModel:
        require_backend(self)
        path = Path(path)
        if not is_gptq_folder(path):
            raise ModelLoadError(f"'{path}' is not a GPTQ model folder (no quantize_config.json and no gptq "
                                 "quantization_config in config.json); make one with "
                                 "python launch.py quantize gptq MODEL --bits 4")
        import torch

        os.environ.setdefault("GPTQMODEL_CPU_WORKERS", str(options.threads or os.cpu_count() or 1))
        if options.threads:
            torch.set_num_threads(options.threads)
        device = resolve_device(options.device)
        dtype = options.dtype if options.dtype != "auto" else ("float16" if device.startswith("cuda") else "bfloat16")
        if progress:
            progress(0.0, f"loading the GPTQ model {path.name} on {device}")
        model, tokenizer = from_pretrained(path, device, dtype)
        if progress:
            progress(1.0, f"loaded {path.name}")
        loaded = TransformersModel(path, model, tokenizer, device, dtype)
        loaded.loader = self.name
        loaded.capabilities = replace(loaded.capabilities, lora=False, formats=self.capabilities.formats,
                                      devices=self.capabilities.devices)
        return loaded
