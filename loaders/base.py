"""What every loader provides: the LoadedModel protocol, capabilities and errors.

The engine drives a model one step at a time through :meth:`LoadedModel.forward`:
each step hands in, for every running sequence, its cache and the token ids the
cache has not seen yet (the whole prompt on the first step, one token after),
and gets back the next-token logits of each. Loaders that cannot batch still
accept a list; they simply run its items one after another.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import (TYPE_CHECKING, Any, Callable, Iterator, Literal, Mapping, Protocol, Sequence, TypeGuard,
                    runtime_checkable)

if TYPE_CHECKING:
    import torch

Progress = Callable[[float, str], None]
"""Reports (fraction done in [0, 1], what is happening) while a model loads or converts."""

NATIVE, CONVERTS = 2, 1
"""Loader.match answers: the path is in the loader's own format / the loader reads it after converting it."""


class LoaderError(Exception):
    """Base class of the errors a loader raises for the user to read."""


class LoaderUnavailable(LoaderError):
    """The loader's backend package is not installed; ``install_hint`` says how."""

    def __init__(self, loader: str, missing: str, install_hint: str, message: str | None = None):
        super().__init__(message or f"loader '{loader}' needs the package '{missing}', which is not installed; "
                                    f"install it with: {install_hint}")
        self.loader, self.missing, self.install_hint = loader, missing, install_hint


class ModelLoadError(LoaderError):
    """The path is missing or is not a model this loader can read."""


PrefixMode = Literal["blocks", "native", ""]


@dataclass(frozen=True)
class Capabilities:
    batched_forward: bool = False
    lora: bool = False
    logprobs: bool = True
    devices: tuple[str, ...] = ("cpu",)
    formats: tuple[str, ...] = ()  # e.g. "hf-folder", "gguf"
    text_only: bool = False
    """The backend generates whole requests (a remote server: a TextBackend): no steps, no logits, no tokenizer of
    ours. Callers ask the properties below, which say what they need."""
    prefix_cache: PrefixMode = ""
    """How prompt KV already computed is reused (webui/engine/prefix_reuse.py picks the strategy): "blocks" (the
    engine keeps copies: the model is a SupportsBlockPrefix), "native" (the backend keeps them in its own cache: a
    SupportsNativePrefix), or "" (every prompt is prefilled in full)."""
    embeddings: bool = False
    """It gives a vector per text (an EmbeddingModel): /v1/embeddings and the ``similar`` assert use it."""
    generates: bool = True
    """It writes text. False: an embedding-only model (loaders/embedding_loader.py), which the engine refuses text
    requests for and which is neither stepped nor a text backend."""
    images: bool = False
    """Prompts may carry images (a vision-language model: a SupportsImages). On a loader: it can load such
    models; on a loaded model: this one takes images."""

    # What callers need, each in one place: today all three follow text_only; a backend that differs (a remote
    # server that tokenizes, say) changes them here, not at the callers.
    @property
    def stepped(self) -> bool:
        """The engine steps the model itself (a SteppedModel): next-token logits, our samplers, token ids and
        alternatives per token (logprob views, branching, insight, scoring a prompt)."""
        return not self.text_only and self.generates

    @property
    def tokenizes(self) -> bool:
        """Its tokenizer works here: text becomes token ids and back (token counts and views, /tokenize)."""
        return not self.text_only

    @property
    def renders_chats(self) -> bool:
        """The backend applies its own chat template: chats go to it as messages, and no template of ours (nor a
        prompt rendered from one: continue, impersonate, the Notebook) applies."""
        return self.text_only


@dataclass(frozen=True)
class LoadOptions:
    """Options every loader understands; a loader ignores what does not apply."""

    device: str = "auto"  # auto | cpu | cuda | cuda:N | mps
    dtype: str = "auto"  # auto | float32 | float16 | bfloat16
    threads: int | None = None  # torch intra-op threads (CPU); None keeps the current setting
    extra: Mapping[str, Any] = field(default_factory=dict)
    """The loader's own options by name (loaders/options.py), checked by the loader when it loads."""

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        if not (self.device in ("auto", "cpu", "cuda", "mps") or self.device.startswith("cuda:")):
            raise ValueError(f"device must be auto, cpu, cuda, cuda:N or mps, got {self.device!r}")
        if self.threads is not None and not (isinstance(self.threads, int) and self.threads >= 1):
            raise ValueError(f"threads must be an integer >= 1, got {self.threads!r}")
        if not isinstance(self.extra, Mapping):
            raise ValueError(f"load options must be a mapping of names to values, got {self.extra!r}")


DTYPES = ("auto", "float32", "float16", "bfloat16")


