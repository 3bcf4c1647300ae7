"""Anthropic's Messages API request bodies (POST /v1/messages and /v1/messages/count_tokens), checked.

Unknown fields are ignored, as on the OpenAI routes; our own sampling fields (min_p, seed, preset, ...) may come
beside Anthropic's, as the OpenAI routes take them (``extra_body`` in Anthropic's client). Each block is one
model with a check per type (as protocol.ContentPart), so an error names the block: ``messages.0.content.1``.
What the real API does on Anthropic's servers only (server tools, MCP servers, containers, citations, extended
thinking) is refused by name; what is only a hint to its servers (cache_control, service_tier, speed, effort,
inference_geo, diagnostics) is taken and has no effect here.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from webui.api.protocol import TextRequest

# block types the API has for what its own servers ran or fetched: sent back in a history, they cannot be read here
HOSTED_BLOCKS = ("server_tool_use", "web_search_tool_result", "web_fetch_tool_result", "code_execution_tool_result",
                 "bash_code_execution_tool_result", "text_editor_code_execution_tool_result",
                 "tool_search_tool_result", "container_upload", "mcp_tool_use", "mcp_tool_result")
BLOCKS = ("text", "image", "document", "tool_use", "tool_result", "thinking", "redacted_thinking")
TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,128}$")  # the API's rule for a tool's name


class AnthropicModel(BaseModel):
    model_config = ConfigDict(extra="ignore")


class Source(AnthropicModel):
    """An image's or a document's source: base64 data, a URL, plain text, content blocks, or a Files API id."""

    type: Literal["base64", "url", "text", "content", "file"]
    media_type: str | None = None
    data: str | None = None
    url: str | None = None
    content: str | list[Block] | None = None
    file_id: str | None = None

    @model_validator(mode="after")
    def _complete(self) -> "Source":
        needs = {"base64": ("data", "media_type"), "url": ("url",), "text": ("data",), "content": ("content",),
                 "file": ("file_id",)}[self.type]
        missing = [name for name in needs if getattr(self, name) is None]
        if missing:
            raise ValueError(f"a {self.type} source needs {' and '.join(repr(m) for m in missing)}")
        return self


class Block(AnthropicModel):
    """One content block of a message (or of a tool result, or of a document's content source)."""

    type: str
    text: str | None = None
    source: Source | None = None
    id: str | None = None  # tool_use
    name: str | None = None
    input: dict[str, Any] | None = None
    tool_use_id: str | None = None  # tool_result
    content: str | list[Block] | None = None
    is_error: bool = False
    title: str | None = None  # document
    context: str | None = None
    citations: Any = None  # document: {"enabled": bool}; text: the citations of an earlier reply (ignored)

    @model_validator(mode="after")
    def _known(self) -> "Block":
        if self.type in HOSTED_BLOCKS:
            raise ValueError(f"'{self.type}' blocks hold what Anthropic's hosted tools ran, which this server does "
                             "not run; leave them out of the history (or send their result as text)")
        if self.type not in BLOCKS:
            raise ValueError(f"content blocks of type '{self.type}' are not supported; send {', '.join(BLOCKS[:5])} "
                             "blocks")
        if self.type == "text" and not self.text:
            raise ValueError("text content blocks must be non-empty")
        if self.type in ("image", "document") and self.source is None:
            raise ValueError(f'an {self.type} block needs "source"' if self.type == "image" else
                             'a document block needs "source"')
        if self.type == "tool_use" and (not self.id or not self.name or self.input is None):
            raise ValueError('a tool_use block needs "id", "name" and "input" (an object)')
        if self.type == "tool_result" and not self.tool_use_id:
            raise ValueError('a tool_result block needs "tool_use_id" (the id of the tool_use it answers)')
        if self.type == "document" and isinstance(self.citations, dict) and self.citations.get("enabled"):
            raise ValueError("citations: citing passages of a document is a feature of Anthropic's models, which "
                             "this server does not have; leave citations out (the document is read as text)")
        return self


class Message(AnthropicModel):
    role: Literal["user", "assistant"]
    content: str | list[Block]

    @model_validator(mode="after")
    def _not_empty(self) -> "Message":
        if isinstance(self.content, list) and not self.content:
            raise ValueError("all messages must have non-empty content (an empty list has none)")
        for i, block in enumerate(self.content if isinstance(self.content, list) else []):
            if block.type == "tool_use" and self.role != "assistant":
                raise ValueError(f"content.{i}: tool_use blocks are the assistant's; a user message answers them "
                                 "with tool_result blocks")
            if block.type == "tool_result" and self.role != "user":
                raise ValueError(f"content.{i}: tool_result blocks go in a user message")
        return self


class SystemBlock(AnthropicModel):
    type: Literal["text"]
    text: str


class Tool(AnthropicModel):
    """A tool the model may call (a "custom" tool: ours to run). Anthropic's own tools are refused by name."""

    name: str
    description: str | None = None
    input_schema: dict[str, Any] | None = None
    type: str | None = None
    allowed_callers: list[str] | None = None

    @model_validator(mode="after")
    def _custom(self) -> "Tool":
        if self.type not in (None, "custom"):
            raise ValueError(f"'{self.type}' is one of Anthropic's own tools (its server tools run on Anthropic's "
                             "servers, and its client tools' schemas are built into Claude); this server serves "
                             "custom tools only: give name, description and input_schema")
        if not TOOL_NAME.match(self.name):
            raise ValueError(f"name must be 1 to 128 letters, digits, '_' or '-', got {self.name!r}")
        if not isinstance(self.input_schema, dict) or self.input_schema.get("type") != "object":
            raise ValueError('input_schema must be a JSON schema of an object: {"type": "object", "properties": '
                             '{...}}')
        if self.allowed_callers is not None and "direct" not in self.allowed_callers:
            raise ValueError("allowed_callers without 'direct' lets only Anthropic's code execution call the "
                             "tool, which this server does not run")
        return self


class ToolChoice(AnthropicModel):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool | None = None

    @model_validator(mode="after")
    def _named(self) -> "ToolChoice":
        if self.type == "tool" and not self.name:
            raise ValueError('a tool_choice of type "tool" needs the tool\'s "name"')
        return self


class Thinking(AnthropicModel):
    type: Literal["enabled", "disabled", "adaptive", "between_tools"]
    budget_tokens: int | None = None


class OutputFormat(AnthropicModel):
    type: Literal["json_schema"]
    schema_: dict[str, Any] = Field(alias="schema")


class OutputConfig(AnthropicModel):
    effort: str | None = None  # how much the model spends on its answer: a hint, with no effect here
    format: OutputFormat | None = None


class Metadata(AnthropicModel):
    user_id: str | None = Field(None, max_length=256)


class CountTokensRequest(TextRequest):
    """The body of /v1/messages/count_tokens: a message request's prompt, without what only generation needs."""

    model_config = ConfigDict(extra="allow")  # our sampling fields beside Anthropic's (see the module's docstring)

    model: str
    messages: list[Message] = Field(min_length=1)
    system: str | list[SystemBlock] | None = None
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    thinking: Thinking | None = None
    output_config: OutputConfig | None = None
    mcp_servers: list[Any] | None = None
    container: Any = None


class MessagesRequest(CountTokensRequest):
    """The body of /v1/messages."""

    max_tokens: int = Field(ge=1)
    stop_sequences: list[str] | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    metadata: Metadata | None = None
    stream: bool = False


Source.model_rebuild()
Block.model_rebuild()
