"""OpenAI's Responses API request body, checked, and read into a chat completions request (webui/api/routes.py's
``start_chat`` serves both).

What this server cannot do is refused by name (a 400 naming the field): hosted tools, reasoning effort (no
reasoning models here), the Conversations API, stored prompt templates, includes that name hosted tools. Fields
under chat completions' names (messages, max_tokens, response_format...) get a 400 that names the Responses
field to use. Our own extensions (seed, top_k, min_p, preset, loras, stop, chat_template, mode...) are taken as
in a chat completion.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field, field_validator

from webui.api.errors import APIError
from webui.api.protocol import ChatCompletionRequest, TextRequest, check_metadata

HOSTED_TOOLS = ("web_search", "web_search_preview", "web_search_preview_2025_03_11", "web_search_2025_08_26",
                "file_search", "code_interpreter", "computer_use_preview", "computer_use", "computer",
                "image_generation", "mcp", "local_shell", "shell", "apply_patch", "tool_search", "custom")
INCLUDABLE = ("message.output_text.logprobs", "message.input_image.image_url")
"""include values this server fills (an input image's URL is always in its input item)."""
REFUSED_INCLUDES = {
    "file_search_call.results": "file_search", "web_search_call.results": "web_search",
    "web_search_call.action.sources": "web_search", "code_interpreter_call.outputs": "code_interpreter",
    "computer_call_output.output.image_url": "computer_use_preview", "reasoning.encrypted_content": "reasoning"}
EFFORTS_SERVED = (None, "none")
# fields a request may set that name what this server does not have, and why
REFUSED_FIELDS = {
    "conversation": "the Conversations API is not served here; continue a conversation with previous_response_id",
    "prompt": "stored prompt templates live in OpenAI's dashboard; send the prompt as input and instructions",
    "context_management": "server-side compaction is not served here",
}
# chat completions' names for fields the Responses API names otherwise
CHAT_NAMES = {"messages": "input", "max_tokens": "max_output_tokens", "max_completion_tokens": "max_output_tokens",
              "response_format": "text.format", "logprobs": "include ['message.output_text.logprobs']",
              "n": "several requests (a response has one output)"}
# the chat request's fields the Responses API sets itself, under its own names and shapes
_OWN = {"model", "tools", "tool_choice", "parallel_tool_calls", "temperature", "top_p", "top_logprobs", "store",
        "metadata", "user", "stream", "stream_options", "continue_final_message", "add_generation_prompt",
        "truncate_prompt_tokens"}
PASSED_THROUGH = frozenset(set(ChatCompletionRequest.model_fields) - _OWN - set(CHAT_NAMES))
"""Our extensions a Responses body may carry as a chat completion would (seed, top_k, preset, loras, stop...)."""


class ResponsesRequest(TextRequest):
    """POST /v1/responses (and /v1/responses/input_tokens, which reads the same fields)."""

    model_config = ConfigDict(extra="allow")  # our extensions, passed to the chat request (PASSED_THROUGH)

    model: str | None = None
    input: str | list[Any] | None = None
    instructions: str | None = None
    previous_response_id: str | None = None
    tools: list[Any] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    text: dict[str, Any] | None = None
    max_output_tokens: int | None = Field(None, ge=1)
    max_tool_calls: int | None = Field(None, ge=0)
    temperature: float | None = None
    top_p: float | None = None
    top_logprobs: int | None = Field(None, ge=0, le=20)
    include: list[str] | None = None
    store: bool = True
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    background: bool = False
    metadata: dict[str, str] | None = None
    user: str | None = None
    truncation: Literal["auto", "disabled"] | None = None
    reasoning: dict[str, Any] | None = None
    service_tier: str | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None

    @field_validator("metadata")
    @classmethod
    def _metadata(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        check_metadata(value or {})
        return value

    def check(self) -> None:
        """What a request may not ask for here, as a 400 naming the field."""
        extra = self.model_extra or {}
        for name, why in REFUSED_FIELDS.items():
            if extra.get(name) is not None:
                raise APIError(400, f"{name}: {why}", param=name)
        for name, instead in CHAT_NAMES.items():
            if name in extra:
                raise APIError(400, f"{name} is a chat completions field; the Responses API takes {instead}",
                               param=name)
        effort = (self.reasoning or {}).get("effort")
        if effort not in EFFORTS_SERVED:
            raise APIError(400, f"reasoning.effort '{effort}' asks for a reasoning model; no model here reasons "
                                f"before it answers: leave reasoning out (or send effort 'none')",
                           param="reasoning.effort")
        check_includes(self.include or [])
        if self.stream_options is not None and not self.stream:
            raise APIError(400, "stream_options is only taken with stream: true", param="stream_options")
        if self.background and not self.store:
            raise APIError(400, "background: true needs store: true (a background response is fetched by its id "
                                "later)", param="background")

    def chat_tools(self) -> list[dict[str, Any]] | None:
        """The tools in chat completions' shape: each function tool's fields under "function"."""
        if self.tools is None:
            return None
        out = []
        for i, tool in enumerate(self.tools):
            kind = tool.get("type") if isinstance(tool, dict) else None
            if kind in HOSTED_TOOLS:
                raise APIError(400, f"tools[{i}]: the hosted tool '{kind}' runs on OpenAI's servers and is not "
                                    f"served here; offer function tools (type 'function') and run them yourself",
                               param=f"tools[{i}].type", code="unsupported_tool")
            if kind != "function":
                raise APIError(400, f"tools[{i}]: type must be 'function', got {kind!r}", param=f"tools[{i}].type")
            if not isinstance(tool.get("name"), str) or not tool["name"]:
                raise APIError(400, f"tools[{i}]: a function tool needs a 'name'", param=f"tools[{i}].name")
            for key, kind, said in (("description", str, "a string"), ("parameters", dict, "a JSON schema object"),
                                    ("strict", bool, "true or false")):
                if tool.get(key) is not None and not isinstance(tool[key], kind):
                    raise APIError(400, f"tools[{i}].{key} must be {said}", param=f"tools[{i}].{key}")
            function = {key: tool[key] for key in ("name", "description", "parameters", "strict")
                        if tool.get(key) is not None}
            out.append({"type": "function", "function": function})
        return out

    def echoed_tools(self) -> list[dict[str, Any]]:
        """The tools as a response echoes them (checked by ``chat_tools``)."""
        return [{"type": "function", "name": t["name"], "description": t.get("description"),
                 "parameters": t.get("parameters"), "strict": t.get("strict")} for t in self.tools or []]

    def chat_tool_choice(self) -> str | dict[str, Any] | None:
        choice = self.tool_choice
        if choice is None or choice in ("none", "auto", "required"):
            return choice
        if isinstance(choice, dict) and choice.get("type") == "function" and isinstance(choice.get("name"), str):
            return {"type": "function", "function": {"name": choice["name"]}}
        kind = choice.get("type") if isinstance(choice, dict) else None
        if kind in HOSTED_TOOLS or kind in ("allowed_tools",):
            raise APIError(400, f"tool_choice: '{kind}' is not served here (function tools only); send 'none', "
                                f"'auto', 'required' or {{\"type\": \"function\", \"name\": ...}}",
                           param="tool_choice")
        raise APIError(400, 'tool_choice must be "none", "auto", "required" or {"type": "function", "name": ...}',
                       param="tool_choice")

    def text_format(self) -> dict[str, Any]:
        """text.format as given (default: plain text), checked."""
        text = self.text or {}
        if text.get("verbosity") not in (None, "low", "medium", "high"):
            raise APIError(400, "text.verbosity must be low, medium or high", param="text.verbosity")
        given = text.get("format") or {"type": "text"}
        if not isinstance(given, dict):
            raise APIError(400, "text.format must be an object with a 'type'", param="text.format")
        kind = given.get("type")
        if kind in ("text", "json_object"):
            return {"type": kind}
        if kind == "json_schema":
            if not isinstance(given.get("name"), str) or not given["name"]:
                raise APIError(400, "text.format: a json_schema format needs a 'name'", param="text.format.name")
            if not isinstance(given.get("schema"), dict):
                raise APIError(400, "text.format: a json_schema format needs a 'schema' (a JSON schema object)",
                               param="text.format.schema")
            return {key: given[key] for key in ("type", "name", "schema", "description", "strict") if key in given}
        raise APIError(400, f"text.format: type must be text, json_schema or json_object, got {kind!r}",
                       param="text.format.type")

    def response_format(self) -> dict[str, Any] | None:
        """text.format as chat completions' response_format (None: plain text)."""
        given = self.text_format()
        if given["type"] == "text":
            return None
        if given["type"] == "json_object":
            return {"type": "json_object"}
        return {"type": "json_schema", "json_schema": {key: given[key] for key in ("name", "schema", "strict")
                                                       if key in given}}

    def logprobs_wanted(self) -> bool:
        return "message.output_text.logprobs" in (self.include or [])

    def chat_fields(self) -> dict[str, Any]:
        """The chat request's fields besides its messages: sampling, tools, output format, our extensions."""
        fields = {key: value for key, value in (self.model_extra or {}).items() if key in PASSED_THROUGH}
        fields.update(model=self.model, tools=self.chat_tools(), tool_choice=self.chat_tool_choice(),
                      parallel_tool_calls=self.parallel_tool_calls, response_format=self.response_format(),
                      user=self.user)
        for key in ("temperature", "top_p"):
            if getattr(self, key) is not None:
                fields[key] = getattr(self, key)
        if self.max_output_tokens is not None:
            fields["max_completion_tokens"] = self.max_output_tokens
        if self.logprobs_wanted():
            fields.update(logprobs=True, top_logprobs=self.top_logprobs or 0)
        if self.truncation == "auto":  # keep the prompt's end, as much as the context leaves
            fields["truncate_prompt_tokens"] = -1
        return {key: value for key, value in fields.items() if value is not None}


def check_includes(include: list[str]) -> None:
    """include values: those this server fills, or a 400 naming the one it cannot."""
    for i, value in enumerate(include):
        if value in REFUSED_INCLUDES:
            raise APIError(400, f"include[{i}]: '{value}' names {REFUSED_INCLUDES[value]} output, which no model or "
                                f"tool here produces; this server fills {', '.join(INCLUDABLE)}",
                           param=f"include[{i}]")
        if value not in INCLUDABLE:
            raise APIError(400, f"include[{i}]: unknown value {value!r}; this server fills {', '.join(INCLUDABLE)}",
                           param=f"include[{i}]")


# chat completions' parameter names in errors, as the Responses API names them
RENAMED_PARAMS = {"max_completion_tokens": "max_output_tokens", "response_format": "text.format",
                  "structured_outputs": "text.format", "truncate_prompt_tokens": "truncation"}
