"""What every loader of Hugging Face folders shares: reading a folder and its tokenizer, devices and dtypes,
the quantization method a folder declares, and converting a .gguf to a safetensors folder once.

torch and transformers are imported inside the functions, so importing this module stays cheap.
"""

from __future__ import annotations


import fcntl
import hashlib
import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from loaders.base import LoaderUnavailable, ModelLoadError, Progress, atomic_folder, missing_module
from loaders.options import LoadOption, LoadOptionError

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

log = logging.getLogger(__name__)

HF_REQUIRES = ("torch", "transformers", "safetensors")
HF_INSTALL = "pip install torch==2.13.0 transformers safetensors"


ATTENTION = LoadOption(
    "attn_implementation", str, "auto", "Attention kernel: auto (transformers picks; sdpa where it can), sdpa "
    "(PyTorch's fused attention), eager (plain), or flash_attention_2 (CUDA, with the flash-attn package).",
    label="attention", choices=("auto", "sdpa", "eager", "flash_attention_2"))
TRUST_REMOTE_CODE = LoadOption(
    "trust_remote_code", bool, False, "Run Python code that ships in the model folder (models with their own "
    "architecture code). Off by default: only turn it on for folders you trust.", label="trust remote code")
LOAD_IN = LoadOption(
    "load_in", str, "full", "Quantize while loading through bitsandbytes: 8bit or 4bit (NF4) weights, on CUDA only; "
    "full keeps the dtype.", label="load in (bitsandbytes)", choices=("full", "8bit", "4bit"), devices=("cuda",))
HF_OPTIONS = (
    ATTENTION,
    LOAD_IN,
    LoadOption("device_map", str, "single", "Place the layers: single (all on the Device chosen), or across "
               "the GPUs (and the CPU for what does not fit) with accelerate: auto, balanced, sequential.",
               label="device map", choices=("single", "auto", "balanced", "sequential"), devices=("cuda",)),
    LoadOption("max_memory", str, "", "With a device map: the most memory per device, e.g. "
               "'0=20GiB,1=20GiB,cpu=64GiB' (empty: what each has).", label="max memory per device",
               devices=("cuda",)),
    TRUST_REMOTE_CODE,
)


def max_memory(text: str) -> dict[Any, str]:
    """'0=20GiB,cpu=64GiB' -> {0: '20GiB', 'cpu': '64GiB'} as accelerate takes it."""
    out: dict[Any, str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        device, sep, amount = (x.strip() for x in part.partition("="))
        if not sep or not (device.isdigit() or device in ("cpu", "disk")) or \
                not amount[:1].isdigit() or not amount.lower().endswith(("gib", "gb", "mib", "mb")):
            raise LoadOptionError("max_memory", f"max_memory is DEVICE=AMOUNT pairs separated by commas, DEVICE a "
                                                f"GPU number or cpu, AMOUNT like 20GiB; got {part!r}")
        out[int(device) if device.isdigit() else device] = amount
    return out


def hf_load_kwargs(values: dict[str, Any], device: str, dtype: str) -> dict[str, Any]:
    """from_pretrained's keyword arguments for the checked HF_OPTIONS ``values`` (refusing combinations that
    cannot work; the per-device checks are refuse_off_device's)."""
    kwargs: dict[str, Any] = {}
    attention = values.get("attn_implementation", "auto")
    if attention != "auto":
        if attention == "flash_attention_2":
            if not device.startswith("cuda"):
                raise LoadOptionError("attn_implementation", "attn_implementation=flash_attention_2 runs on CUDA "
                                      f"only, but this load runs on {device}; choose sdpa or eager")
            if missing_module(["flash_attn"]):
                raise LoadOptionError("attn_implementation", "attn_implementation=flash_attention_2 needs the "
                                      "flash-attn package (pip install flash-attn); choose sdpa or eager")
        kwargs["attn_implementation"] = attention
    if values.get("trust_remote_code"):
        log.warning("trust_remote_code is on: Python code from the model folder will run in this process")
        kwargs["trust_remote_code"] = True
    load_in = values.get("load_in", "full")
    if load_in != "full":
        if missing_module(["bitsandbytes"]):
            raise LoadOptionError("load_in", f"load_in={load_in} needs the bitsandbytes package "
                                  "(pip install bitsandbytes); choose full")
        from transformers import BitsAndBytesConfig
        import torch

        kwargs["quantization_config"] = BitsAndBytesConfig(
            load_in_8bit=load_in == "8bit", load_in_4bit=load_in == "4bit", bnb_4bit_quant_type="nf4",
            bnb_4bit_compute_dtype=getattr(torch, dtype))
        kwargs.setdefault("device_map", {"": device})  # bitsandbytes quantizes as the weights reach the GPU
    if values.get("device_map", "single") != "single":
        kwargs["device_map"] = values["device_map"]
        if values.get("max_memory"):
            kwargs["max_memory"] = max_memory(values["max_memory"])
    elif values.get("max_memory"):
        raise LoadOptionError("max_memory", "max_memory applies with a device map (auto, balanced or "
                                            "sequential); set device_map, or leave max_memory empty")
    return kwargs


def is_hf_folder(path: Path) -> bool:
    return path.is_dir() and (path / "config.json").is_file()


def quant_method(path: Path) -> str | None:
    """The quantization a Hugging Face folder declares ('gptq', 'exl2', ...), or None for plain weights.

    Read from config.json's quantization_config; AutoGPTQ's quantize_config.json and EXL2's
    measurement.json count too, as the tools that write them mean them to.
    """
    if not path.is_dir():
        return None
    if (path / "quantize_config.json").is_file():
        return "gptq"
    if (path / "measurement.json").is_file():
        return "exl2"
    try:
        quant = json.loads((path / "config.json").read_text()).get("quantization_config") or {}
    except (OSError, ValueError, AttributeError):
        return None
    method = str(quant.get("quant_method", "")).lower() if isinstance(quant, dict) else ""
    return method or None


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


FLOAT_DTYPES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2}
ELEMENT_BYTES = {**FLOAT_DTYPES, "I64": 8, "I32": 4, "U32": 4, "I16": 2, "U16": 2, "I8": 1, "U8": 1, "BOOL": 1,
                 "F8_E4M3": 1, "F8_E5M2": 1}


DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


def loaded_bytes(path: Path, dtype: str) -> int:
    """The weights' size once loaded as ``dtype``: float tensors of the folder's safetensors files converted to
    it (a bfloat16 folder loaded in float32 doubles), other tensors as stored; read from the files' headers
    only. Folders without safetensors count their weight files as they are."""
    from loaders.base import weights_on_disk

    files = sorted(Path(path).glob("*.safetensors")) if Path(path).is_dir() else []
    if not files:
        return weights_on_disk(path)
    size = DTYPE_BYTES.get(dtype, 4)
    total = 0
    for file in files:
        with open(file, "rb") as f:
            header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
        for name, info in header.items():
            if name == "__metadata__":
                continue
            numel = 1
            for dim in info["shape"]:
                numel *= dim
            stored = info["dtype"]
            total += numel * (size if stored in FLOAT_DTYPES else ELEMENT_BYTES.get(stored, 4))
    return total


def cuda_note(device: str) -> str:
    """Why a CUDA-only option cannot apply on ``device`` (for refuse_off_device's message)."""
    if device.startswith("cuda"):
        return ""
    import torch

    return "torch sees no CUDA GPU here" if not torch.cuda.is_available() else "choose Device cuda"


def resolve_dtype(dtype: str, device: str) -> str:
    if dtype != "auto":
        return dtype
    if device.startswith("cuda"):
        import torch

        return "bfloat16" if torch.cuda.is_bf16_supported() else "float16"
    return "float32"


