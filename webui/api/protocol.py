"""OpenAI request bodies, and how each becomes our SamplingParams.

Unknown fields are ignored (real clients send many). Known fields are
type-checked by pydantic; ranges are checked once, by SamplingParams, and a bad
value comes back as a 400 naming the parameter by its API name.
Priority of values: the request, then the request's ``preset``, then neutral.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from webui.engine.params import MAX_SEED, InvalidParameter, SamplingParams

MAX_N = 16

# SamplingParams field -> the request field that sets it (only where names differ).
API_NAMES = {"max_new_tokens": "max_tokens", "min_new_tokens": "min_tokens", "ban_eos": "ignore_eos"}
NUMBER_FIELDS = ("max_tokens", "temperature", "top_p", "n", "seed", "presence_penalty", "frequency_penalty", "top_k",
                 "min_p", "typical_p", "repetition_penalty", "min_tokens", "no_repeat_ngram_size")


class OpenAIModel(BaseModel):
    model_config = ConfigDict(extra="ignore")


class StreamOptions(OpenAIModel):
    include_usage: bool = False


class SamplingRequest(OpenAIModel):
    """Fields shared by /v1/chat/completions and /v1/completions."""

    model: str | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    n: int = Field(1, ge=1, le=MAX_N)
    stop: str | list[str] | None = None
    seed: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: str | None = None
    # vLLM's extra sampling fields
    top_k: int | None = None
    min_p: float | None = None
    typical_p: float | None = None
    repetition_penalty: float | None = None
    min_tokens: int | None = None
    no_repeat_ngram_size: int | None = None
    ignore_eos: bool | None = None
    preset: str | None = None

    @field_validator(*NUMBER_FIELDS, mode="before")
    @classmethod
    def _no_booleans(cls, value: Any) -> Any:
        if isinstance(value, bool):
            raise ValueError(f"must be a number, got {str(value).lower()}")
        return value

    def max_new_tokens(self) -> int | None:
        return self.max_tokens

    def api_names(self) -> dict[str, str]:
        return API_NAMES

    # max_tokens when neither the request nor its preset sets it (None: SamplingParams' own default)
    default_max_tokens: ClassVar[int | None] = None

    def to_sampling_params(self, base: SamplingParams) -> SamplingParams:
        """``base`` (a preset or neutral) overridden by every field the request set."""
        if self.default_max_tokens is not None and "max_new_tokens" not in base.changed():
            base = base.replace(max_new_tokens=self.default_max_tokens)
        given = {
            "temperature": self.temperature, "top_p": self.top_p, "top_k": self.top_k, "min_p": self.min_p,
            "typical_p": self.typical_p, "repetition_penalty": self.repetition_penalty,
            "presence_penalty": self.presence_penalty, "frequency_penalty": self.frequency_penalty,
            "no_repeat_ngram_size": self.no_repeat_ngram_size, "max_new_tokens": self.max_new_tokens(),
            "min_new_tokens": self.min_tokens, "stop": self.stop, "ban_eos": self.ignore_eos,
            # OpenAI takes any int64 seed; ours are 0..2^63-1, so a negative seed maps into that range
            "seed": None if self.seed is None else self.seed % (MAX_SEED + 1),
            "logit_bias": self.logit_bias,
        }
        changes = {k: v for k, v in given.items() if v is not None}
        try:
            return base.replace(**changes)
        except InvalidParameter as exc:
            names = self.api_names()
            message = str(exc)
            for ours, theirs in names.items():
                message = message.replace(ours, theirs)
            raise InvalidParameter(names.get(exc.param, exc.param), message, exc.value) from exc

    @property
    def include_usage(self) -> bool:
        return bool(self.stream and self.stream_options and self.stream_options.include_usage)


class ContentPart(OpenAIModel):
    type: str
    text: str | None = None

    @model_validator(mode="after")
    def _text_only(self) -> "ContentPart":
        if self.type != "text":
            raise ValueError(f"content parts of type '{self.type}' are not supported; this server takes text only")
        if self.text is None:
            raise ValueError("a text content part needs 'text'")
        return self


class ChatMessage(OpenAIModel):
    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[ContentPart] | None = None
    name: str | None = None

    @model_validator(mode="after")
    def _content_required(self) -> "ChatMessage":
        if self.content is None and self.role != "assistant":
            raise ValueError(f"a {self.role} message needs 'content'")
        return self

    def text(self) -> str:
        if isinstance(self.content, list):
            return "".join(part.text for part in self.content)
        return self.content or ""


class ChatCompletionRequest(SamplingRequest):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = None
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=20)

    def max_new_tokens(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens

    def api_names(self) -> dict[str, str]:
        if self.max_completion_tokens is None:
            return API_NAMES
        return {**API_NAMES, "max_new_tokens": "max_completion_tokens"}

    def chat_messages(self) -> list[dict[str, str]]:
        return [{"role": "system" if m.role == "developer" else m.role, "content": m.text()} for m in self.messages]

    def logprobs_wanted(self) -> int | None:
        return (self.top_logprobs or 0) if self.logprobs else None


class CompletionRequest(SamplingRequest):
    default_max_tokens: ClassVar[int | None] = 16  # OpenAI's and vLLM's default for /v1/completions

    prompt: str | list[str] | list[int] | list[list[int]]
    echo: bool = False
    logprobs: int | None = Field(None, ge=0, le=20)
    suffix: str | None = None

    @field_validator("prompt")
    @classmethod
    def _not_empty(cls, value: Any) -> Any:
        if isinstance(value, list) and not value:
            raise ValueError("prompt must not be an empty list")
        return value

    def prompts(self) -> list[str | list[int]]:
        p = self.prompt
        if isinstance(p, str):
            return [p]
        if all(isinstance(x, int) for x in p):
            return [list(p)]
        return list(p)
