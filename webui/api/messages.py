"""Anthropic's Messages API: POST /v1/messages (whole or streamed) and /v1/messages/count_tokens.

A thin adapter: the body (webui/api/messages_protocol.py) is read into a ChatCompletionRequest and goes through
exactly what a chat completion goes through (routes.start_chat: model, sampling, tools, images, documents,
template, prompt, engine); the reply comes back as Anthropic's message, or its stream of events. Errors come in
Anthropic's shape (webui/api/errors.py), naming the Messages body's fields: an error the chat path raised about
one of its own fields is renamed here (``anthropic_error``).

    message_start, ping, (content_block_start, content_block_delta..., content_block_stop)..., message_delta,
    message_stop

How the reply maps: text as a text block; tool calls (read from the reply as for chat completions,
webui/chat/tools.py) as tool_use blocks; the engine's finish as stop_reason: a stop string the request gave is
"stop_sequence" (with it as stop_sequence), other stops "end_turn" ("tool_use" when it called tools), max_tokens
and our time limit "max_tokens". Usage counts the prompt as Anthropic does: input_tokens are those read anew,
cache_read_input_tokens those our prefix cache gave (a request's cache_control changes nothing: the cache is
automatic).
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
from typing import Any, AsyncIterator, Sequence

from fastapi import APIRouter, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import StreamingResponse
from pydantic import ValidationError
from pydantic_core import from_json

from webui.api.body import JSONBodyRoute
from webui.api.errors import APIError, to_api_error, validation_error
from webui.api.messages_protocol import Block, CountTokensRequest, MessagesRequest, SystemBlock
from webui.api.protocol import ChatCompletionRequest
from webui.api.routes import count_prompt, keep_answer, prepare_chat, start_chat
from webui.api.serving import Choice, collect, new_id, note_usage
from webui.chat.tools import ReplyPiece, ReplyReader, ToolCall, ToolPlan, reply_calls
from webui.engine import EngineError, Interleaved, RequestStream
from webui.engine.params import specs

router = APIRouter(route_class=JSONBodyRoute)  # bodies read whole or refused (webui/api/body.py)

# our own fields a Messages body may carry beside Anthropic's (extra_body in its client), passed to the chat request
OWN_FIELDS = frozenset({spec.api_name or name for name, spec in specs().items()} - {"max_tokens", "stop"}
                       | {"preset", "loras", "chat_template", "truncate_prompt_tokens"})
# the chat request's fields that errors may name, as the Messages body names them
RENAMED = {"stop": "stop_sequences", "response_format": "output_config.format",
           "structured_outputs": "output_config.format", "parallel_tool_calls": "tool_choice",
           "user": "metadata.user_id", "continue_final_message": "messages", "add_generation_prompt": "messages",
           "max_completion_tokens": "max_tokens"}
_PART = re.compile(r"messages\[(\d+)\]\.content\[(\d+)\]\.(?:image_url|file)")
_TOOL = re.compile(r"tools\[(\d+)\](?:\.function\.parameters)?")

Paths = dict[tuple[int, int], str]  # (chat message, part) -> the block it came from ("messages.0.content.1")


def anthropic_error(error: APIError, paths: Paths) -> APIError:
    """``error`` with the chat request's field names written as the Messages body's."""
    def block(match: re.Match) -> str:
        return paths.get((int(match[1]), int(match[2])), match[0])

    def tool(match: re.Match) -> str:
        return f"tools.{match[1]}" + (".input_schema" if match[0].endswith("parameters") else "")

    def renamed(text: str) -> str:
        return _TOOL.sub(tool, _PART.sub(block, text))

    param = error.param
    message = renamed(error.message)
    if param in RENAMED:
        new = RENAMED[param]
        message = re.sub(rf"^{re.escape(param)}\b", new, message)
        param = new
    elif param is not None:
        param = renamed(param)
    return APIError(error.status, message, error.type, param, error.code, error.headers)


def _refused(field: str, message: str) -> APIError:
    return APIError(400, f"{field}: {message}", param=field)


def check_hosted(body: CountTokensRequest) -> None:
    """A 400 naming each field that asks for what only Anthropic's servers or models do, where ignoring it would
    change the answer."""
    if body.thinking is not None and body.thinking.type in ("enabled", "between_tools"):
        raise _refused("thinking", f"extended thinking (type '{body.thinking.type}') needs a model with a reasoning "
                                   "template, and no model this server loads has one: they answer directly. Leave "
                                   "thinking out, or send {\"type\": \"disabled\"} (\"adaptive\" is taken: the "
                                   "model then decides not to think)")
    if body.mcp_servers:
        raise _refused("mcp_servers", "connecting to MCP servers is done by Anthropic's servers, which this server is "
                                      "not; call the MCP server's tools yourself and offer them as custom tools")
    if body.container is not None:
        raise _refused("container", "code execution containers (and the skills in them) run on Anthropic's servers "
                                    "only; leave container out")


def _text(blocks: str | Sequence[Block | SystemBlock]) -> str:
    return blocks if isinstance(blocks, str) else "\n\n".join(b.text or "" for b in blocks if b.type == "text")


def _document_part(block: Block, where: str) -> dict[str, Any]:
    """A document block as the chat request's file part (webui/api/documents.py reads it as text)."""
    source = block.source
    assert source is not None  # (checked by Block)
    if source.type in ("url", "file"):
        how = "fetch documents from URLs" if source.type == "url" else "have Anthropic's Files API (file_id)"
        raise _refused(f"{where}.source", f"this server does not {how}; send the document itself: a base64 "
                                          "source (a PDF), a text source, or a content source")
    if source.type == "base64":
        data_url, extension = f"data:{source.media_type};base64,{source.data}", _extension(source.media_type or "")
    else:  # text, or content blocks: plain text
        if isinstance(source.content, list) and any(b.type != "text" for b in source.content):
            raise _refused(f"{where}.source.content", "a content source takes text blocks only here")
        text = source.data if source.type == "text" else _text(source.content or "")
        data_url, extension = "data:text/plain;base64," + base64.b64encode((text or "").encode()).decode(), ".txt"
    title = block.title.strip() if block.title else ""
    filename = (title if title.lower().endswith(extension) else title + extension) if title and extension else None
    return {"type": "file", "file": {"file_data": data_url, "filename": filename}}


