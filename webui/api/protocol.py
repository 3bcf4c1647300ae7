"""OpenAI request bodies, and how each becomes our SamplingParams.

Unknown fields are ignored (real clients send many). Known fields are
type-checked by pydantic; ranges are checked once, by SamplingParams, and a bad
value comes back as a 400 naming the parameter by its API name.
Priority of values: the request, then the request's ``preset``, then neutral.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model, field_validator, model_validator
from pydantic_core import PydanticCustomError
from typing_extensions import TypeIs

from webui.engine.params import InvalidParameter, SamplingParams, specs

MAX_N = 16


class OpenAIModel(BaseModel):
    model_config = ConfigDict(extra="ignore")


SURROGATE = re.compile("[\ud800-\udfff]")


def lone_surrogate(value: Any, path: str = "") -> tuple[str, int, str] | None:
    """(field path, position, character) of the first lone UTF-16 surrogate in a JSON value: valid JSON
    ("\\ud800") that is not Unicode text, which no tokenizer can encode."""
    if isinstance(value, str):
        match = SURROGATE.search(value)  # in C: bodies may be megabytes
        if match:
            return path, match.start(), match.group()
    elif isinstance(value, dict):
        for key, item in value.items():
            found = lone_surrogate(key, path) or lone_surrogate(item, f"{path}.{key}" if path else str(key))
            if found:
                return found
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found = lone_surrogate(item, f"{path}.{i}" if path else str(i))
            if found:
                return found
    return None


class TextRequest(OpenAIModel):
    """A request whose strings must be Unicode text (a 400 naming the field otherwise)."""

    @model_validator(mode="before")
    @classmethod
    def _text_only(cls, data: Any) -> Any:
        found = lone_surrogate(data)
        if found:
            path, at, ch = found
            raise PydanticCustomError(
                "lone_surrogate", "a lone UTF-16 surrogate (U+{code}) at character {at} is not Unicode "
                "text and cannot be tokenized; send valid text (a character outside the BMP as a \\ud83d\\ude00-style "
                "pair)", {"param": path or None, "code": f"{ord(ch):04X}", "at": at})
        return data


class StreamOptions(OpenAIModel):
    include_usage: bool = False


def _sampling_fields() -> dict[str, Any]:
    """Every sampling parameter as an optional request field under its API name, typed from its spec."""
    return {spec.api_name or name: ((spec.api_type or spec.kind) | None, None) for name, spec in specs().items()}


NUMBER_FIELDS = ("n", *(spec.api_name or name for name, spec in specs().items() if spec.kind in (int, float)))

# The sampling fields come from SamplingParams' specs: a parameter added there is a request field here.
if TYPE_CHECKING:  # a model built at run time is no type to a checker; it sees the fields read here by name
    class SamplingFields(TextRequest):
        structured_outputs: dict[str, Any] | None
        max_tokens: int | None
else:
    SamplingFields = create_model("SamplingFields", __base__=TextRequest, **_sampling_fields())


class SamplingRequest(SamplingFields):
    """Fields shared by /v1/chat/completions and /v1/completions."""

    model: str | None = None
    n: int = Field(1, ge=1, le=MAX_N)
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: str | None = None
    preset: str | None = None
    # LoRA adapters (attached to the loaded model) with their weights, as [[name, weight], ...]; the model id
    # 'base:adapter' selects one at its attached weight. Reproduce records send this to repeat their adapters.
    loras: list[tuple[str, float]] | None = None
    # structured output under OpenAI's name and vLLM's older ones (vLLM's structured_outputs is a sampling field)
    response_format: dict[str, Any] | None = None
    guided_json: dict[str, Any] | str | None = None
    guided_regex: str | None = None
    guided_choice: list[str] | None = None
    guided_grammar: str | None = None
    # vLLM's: keep only the prompt's last k tokens (-1: as many as the context leaves); without it a prompt too long
    # for the context is a 400, as OpenAI answers
    truncate_prompt_tokens: int | None = None

    @field_validator(*NUMBER_FIELDS, mode="before")
    @classmethod
    def _no_booleans(cls, value: Any) -> Any:
        if isinstance(value, bool):
            raise ValueError(f"must be a number, got {str(value).lower()}")
        return value

    def renamed(self) -> dict[str, str]:
        """Fields this request sets under another name than their usual API name."""
        return {}

    # max_tokens when neither the request nor its preset sets it (None: SamplingParams' own default)
    default_max_tokens: ClassVar[int | None] = None

    def check_together(self) -> None:
        """Fields that only mean something beside another (vLLM's and OpenAI's rules): a 400 naming the field."""
        if self.stream_options is not None and not self.stream:
            raise InvalidParameter("stream_options", "stream_options is only taken with stream: true",
                                   self.stream_options.model_dump())

    def to_sampling_params(self, base: SamplingParams) -> SamplingParams:
        """``base`` (a preset or neutral) overridden by every field the request set; errors use the API's names."""
        self.check_together()
        if self.default_max_tokens is not None and "max_new_tokens" not in base.changed():
            base = base.replace(max_new_tokens=self.default_max_tokens)
        fields, names = self.model_dump(), self.renamed()
        given = self.constraints_given()
        if len(given) > 1:
            raise InvalidParameter(given[1][0], f"give one way of constraining the output, got {len(given)}: "
                                                f"{', '.join(field for field, _ in given)}")
        if given:  # read under the field that gave it, so an error names that field
            field, value = given[0]
            fields[field] = value
            names = {**names, "structured_outputs": field}
        return SamplingParams.from_api(fields, base, names)

    def constraints_given(self) -> list[tuple[str, Any]]:
        """(request field, vLLM structured_outputs value) for each way this request constrains its output."""
        given = [(f"guided_{form}", {form: getattr(self, f"guided_{form}")})
                 for form in ("json", "regex", "choice", "grammar") if getattr(self, f"guided_{form}") is not None]
        if self.structured_outputs:
            given.insert(0, ("structured_outputs", self.structured_outputs))
        if self.response_format is not None:
            value = response_format_constraint(self.response_format)
            if value is not None:
                given.insert(0, ("response_format", value))
        return given

    @property
    def include_usage(self) -> bool:
        return bool(self.stream and self.stream_options and self.stream_options.include_usage)