def common_prefix(a: Sequence[Any], b: Sequence[Any]) -> int:
    """How many leading items ``a`` and ``b`` share."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def available_devices() -> tuple[str, ...]:
    """The devices torch can use here, for a device picker: auto and cpu always, then each CUDA GPU and MPS."""
    import torch

    found = ["auto", "cpu"]
    if torch.cuda.is_available():
        count = torch.cuda.device_count()
        found += ["cuda"] + ([f"cuda:{i}" for i in range(count)] if count > 1 else [])
    if torch.backends.mps.is_available():
        found.append("mps")
    return tuple(found)


@runtime_checkable
class Tokenizer(Protocol):
    eos_token_ids: frozenset[int]
    chat_template: str | None

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]: ...
    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str: ...
    def apply_chat_template(self, messages: list[dict], add_generation_prompt: bool = True,
                            tools: list[dict] | None = None) -> str: ...
    def token_strings(self, ids: Sequence[int]) -> list[str]: ...


@dataclass(frozen=True)
class PromptImage:
    """An image in a prompt: its decoded pixels and the SHA-256 of the bytes it was read from (what the prefix
    cache keys its tokens by, so two images never share KV and the same image does)."""

    digest: str
    image: Any = field(repr=False, compare=False)
    """A PIL.Image.Image in RGB."""


@dataclass
class ImagePrompt:
    """A prompt with images as the model reads it: token ids with every image's placeholder expanded into its
    image tokens, where each image's tokens are, and the loader's own inputs for them (pixel values)."""

    ids: list[int]
    spans: list[tuple[int, int, str]]
    """Per image in order: (its first token, one past its last token, its digest)."""
    media: Any = field(repr=False)
    """Opaque to the engine: what :meth:`SupportsImages.attach_images` gives the sequence's cache."""
    whole_images: bool = False
    """Each image's tokens attend to each other both ways (Gemma 3), so the engine reads each image's tokens in
    one forward: a prompt chunk never ends inside an image."""


@runtime_checkable
class SupportsImages(Protocol):
    """What a model with ``capabilities.images`` also provides."""

    image_placeholder: str
    """The text that marks where an image goes in a prompt (e.g. "<image>"); one per image, in order."""

    def encode_images(self, text: str, images: Sequence[PromptImage], add_special_tokens: bool) -> ImagePrompt:
        """The prompt ``text`` (with one placeholder per image) and its images as the model reads them; a
        ValueError says what does not fit (placeholders and images that do not pair up, an unreadable image)."""

    def attach_images(self, cache: Any, media: Any) -> None:
        """Give an empty sequence cache its prompt's images: the forward that reads their tokens uses them."""

    def image_tokens(self, images: Sequence[PromptImage]) -> list[int]:
        """How many tokens each image adds to a prompt beyond its placeholder's own text (its image tokens and the
        marks the model frames them with), to fit a chat into the context beforehand."""


@runtime_checkable
class SupportsGuidance(Protocol):
    """A tokenizer that can constrain output (structured_outputs): llguidance's view of its vocabulary."""

    def guidance_tokenizer(self) -> Any: ...


class LoadedModel(Protocol):
    """What every loaded model is: its facts. What it can do is one of the protocols below, told apart by
    ``capabilities`` (``stepped``: a SteppedModel, else a TextBackend unless it does not ``generate`` (an
    EmbeddingModel only); ``lora``: also a LoraModel; ``prefix_cache``:
    also a SupportsBlockPrefix or SupportsNativePrefix): :func:`is_stepped`, :func:`is_text_backend` and
    :func:`is_lora_model` narrow a model to what its capabilities promise, for callers and the type checker."""

    name: str
    loader: str
    path: Path
    capabilities: Capabilities
    context_length: int
    device: str
    dtype: str
    load_options: dict[str, Any]
    """The loader's own options it was loaded with, as checked (e.g. {"n_ctx": 4096}); recorded with each reply
    and batch row so a run can be reproduced. Every model class sets it ({} in __init__); its loader and the
    model manager set it after a load, so callers read it as it is (no probing)."""

    @property
    def tokenizer(self) -> Tokenizer:
        """Its tokenizer (read-only here, so a model may hold a more specific one)."""

    def memory_bytes(self) -> int:
        """Bytes the model holds: its weights, and a cache it keeps for as long as it is loaded (llama.cpp)."""

    def close(self) -> None:
        """Release the weights; the object is unusable afterwards."""


