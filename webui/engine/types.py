"""The engine's request and event types, shared by UI, API and batch runner."""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Literal

from loaders.base import PromptImage
from webui.engine.params import SamplingParams

# "timeout": the request's queue-wait or generation time limit ran out (it is cancelled in the engine).
FinishReason = Literal["stop", "length", "cancelled", "timeout", "error"]


class EngineError(Exception):
    """Base class of errors the engine reports to callers."""


class GenerationError(EngineError):
    """A request failed inside the engine; the original exception is ``__cause__``."""


class NoModelLoaded(EngineError):
    def __init__(self) -> None:
        super().__init__("no model is loaded; load one in the Model tab or start with --model NAME")


class GeneratesNoText(EngineError):
    """The model is an embedding model: it writes no text."""

    def __init__(self, name: str) -> None:
        super().__init__(f"'{name}' is an embedding model and writes no text; use it through /v1/embeddings or the "
                         f"similar assert, and load a language model for chats and completions")


class PromptTooLong(EngineError):
    def __init__(self, prompt_tokens: int, max_new_tokens: int, context_length: int, at_least: bool = False):
        super().__init__(
            f"the prompt has {'at least ' if at_least else ''}{prompt_tokens} tokens, which leaves no room in the "
            f"model's context of {context_length} tokens; shorten the prompt")
        self.prompt_tokens, self.max_new_tokens, self.context_length = prompt_tokens, max_new_tokens, context_length


class EngineClosed(EngineError):
    def __init__(self) -> None:
        super().__init__("the engine has been shut down")


class CancelToken:
    """Set once to cancel a request; the engine checks it before every step."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def cancel(self) -> None:
        self._event.set()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()


INTERACTIVE, BACKGROUND = 0, 1  # GenerationRequest.priority


@dataclass
class GenerationRequest:
    """One generation: a prompt (text or token ids) and how to sample it."""

    prompt: str | list[int]
    params: SamplingParams = field(default_factory=SamplingParams)
    add_special_tokens: bool = True  # False for prompts already rendered by a chat template
    messages: list[dict[str, str]] | None = None  # the chat behind a rendered prompt (remote servers take these)
    logprobs: int | None = None  # None: none; 0: the chosen token's; N: also N alternatives
    loras: tuple[tuple[str, float], ...] = ()  # attached LoRA adapters to apply, with weights; () for none
    queue_timeout: float | None = None  # seconds it may wait before its first step
    timeout: float | None = None  # seconds it may generate, from its first step
    request_id: str = field(default_factory=lambda: uuid.uuid4().hex[:16])
    cancel: CancelToken = field(default_factory=CancelToken)
    images: tuple[PromptImage, ...] = ()
    """Images for a vision-language model, in the order of the model's image placeholders in the (text) prompt."""
    priority: int = INTERACTIVE
    """INTERACTIVE (0): someone waits for it (Chat, the API); BACKGROUND (1): a batch job. A request waits behind
    every waiting request of a lower number; background work never takes the last free running slot and pauses
    while an interactive request reads its prompt, so a batch never makes a chat wait for its first token."""

    def __post_init__(self) -> None:
        if isinstance(self.prompt, list) and not all(isinstance(t, int) and t >= 0 for t in self.prompt):
            raise ValueError("a token-id prompt must be a list of non-negative integers")
        if not isinstance(self.prompt, (str, list)):
            raise ValueError(f"prompt must be text or a list of token ids, got {type(self.prompt).__name__}")
        self.images = tuple(self.images)
        if self.images and not isinstance(self.prompt, str):
            raise ValueError("a prompt with images must be text with one image placeholder per image, not token ids")
        if self.logprobs is not None and not 0 <= self.logprobs <= 20:
            raise ValueError(f"logprobs must be in [0, 20], got {self.logprobs}")
        self.loras = tuple((str(n), float(w)) for n, w in self.loras)
        if self.priority not in (INTERACTIVE, BACKGROUND):
            raise ValueError(f"priority must be {INTERACTIVE} (interactive) or {BACKGROUND} (background), got "
                             f"{self.priority!r}")
        for name in ("queue_timeout", "timeout"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ValueError(f"{name} must be a positive number of seconds, got {value}")


@dataclass
class TokenLogprob:
    token_id: int
    token: str
    logprob: float  # the model's raw distribution (what the API reports)
    top: list[tuple[int, str, float]] = field(default_factory=list)  # raw top alternatives
    logprob_after: float | None = None  # after the sampling processors: the distribution it was drawn from
    top_after: list[float] = field(default_factory=list)  # the alternatives' log-probabilities after them


@dataclass
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0  # prompt tokens whose KV came from the prefix cache (not prefilled again)
    guidance_tokens: int = 0  # tokens CFG's negative prompt sequence was fed beside this request

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass
class Timings:
    """Seconds; ``tokens_per_second`` counts generated tokens over the generation time."""

    queue: float = 0.0
    first_token: float | None = None  # time to first token, from submission
    total: float = 0.0
    tokens_per_second: float = 0.0


@dataclass
class GenerationEvent:
    """One step of a request's stream. The last event has a ``finish_reason``."""

    request_id: str
    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[TokenLogprob] = field(default_factory=list)
    finish_reason: FinishReason | None = None
    stop_string: str | None = None  # the stop string that ended it, if one did
    error: str | None = None
    usage: Usage | None = None
    timings: Timings | None = None
    seed: int | None = None  # the seed actually used (also set when the request asked for a random one)


@dataclass
class GenerationResult:
    """A whole request, collected from its events."""

    request_id: str
    text: str
    token_ids: list[int]
    finish_reason: FinishReason
    usage: Usage
    timings: Timings
    seed: int
    stop_string: str | None = None
    logprobs: list[TokenLogprob] = field(default_factory=list)


def now() -> float:
    return time.perf_counter()