def response_format_constraint(response_format: dict[str, Any]) -> dict[str, Any] | None:
    """OpenAI's response_format as a structured_outputs value (None for plain text)."""
    kind = response_format.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return {"json_object": True}
    if kind == "json_schema":
        spec = response_format.get("json_schema")
        if not isinstance(spec, dict) or not isinstance(spec.get("schema"), dict):
            raise InvalidParameter("response_format", 'response_format: json_schema needs {"name": ..., "schema": '
                                                      '{...}}, got ' + json.dumps(spec), spec)
        return {"json": spec["schema"]}
    raise InvalidParameter("response_format", f"response_format: type must be text, json_object or json_schema, "
                                              f"got {kind!r}", kind)


class ImageURL(OpenAIModel):
    url: str  # a data: URL (base64); a file path or http(s) URL only where the server's flags allow (api/images.py)
    detail: str | None = None  # OpenAI's resolution hint; the model's processor decides the resolution here


class FileContent(OpenAIModel):
    """OpenAI's ``file`` part: a document read as text into the message (webui/api/documents.py)."""

    file_data: str | None = None  # the file as base64: a data: URL (data:application/pdf;base64,...) or bare
    filename: str | None = None  # its extension says how it is read (.pdf, .docx, anything else: text)
    file_id: str | None = None  # OpenAI's Files API, which this server does not have: refused, naming the part