def _extension(media_type: str) -> str:
    return {"application/pdf": ".pdf", "text/plain": ".txt"}.get(media_type.lower(), "")


def _parts(block: Block, where: str) -> list[dict[str, Any]]:
    """A block as the chat request's content parts: a document's context is a text part after it; a thinking block
    (an earlier reply's reasoning, which Anthropic's API leaves out of the prompt too) gives none."""
    if block.type == "document" and block.context:
        return [_document_part(block, where), {"type": "text", "text": f"\n{block.context}"}]
    part = _part(block, where)
    return [part] if part is not None else []


def _part(block: Block, where: str) -> dict[str, Any] | None:
    """A block as the chat request's content part (None for a thinking block)."""
    if block.type == "text":
        return {"type": "text", "text": block.text}
    if block.type == "image":
        source = block.source
        assert source is not None
        if source.type == "base64":
            return {"type": "image_url", "image_url": {"url": f"data:{source.media_type};base64,{source.data}"}}
        if source.type == "url":
            return {"type": "image_url", "image_url": {"url": source.url}}
        raise _refused(f"{where}.source", f"an image's source must be base64 or url here (got {source.type}: "
                                          "Anthropic's Files API is not served); send the image as base64")
    if block.type == "document":
        return _document_part(block, where)
    return None  # thinking, redacted_thinking