class SteppedModel(LoadedModel, Protocol):
    """A model the engine steps itself: every running sequence's next-token logits, one batched step at a time."""

    vocab_size: int  # rows of the logits forward() returns

    def new_cache(self) -> Any:
        """A fresh, empty per-sequence cache (opaque to the engine)."""

    def release(self, cache: Any) -> None:
        """The sequence owning ``cache`` has finished; free what it holds."""

    def forward(self, caches: Sequence[Any], new_ids: Sequence[Sequence[int]]) -> "torch.Tensor":
        """Feed each sequence its unseen ids; return next-token logits, shape [len(caches), vocab]."""

    def logits(self, ids: Sequence[int], last_only: bool = True,
               loras: tuple[tuple[str, float], ...] = ()) -> "torch.Tensor":
        """Logits for ``ids`` run alone, outside the running batch (insight views, perplexity), with the (name,
        weight) adapters given (a loader without adapters takes none)."""


@runtime_checkable
class SupportsBlockPrefix(Protocol):
    """What a model with ``capabilities.prefix_cache == "blocks"`` also provides: the engine keeps copies of its
    KV in blocks (webui/engine/prefix_cache.py, prefix_reuse.py BlockReuse)."""

    def prefix_namespace(self, loras: tuple[tuple[str, float], ...] = ()) -> str:
        """What a sequence's KV depends on besides its tokens (this model instance, the adapters and weights)."""

    def prefix_namespace_live(self, namespace: str) -> bool:
        """False once that namespace's model instance or one of its adapters is gone."""

    def export_kv(self, cache: Any, start: int, end: int) -> tuple[Any, int]:
        """A copy of tokens start..end-1 of a sequence's KV, and its size in bytes."""

    def import_kv(self, cache: Any, blocks: Sequence[Any], n_tokens: int) -> None:
        """Start the empty ``cache`` with the first ``n_tokens`` of those copies."""


@runtime_checkable
class SupportsNativePrefix(Protocol):
    """What a model with ``capabilities.prefix_cache == "native"`` also provides: it keeps what sequences read in
    its own cache (prefix_reuse.py NativeReuse)."""

    def prefix_match(self, ids: Sequence[int]) -> int:
        """The longest prefix of ``ids`` its cache holds."""

    def reuse_prefix(self, cache: Any, ids: Sequence[int]) -> int:
        """Start the empty ``cache`` with that prefix; how many tokens it got."""

    def drop_prefixes(self) -> None:
        """Forget what finished sequences left behind."""


class LoraModel(SteppedModel, Protocol):
    """A stepped model that applies LoRA adapters per sequence (``capabilities.lora``)."""

    @property
    def loras(self) -> dict[str, Any]:
        """Attached adapters by name."""

    def new_cache(self, loras: tuple[tuple[str, float], ...] = ()) -> Any:
        """A fresh cache bound to the (name, weight) adapters to apply to its sequence."""

    def check_lora(self, path: Path) -> None:
        """Raise (LoRAError) unless the adapter at ``path`` fits this model."""

    def add_lora(self, name: str, path: Path) -> None: ...

    def remove_lora(self, name: str) -> None: ...


class EmbeddingModel(LoadedModel, Protocol):
    """A model that embeds texts (``capabilities.embeddings``): one L2-normalised vector per input."""

    embedding_size: int
    """The length of every vector it gives."""
    vocab_size: int
    """Token ids it reads are below this."""
    embedding_source: str
    """What the vectors are, as /v1/embeddings names them in its ``model`` field and the ``similar`` assert in its
    detail: a sentence-embedding model's name, or "<name> (mean-pooled hidden states)" for an LLM."""

    def embed(self, inputs: Sequence[Sequence[int]]) -> list[list[float]]:
        """One vector per input (token ids, each at most ``context_length`` long), computed together, no gradients.
        Token ids rather than text: the API takes ids too, and counts the tokens it embedded."""


class TextBackend(LoadedModel, Protocol):
    """A server that samples and batches by itself (``capabilities.stepped`` False): the engine relays its text."""

    base_url: str

    def stream(self, prompt: str | list[int], messages: list[dict] | None, fields: dict[str, Any],
               logprobs: int | None, cancelled: Callable[[], bool]) -> Iterator[Any]:
        """The reply as chunks (text, finish reason, usage, logprobs); ``fields``: sampling as request fields."""


def is_stepped(model: LoadedModel) -> TypeGuard[SteppedModel]:
    """Whether the engine steps ``model`` itself (``capabilities.stepped``)."""
    return model.capabilities.stepped


def is_text_backend(model: LoadedModel) -> TypeGuard[TextBackend]:
    """Whether ``model`` generates whole requests itself (a remote server): the engine relays its text."""
    return model.capabilities.text_only


