"""The GPTQ loader: GPTQ-quantized Hugging Face folders, on the CPU or a GPU, through transformers + gptqmodel.

transformers integrates gptqmodel (with optimum) for GPTQ checkpoints, so a loaded
GPTQ model is an ordinary transformers model with quantized linear layers: it runs
through the same TransformersModel (batched steps, our sampling on its logits).
Make one with ``python launch.py quantize gptq MODEL --bits 4``.
"""

from __future__ import annotations

import logging
import os
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from loaders.base import (NATIVE, BaseLoader, Capabilities, LoadedModel, LoadOptions, ModelLoadError, Progress,
                          require_backend)
from loaders.extras import EXTRAS
from loaders.hf import ATTENTION, TRUST_REMOTE_CODE, cuda_note, from_pretrained, hf_load_kwargs, quant_method, \
    resolve_device
from loaders.options import LoadOption, LoadOptionError, check_options
from loaders.transformers_loader import TransformersModel

log = logging.getLogger(__name__)
CUDA_BACKENDS = ("triton", "exllama_v2", "marlin", "machete")
BACKEND = LoadOption(
    "backend", str, "auto", "gptqmodel's kernel: auto (the fastest that fits the device and the model), torch "
    "(anywhere), or on CUDA: triton, exllama_v2 (fast for batches), marlin (fast, 4-bit, sm80+), machete "
    "(Hopper).", label="kernel backend", choices=("auto", "torch", *CUDA_BACKENDS))


def gptqmodel_backend(name: str) -> str:
    """Our backend name as this gptqmodel version spells it (7.x prefixes GPTQ kernels with 'gptq_')."""
    try:
        from gptqmodel.utils.backend import BACKEND as Backends
    except ImportError:
        return name
    values = {b.value for b in Backends}
    return f"gptq_{name}" if f"gptq_{name}" in values else name


def register_loaders(register: Callable[[Any], None]) -> None:
    register(GPTQLoader())


def is_gptq_folder(path: Path) -> bool:
    """A folder with quantize_config.json, or a config.json whose quantization_config says gptq."""
    return quant_method(path) == "gptq"


def kernel_config(path: Path, backend: str) -> Any:
    """The loading attributes that make transformers + gptqmodel use ``backend``'s kernels."""
    from transformers import GPTQConfig

    return GPTQConfig(bits=quant_bits(path), backend=gptqmodel_backend(backend))


def quant_bits(path: Path) -> int:
    """The bits the folder's quantization config says (quantize_config.json or config.json)."""
    import json

    for name, key in (("quantize_config.json", None), ("config.json", "quantization_config")):
        try:
            data = json.loads((path / name).read_text())
        except (OSError, ValueError):
            continue
        data = data.get(key) if key else data
        if isinstance(data, dict) and isinstance(data.get("bits"), int):
            return data["bits"]
    return 4


class GPTQLoader(BaseLoader):
    name = "gptq"
    description = "GPTQ-quantized folders (quantize_config.json) via transformers + gptqmodel, on CPU or GPU"
    capabilities = Capabilities(batched_forward=True, lora=False, logprobs=True, devices=("cpu", "cuda"),
                                formats=("gptq",), prefix_cache="blocks")
    requires = ("torch", "transformers", "gptqmodel", "optimum")
    install_hint = EXTRAS["gptq"].hint
    options = (BACKEND, ATTENTION, TRUST_REMOTE_CODE)

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

        values = check_options(self, options.extra)
        os.environ.setdefault("GPTQMODEL_CPU_WORKERS", str(options.threads or os.cpu_count() or 1))
        if options.threads:
            torch.set_num_threads(options.threads)
        device = resolve_device(options.device)
        backend = values["backend"]
        if backend in CUDA_BACKENDS and not device.startswith("cuda"):
            raise LoadOptionError("backend", f"the GPTQ kernel backend {backend} runs on CUDA, but this load runs on "
                                             f"{device} ({cuda_note(device)}); choose auto or torch")
        dtype = options.dtype if options.dtype != "auto" else ("float16" if device.startswith("cuda") else "bfloat16")
        kwargs = hf_load_kwargs(values, device, dtype)
        if device.startswith("cuda"):
            kwargs["device_map"] = {"": device}  # gptqmodel picks its kernels for where the layers are loaded
            kwargs["use_kernels"] = False  # not the Hub's kernels (a download), gptqmodel's own
        if backend != "auto":
            kwargs["quantization_config"] = kernel_config(path, backend)
        if progress:
            progress(0.0, f"loading the GPTQ model {path.name} on {device} ({backend} kernels)")
        try:
            model, tokenizer = from_pretrained(path, device, dtype, **kwargs)
        except ModelLoadError as exc:
            if backend != "auto" or not device.startswith("cuda") or not isinstance(exc.__cause__, NotImplementedError):
                raise
            # gptqmodel's automatic choice can be a kernel that refuses this model's layer shapes (seen on an H200:
            # Machete wants widths divisible by 128, SmolLM2's key/value projections are 192 wide); triton takes any
            log.warning("gptqmodel's automatic kernel refused %s (%s); loading with the triton kernels", path.name,
                        exc.__cause__)
            kwargs["quantization_config"] = kernel_config(path, "triton")
            model, tokenizer = from_pretrained(path, device, dtype, **kwargs)
        if progress:
            progress(1.0, f"loaded {path.name}")
        loaded = TransformersModel(path, model, tokenizer, device, dtype)
        loaded.loader = self.name
        loaded.load_options = values
        loaded.capabilities = replace(loaded.capabilities, lora=False, formats=self.capabilities.formats,
                                      devices=self.capabilities.devices)
        return loaded