def chat_messages(body: CountTokensRequest) -> tuple[list[dict[str, Any]], Paths]:
    """The Messages body's system prompt and messages as the chat request's messages, and where each content part
    came from. A user message's tool_result blocks become tool messages (in their place among its blocks); an
    assistant message's tool_use blocks become its tool_calls."""
    out: list[dict[str, Any]] = []
    paths: Paths = {}
    if body.system:
        out.append({"role": "system", "content": _text(body.system)})

    def parts_of(blocks: list[tuple[str, Block]], parts: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
        """The chat parts of (where, block) pairs, after ``parts``; each one's origin noted for the message about
        to be added."""
        parts = list(parts or [])
        for at, block in blocks:
            for part in _parts(block, at):
                paths[(len(out), len(parts))] = at
                parts.append(part)
        return parts

    for i, message in enumerate(body.messages):
        where = f"messages.{i}.content"
        if isinstance(message.content, str):
            out.append({"role": message.role, "content": message.content})
            continue
        blocks = [(f"{where}.{j}", block) for j, block in enumerate(message.content)]
        if message.role == "assistant":
            calls = [{"id": b.id, "type": "function", "function": {"name": b.name, "arguments": json.dumps(b.input)}}
                     for b in message.content if b.type == "tool_use"]
            text = parts_of([(at, b) for at, b in blocks if b.type != "tool_use"])
            out.append({"role": "assistant", "content": text, **({"tool_calls": calls} if calls else {})})
            continue
        run: list[tuple[str, Block]] = []  # the blocks before the next tool_result: one user message
        for at, block in [*blocks, ("", None)]:
            if block is not None and block.type != "tool_result":
                run.append((at, block))
                continue
            if run and (parts := parts_of(run)):
                out.append({"role": "user", "content": parts})
            run = []
            if block is not None:  # a tool_result: a tool message (an error result says so in its text)
                error = "Error: " if block.is_error else ""
                content: Any = error + (block.content or "") if not isinstance(block.content, list) else parts_of(
                    [(f"{at}.content.{k}", b) for k, b in enumerate(block.content)],
                    [{"type": "text", "text": error}] if error else [])
                out.append({"role": "tool", "tool_call_id": block.tool_use_id, "content": content})
    return out, paths


def chat_request(body: CountTokensRequest) -> tuple[ChatCompletionRequest, Paths]:
    """The chat request a Messages body asks for, and where each of its content parts came from."""
    check_hosted(body)
    messages, paths = chat_messages(body)
    fields: dict[str, Any] = {k: v for k, v in (body.model_extra or {}).items() if k in OWN_FIELDS}
    fields.update(model=body.model, messages=messages)
    last = body.messages[-1]
    if last.role == "assistant":  # a prefill: the reply continues it
        if isinstance(last.content, list) and any(b.type == "tool_use" for b in last.content):
            raise _refused(f"messages.{len(body.messages) - 1}", "the last message holds the assistant's tool_use; "
                                                                 "answer it with a user message of tool_result blocks")
        if body.tools and (body.tool_choice is None or body.tool_choice.type != "none"):
            raise _refused("messages", "a last assistant message (a prefill the reply continues) cannot be taken with "
                                       "tools offered here; leave the prefill out, or send tool_choice none")
        fields.update(continue_final_message=True, add_generation_prompt=False)
    if body.tools:
        fields["tools"] = [{"type": "function", "function": {"name": t.name, "description": t.description or "",
                                                             "parameters": t.input_schema}} for t in body.tools]
    if body.tool_choice is not None:
        choice = body.tool_choice
        fields["tool_choice"] = {"auto": "auto", "any": "required", "none": "none"}.get(choice.type) or {
            "type": "function", "function": {"name": choice.name}}
        if choice.disable_parallel_tool_use is not None:
            fields["parallel_tool_calls"] = not choice.disable_parallel_tool_use
    if body.output_config is not None and body.output_config.format is not None:
        if body.tool_choice is not None and body.tool_choice.type in ("any", "tool"):
            raise _refused("output_config.format", "a JSON output format cannot be combined with tool_choice "
                                                   f"'{body.tool_choice.type}' here (that reply is tool calls only)")
        fields["response_format"] = {"type": "json_schema", "json_schema": {
            "name": "output", "schema": body.output_config.format.schema_}}
    if isinstance(body, MessagesRequest):
        fields.update(max_tokens=body.max_tokens, stream=body.stream,
                      **{k: getattr(body, k) for k in ("temperature", "top_p", "top_k") if getattr(body, k) is not None})
        if body.stop_sequences is not None:
            fields["stop"] = body.stop_sequences
        if body.metadata is not None and body.metadata.user_id is not None:
            fields["user"] = body.metadata.user_id
    try:
        return ChatCompletionRequest.model_validate(fields), paths
    except ValidationError as exc:
        raise anthropic_error(validation_error(RequestValidationError(exc.errors())), paths) from None


# -- the reply ------------------------------------------------------------------------------------------------------

def tool_use_id(call_id: str) -> str:
    """An Anthropic-looking id ("toolu_...") for a call's id."""
    return "toolu_" + call_id.removeprefix("call_")


def tool_input(arguments: str) -> dict[str, Any]:
    """A call's arguments as tool_use input: as far as they go when the reply was cut in them."""
    try:
        value = from_json(arguments or "{}", allow_partial=True)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def tool_use(call: ToolCall) -> dict[str, Any]:
    return {"type": "tool_use", "id": tool_use_id(call.id), "name": call.name, "input": tool_input(call.arguments)}


def stop_of(choice: Choice, called: bool, stop_sequences: list[str] | None) -> tuple[str | None, str | None]:
    """(stop_reason, stop_sequence) of a finished reply; (None, None) for one the client left."""
    reason = choice.finish_reason
    if reason == "stop":
        if called:
            return "tool_use", None
        if choice.stop_string is not None and choice.stop_string in (stop_sequences or ()):
            return "stop_sequence", choice.stop_string
        return "end_turn", None
    if reason in ("length", "timeout"):  # (Anthropic's API has no "timeout": our time limit reads as max_tokens)
        return "max_tokens", None
    return None, None


def message_usage(choice: Choice) -> dict[str, int]:
    return {"input_tokens": choice.prompt_tokens - choice.cached_tokens, "output_tokens": len(choice.token_ids),
            "cache_creation_input_tokens": 0, "cache_read_input_tokens": choice.cached_tokens}


def message(rid: str, model: str, content: list[dict], choice: Choice, stop_sequences: list[str] | None) -> dict:
    called = any(block["type"] == "tool_use" for block in content)
    stop_reason, stop_sequence = stop_of(choice, called, stop_sequences)
    return {"id": rid, "type": "message", "role": "assistant", "model": model, "content": content,
            "stop_reason": stop_reason, "stop_sequence": stop_sequence, "usage": message_usage(choice)}


def reply_content(choice: Choice, plan: ToolPlan | None) -> list[dict]:
    text, calls = reply_calls(choice.text, plan, choice.finish_reason) if plan is not None else (choice.text, [])
    return ([{"type": "text", "text": text}] if text else []) + [tool_use(call) for call in calls]


def event(name: str, data: dict) -> str:
    return f"event: {name}\ndata: {json.dumps({'type': name, **data}, ensure_ascii=False)}\n\n"


class Blocks:
    """A streamed reply's content blocks: the events that write each piece, and the blocks put together."""

    def __init__(self) -> None:
        self.content: list[dict] = []
        self._json: list[str] = []  # each block's input_json so far (tool_use)
        self._open = False

    def _start(self, block: dict) -> list[str]:
        out = self.close()
        self.content.append(block)
        self._json.append("")
        self._open = True
        return out + [event("content_block_start", {"index": len(self.content) - 1, "content_block": dict(block)})]

    def write(self, piece: ReplyPiece) -> list[str]:
        out = []
        if piece.id is not None:
            return self._start({"type": "tool_use", "id": tool_use_id(piece.id), "name": piece.name, "input": {}})
        at = len(self.content) - 1
        if piece.call is not None:
            if not piece.arguments:
                return []
            self._json[at] += piece.arguments
            self.content[at]["input"] = tool_input(self._json[at])
            return [event("content_block_delta", {"index": at, "delta": {"type": "input_json_delta",
                                                                         "partial_json": piece.arguments}})]
        if not piece.text:
            return []
        if not (self._open and self.content[at]["type"] == "text"):
            out = self._start({"type": "text", "text": ""})
            at = len(self.content) - 1
        self.content[at]["text"] += piece.text
        return out + [event("content_block_delta", {"index": at, "delta": {"type": "text_delta", "text": piece.text}})]

    def close(self) -> list[str]:
        if not self._open:
            return []
        self._open = False
        return [event("content_block_stop", {"index": len(self.content) - 1})]


# -- the routes -----------------------------------------------------------------------------------------------------

@router.post("/v1/messages", response_model=None)  # a JSON body, or an SSE stream
async def create_message(body: MessagesRequest, request: Request) -> dict | StreamingResponse:
    chat, paths = chat_request(body)
    try:
        run = await start_chat(chat, request)
    except (APIError, ValueError, EngineError) as exc:
        raise anthropic_error(to_api_error(exc), paths) from exc
    model, plan, streams = run.model, run.plan, run.streams
    rid = new_id("msg").replace("-", "_", 1)  # msg_...
    if not body.stream:
        try:
            choice = (await collect(streams, request))[0]
        except APIError as exc:
            raise anthropic_error(exc, paths) from exc
        return keep_answer(request, message(rid, model.name, reply_content(choice, plan), choice,
                                            body.stop_sequences))
    counted = streams[0].prompt_tokens or 0  # message_start says the prompt's tokens, as the engine read them
    return StreamingResponse(_events(request, rid, model.name, counted, plan, streams, body.stop_sequences),
                             media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


async def _events(request: Request, rid: str, model: str, prompt_tokens: int, plan: ToolPlan | None,
                  streams: list[RequestStream], stop_sequences: list[str] | None) -> AsyncIterator[str]:
    """The stream's events; a client that leaves closes this generator, which cancels the request."""
    choice, blocks = Choice(0), Blocks()
    reader = ReplyReader(plan) if plan is not None else None
    ended = False

    def end() -> None:
        nonlocal ended
        if not ended:
            ended = True
            note_usage(request, [choice])
            keep_answer(request, message(rid, model, blocks.content, choice, stop_sequences))

    try:
        yield event("message_start", {"message": {
            "id": rid, "type": "message", "role": "assistant", "model": model, "content": [], "stop_reason": None,
            "stop_sequence": None, "usage": {"input_tokens": prompt_tokens, "output_tokens": 0,
                                             "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}}})
        yield event("ping", {})
        async for _, item in Interleaved(streams):
            if isinstance(item, BaseException):
                yield event("error", {"error": {"type": "api_error", "message": f"generation failed: {item}"}})
                return
            choice.add(item)
            if reader is not None and not reader.is_text:
                pieces = reader.feed(item.text, item.finish_reason)
            else:
                pieces = [ReplyPiece(item.text)]
            for piece in pieces:
                for line in blocks.write(piece):
                    yield line
        for line in blocks.close():
            yield line
        whole = message(rid, model, blocks.content, choice, stop_sequences)
        yield event("message_delta", {"delta": {"stop_reason": whole["stop_reason"],
                                                "stop_sequence": whole["stop_sequence"]},
                                      "usage": whole["usage"]})
        end()  # before message_stop: a kept request is written before the client reads its end (capture.py)
        yield event("message_stop", {})
    finally:
        end()


@router.post("/v1/messages/count_tokens")
async def count_tokens(body: CountTokensRequest, request: Request) -> dict:
    """The prompt's tokens as a message request with this body would have them (tools, system and images
    included): Anthropic's input_tokens before any cache."""
    chat, paths = chat_request(body)
    try:
        prepared = await prepare_chat(chat, request)
        counted = await asyncio.to_thread(count_prompt, prepared)
        if counted is None:
            raise APIError(400, f"counting tokens needs a local model; '{prepared.model.name}' is a remote server",
                           param="model")
        return {"input_tokens": counted}
    except (APIError, ValueError, EngineError) as exc:
        raise anthropic_error(to_api_error(exc), paths) from exc