def is_embedding_model(model: LoadedModel) -> TypeGuard[EmbeddingModel]:
    """Whether ``model`` embeds texts (``capabilities.embeddings``)."""
    return model.capabilities.embeddings


def is_lora_model(model: LoadedModel) -> TypeGuard[LoraModel]:
    """Whether ``model`` applies LoRA adapters (``capabilities.lora``)."""
    return model.capabilities.lora and model.capabilities.stepped


def attached_loras(model: LoadedModel | None) -> dict[str, Any]:
    """The adapters attached to ``model`` (none when nothing is loaded or its loader cannot apply any)."""
    return model.loras if model is not None and is_lora_model(model) else {}


class Loader(Protocol):
    """A backend that can turn a path into a LoadedModel."""

    name: str
    description: str
    capabilities: Capabilities
    install_hint: str
    options: tuple  # its own load options (loaders/options.py LoadOption), read from LoadOptions.extra
    takes_dtype: bool
    """Whether LoadOptions.dtype chooses anything (the Model tab hides it where not: llama.cpp runs a GGUF in the
    types it holds, ExLlamaV2 computes in float16)."""
    smaller_load: str
    """What makes a load take less memory, said when one does not fit the memory budget ("": only a smaller
    model)."""

    @property
    def requires(self) -> tuple[str, ...]:
        """Importable module names the backend needs (read-only here, so a loader may declare a fixed tuple)."""

    def unavailable_reason(self) -> str | None:
        """Why it cannot run here although its packages are installed (a GPU it needs, say), or None."""

    def estimate_bytes(self, path: Path, options: LoadOptions) -> int:
        """The memory loading ``path`` with ``options`` will take (its cache included), before loading it."""

    def match(self, path: Path) -> int:
        """Whether ``path`` is this loader's: NATIVE (its own format), CONVERTS (it reads it after ``prepare``)
        or 0 (not at all). The registry picks the best match among installed loaders."""

    def prepare(self, path: Path, workdir: Path, progress: Progress | None = None) -> Path:
        """What ``load`` should read for ``path``: the path itself, or something made once in ``workdir`` (a
        folder the caller keeps for this model, e.g. a .gguf converted to safetensors)."""

    def load(self, path: Path, options: LoadOptions, progress: Progress | None = None) -> LoadedModel: ...


WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt", ".pth")


def weights_on_disk(path: Path) -> int:
    """Bytes of the weight files at ``path`` (a file, or a folder's weight files): what a loader that keeps
    the weights as stored (llama.cpp, GPTQ, EXL2) needs in memory, before its cache."""
    path = Path(path)
    if path.is_file():
        return path.stat().st_size
    if not path.is_dir():
        return 0
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and p.suffix in WEIGHT_SUFFIXES)


def ram_bytes() -> int | None:
    """The machine's RAM, or None where the system does not say."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


def available_memory_bytes() -> int:
    """Memory the system can give now (MemAvailable), or 3/4 of the RAM where that cannot be read."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    ram = ram_bytes()
    return int(ram * 0.75) if ram else 16 * 2**30


class BaseLoader:
    """What every loader has unless it says otherwise: loaders subclass it, so every part of ``Loader`` is there
    and no caller has to probe for one."""

    name: str
    description: str
    capabilities: Capabilities
    install_hint: str
    options: tuple = ()
    takes_dtype = True
    smaller_load = ""

    def unavailable_reason(self) -> str | None:
        return None

    def estimate_bytes(self, path: Path, options: LoadOptions) -> int:
        """The weights' size on disk (what a loader that keeps the weights as stored needs, before a cache)."""
        return weights_on_disk(path)


@contextlib.contextmanager
def atomic_folder(out: Path) -> Iterator[Path]:
    """Yield a scratch folder beside ``out`` to write into; it replaces ``out`` only if the block succeeds.

    On any failure (a full disk, Ctrl-C) the scratch folder is removed and ``out``, if it exists, is untouched.
    """
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        yield tmp
        if out.is_symlink():  # a link to a folder kept elsewhere (a shared cache): replace the link, not its target
            out.unlink()
        elif out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def missing_module(modules: Sequence[str]) -> str | None:
    """The first of ``modules`` that cannot be imported, without importing it."""
    for module in modules:
        if importlib.util.find_spec(module) is None:
            return module
    return None


def require_backend(loader: Loader) -> None:
    missing = missing_module(loader.requires)
    if missing:
        raise LoaderUnavailable(loader.name, missing, loader.install_hint)


@dataclass
class LoaderStatus:
    name: str
    description: str
    available: bool
    reason: str = ""
    install_hint: str = ""
    capabilities: Capabilities = field(default_factory=Capabilities)