def from_pretrained(path: Path, device: str, dtype: str, vision: bool = False, **load_kwargs: Any
                    ) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """The model and tokenizer of ``path`` on ``device`` in ``dtype``; ``load_kwargs`` go to the model's
    from_pretrained (hf_load_kwargs): with a device_map the layers are placed where it says. ``vision``: an
    image-text-to-text model (loaders/vision.py), whose processor comes in the tokenizer's place (its tokenizer
    is its ``.tokenizer``)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText, AutoTokenizer

    from loaders.vision import load_processor

    kwargs: dict[str, Any] = {}
    folder = path
    if path.suffix == ".gguf":
        folder, kwargs["gguf_file"] = path.parent, path.name
    trust = {"trust_remote_code": True} if load_kwargs.get("trust_remote_code") else {}
    try:
        tokenizer = load_processor(folder, local_files_only=True, **trust) if vision else \
            AutoTokenizer.from_pretrained(folder, local_files_only=True, **kwargs, **trust)
        model = (AutoModelForImageTextToText if vision else AutoModelForCausalLM).from_pretrained(
            folder, dtype=getattr(torch, dtype), local_files_only=True, **kwargs, **load_kwargs)
    except (OSError, ValueError, KeyError, ImportError, RuntimeError) as exc:  # CUDA out of memory, kernels
        raise ModelLoadError(f"could not load '{path}' with transformers: {exc}") from exc
    if "device_map" not in load_kwargs:
        # transformers' stubs type the decorated PreTrainedModel.to's first argument as the model itself
        model.to(device)  # type: ignore[arg-type]
    model.eval()
    return model, tokenizer


def convert_gguf(gguf_path: Path, out_dir: Path, marker: dict | None = None) -> Path:
    """Dequantize a .gguf file once into a safetensors folder, written atomically with ``marker`` (what it was
    made from) inside it, so a folder is whole and says its source, or is not there."""
    missing = missing_module([*HF_REQUIRES, "gguf"])
    if missing:
        raise LoaderUnavailable("transformers", missing, f"{HF_INSTALL} gguf")
    check_model_path(gguf_path)
    model, tokenizer = from_pretrained(gguf_path, "cpu", "float32")
    quantizer = getattr(model, "hf_quantizer", None)  # set only where the file was quantized
    if quantizer is not None:
        quantizer.remove_quantization_config(model)
    with atomic_folder(out_dir) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        if marker is not None:
            (tmp / MARKER).write_text(json.dumps(marker))
    return out_dir


MARKER = "converted_from.json"
_hashes: dict[tuple[str, int, int], str] = {}  # (path, size, mtime_ns) -> sha256, so one process hashes once


def content_key(path: Path) -> dict:
    """What a file is, whatever its path or mtime (checkouts and venvs sharing one user data dir each have their
    own copy of the same file): its size and SHA-256."""
    st = path.stat()
    memo = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if memo not in _hashes:
        digest = hashlib.sha256()
        with path.open("rb") as f:
            while chunk := f.read(2**22):
                digest.update(chunk)
        _hashes[memo] = digest.hexdigest()
    return {"size": st.st_size, "sha256": _hashes[memo]}


def _made_from(out: Path, source: dict) -> bool:
    """Whether the folder ``out`` was converted from a file with ``source``'s content."""
    try:
        made = json.loads((out / MARKER).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(made, dict) and all(made.get(k) == source[k] for k in ("size", "sha256"))


def ensure_converted(gguf: Path, out: Path, progress: Progress | None = None) -> Path:
    """Convert ``gguf`` to a safetensors folder at ``out`` unless that was done for a file with the same content.

    Processes converting into one folder at once take turns (a lock file beside it): the second finds the first's
    folder and uses it.
    """
    source = {"gguf": gguf.name, **content_key(gguf)}
    if _made_from(out, source):
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / f".{out.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also if this process dies
        if _made_from(out, source):
            return out  # another process converted it while this one waited
        message = f"converting {gguf.name} to safetensors once (later loads take seconds)"
        log.warning("%s -> %s", message, out)
        if progress:
            progress(0.0, message)
        convert_gguf(gguf, out, source)
    if progress:
        progress(1.0, f"converted {gguf.name}")
    return out


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
    return HFTokenizer(tokenizer, eos_ids(generation, tokenizer))


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

    def special_tokens(self) -> dict[str, str]:
        """bos_token and eos_token as text (what chat templates write)."""
        return {"bos_token": self._tok.bos_token or "", "eos_token": self._tok.eos_token or ""}

    def guidance_tokenizer(self) -> Any:
        """llguidance's view of this vocabulary (for structured output); built once (well under a second)."""
        import llguidance.hf

        if getattr(self, "_guidance", None) is None:
            self._guidance = llguidance.hf.from_tokenizer(self._tok, eos_token=sorted(self.eos_token_ids))
        return self._guidance

    def apply_chat_template(self, messages: list[dict], add_generation_prompt: bool = True,
                            tools: list[dict] | None = None) -> str:
        if not self.chat_template:
            raise ModelLoadError("this model has no chat template; use a raw completion instead")
        return self._tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt,
                                             tools=tools)

    def token_strings(self, ids: Sequence[int]) -> list[str]:
        return [self._tok.decode([i], skip_special_tokens=False) for i in ids]


def eos_ids(generation_config: Any, tokenizer: Any) -> frozenset[int]:
    """The ids that end a reply: the generation config's eos ids and the tokenizer's."""
    ids: set[int] = set()
    for source in (getattr(generation_config, "eos_token_id", None), getattr(tokenizer, "eos_token_id", None)):
        if isinstance(source, int):
            ids.add(source)
        elif isinstance(source, (list, tuple)):
            ids.update(int(i) for i in source)
    return frozenset(ids)