class ContentPart(OpenAIModel):
    type: str
    text: str | None = None
    image_url: ImageURL | None = None
    file: FileContent | None = None

    @model_validator(mode="after")
    def _known(self) -> "ContentPart":
        if self.type not in ("text", "image_url", "file"):
            raise ValueError(f"content parts of type '{self.type}' are not supported; send 'text' parts, 'file' "
                             "parts (documents, read as text) and 'image_url' parts to a model that takes images")
        if self.type == "text" and self.text is None:
            raise ValueError("a text content part needs 'text'")
        if self.type == "image_url" and self.image_url is None:
            raise ValueError('an image_url content part needs "image_url": {"url": ...}')
        if self.type == "file" and self.file is None:
            raise ValueError('a file content part needs "file": {"file_data": "data:application/pdf;base64,...", '
                             '"filename": ...}')
        return self


class ChatMessage(OpenAIModel):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None  # an assistant's earlier calls
    tool_call_id: str | None = None  # a tool result's call

    @model_validator(mode="after")
    def _content_required(self) -> "ChatMessage":
        if self.content is None and self.role != "assistant":
            raise ValueError(f"a {self.role} message needs 'content'")
        for call in self.tool_calls or []:
            function = call.get("function")
            if not isinstance(function, dict) or not isinstance(function.get("name"), str):
                raise ValueError('each of tool_calls needs {"function": {"name": ..., "arguments": ...}}')
        return self

    def text(self, image_placeholder: str = "") -> str:
        """The content as text, each image part written as ``image_placeholder`` (the model's image mark); file
        parts must have been read into text parts first (webui/api/documents.py)."""
        if not isinstance(self.content, list):
            return self.content or ""
        if any(part.type == "file" for part in self.content):
            raise RuntimeError("a file part reached the prompt unread; read it with webui/api/documents.py first")
        return "".join(part.text or "" if part.type == "text" else image_placeholder for part in self.content)


def image_parts(messages: list[ChatMessage]) -> list[tuple[str, ImageURL]]:
    """Every image part of a chat in order, with its field path (``messages[0].content[1].image_url``)."""
    return [(f"messages[{i}].content[{j}].image_url", part.image_url) for i, m in enumerate(messages)
            if isinstance(m.content, list) for j, part in enumerate(m.content)
            if part.type == "image_url" and part.image_url is not None]


def chat_rows(messages: list[ChatMessage], image_placeholder: str = "") -> list[dict[str, Any]]:
    """Request messages as the chat template takes them (a developer message is a system message; an image is
    the model's ``image_placeholder`` in the text)."""
    out = []
    for m in messages:
        entry: dict[str, Any] = {"role": "system" if m.role == "developer" else m.role,
                                 "content": m.text(image_placeholder)}
        if m.tool_calls:
            entry["tool_calls"] = m.tool_calls
        if m.role == "tool":
            entry["tool_call_id"] = m.tool_call_id
        out.append(entry)
    return out


class ChatCompletionRequest(SamplingRequest):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = None
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=20)

    def renamed(self) -> dict[str, str]:
        """OpenAI's newer name for max_tokens wins when it is given."""
        return {"max_new_tokens": "max_completion_tokens"} if self.max_completion_tokens is not None else {}

    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    chat_template: str | None = None  # vLLM's: a Jinja template for this request (or a template's name, ours)
    # vLLM's: the last (assistant) message is the start of the reply, which the model continues
    continue_final_message: bool = False
    add_generation_prompt: bool | None = None
    store: bool | None = None  # OpenAI's: keep it for GET /v1/chat/completions (webui/api/stored.py)
    metadata: dict[str, str] | None = None  # OpenAI's: tags for the stored completion, to filter the list by
    # text-generation-webui's chat extras (webui/api/modes.py, webui/chat/modes.py)
    mode: str | None = None  # instruct (default), chat or chat-instruct
    character: str | dict[str, Any] | None = None  # a character's name in <user data>/characters, or its fields
    user_name: str | None = None  # the user's name in the chat modes (default: the character's, else "You")
    user_bio: str | None = None  # the user's persona (default: the character's)
    instruction_template: str | None = None  # a built-in or saved instruction template's name
    chat_template_str: str | None = None  # Jinja writing the chat modes' transcript (name1, name2, user_bio)
    chat_instruct_command: str | None = None  # chat-instruct's command (<|character|>, <|prompt|>)

    @field_validator("metadata")
    @classmethod
    def _metadata(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        check_metadata(value or {})
        return value

    def logprobs_wanted(self) -> int | None:
        return (self.top_logprobs or 0) if self.logprobs else None

    def check_together(self) -> None:
        super().check_together()
        if self.top_logprobs is not None and not self.logprobs:
            raise InvalidParameter("top_logprobs", "top_logprobs is only taken with logprobs: true",
                                   self.top_logprobs)


def check_metadata(metadata: dict[str, str]) -> None:
    """OpenAI's limits on metadata: at most 16 pairs, keys up to 64 characters, string values up to 512."""
    if len(metadata) > 16:
        raise ValueError(f"metadata holds at most 16 key-value pairs, got {len(metadata)}")
    for key, value in metadata.items():
        if len(key) > 64:
            raise ValueError(f"metadata keys are at most 64 characters: '{key[:20]}...' has {len(key)}")
        if not isinstance(value, str) or len(value) > 512:
            raise ValueError(f"metadata['{key}'] must be a string of at most 512 characters")


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

    def check_together(self) -> None:
        super().check_together()
        if self.suffix:
            raise InvalidParameter("suffix", "suffix (text after the completion, for fill-in-the-middle) is not "
                                             "supported: no loader here knows a model's infill format; put the text "
                                             "before the gap in 'prompt' and leave suffix out", self.suffix)

    @property
    def scores_only(self) -> bool:
        """max_tokens 0: generate nothing; with echo (and logprobs) the answer scores the prompt, as the original
        completions API did and evaluation harnesses rely on."""
        return self.max_tokens == 0

    def prompts(self) -> list[str | list[int]]:
        p = self.prompt
        if isinstance(p, str):
            return [p]
        if _token_ids(p):
            return [list(p)]
        return [x for x in p]


def _token_ids(prompt: list[str] | list[int] | list[list[int]]) -> TypeIs[list[int]]:
    """Whether a completions prompt list is one prompt's token ids (else: several prompts)."""
    return all(isinstance(x, int) for x in prompt)


MAX_EMBEDDING_INPUTS = 2048  # OpenAI's limit on the inputs of one /v1/embeddings request


class EmbeddingRequest(TextRequest):
    """OpenAI's /v1/embeddings body: ``input`` a text, texts, one input's token ids, or several inputs' ids."""

    model: str | None = None
    input: str | list[str] | list[int] | list[list[int]]
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(None, ge=1)  # only the model's own size is taken (no model here shortens)
    user: str | None = None

    @field_validator("input")
    @classmethod
    def _inputs(cls, value: Any) -> Any:
        if isinstance(value, str) and not value:
            raise ValueError("must not be an empty string; send the text to embed")
        if isinstance(value, list):
            if not value:
                raise ValueError("must not be an empty list; send a text, a list of texts or of token ids")
            if not _token_ids(value) and len(value) > MAX_EMBEDDING_INPUTS:  # (one input's ids: its context)
                raise ValueError(f"holds {len(value)} inputs; at most {MAX_EMBEDDING_INPUTS} go in one request: "
                                 f"send them in several")
            empty = next((i for i, item in enumerate(value) if isinstance(item, (str, list)) and not item), None)
            if empty is not None:
                raise PydanticCustomError("empty_input", "input[{index}] is empty; every input needs text or "
                                          "token ids", {"param": "input", "index": empty})
        return value

    def inputs(self) -> list[str | list[int]]:
        """Each input: a text, or one input's token ids."""
        given = self.input
        if isinstance(given, str):
            return [given]
        if _token_ids(given):
            return [list(given)]
        return [x for x in given]
