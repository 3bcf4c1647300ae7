"""OpenAI's Responses API: ``POST /v1/responses`` and its stored responses, a thin adapter over the chat path.

A request's input items (after those of the response it continues, ``previous_response_id``, whose instructions
are not carried over) become a chat completions request that ``start_chat`` serves as any chat (model, adapters,
sampling, tools, images, documents, template); the reply comes back as output items, whole or as typed events.
A response is stored unless ``store: false``, for its API key only: retrieved (also as its event stream again),
continued, deleted, its input items listed. ``background: true`` answers at once and generates on; the response is
polled, streamed (``GET ...?stream=true``) or cancelled. ``POST /v1/responses/input_tokens`` renders the request
as a real one would be and counts its prompt. See webui/api/responses_protocol.py for what is refused and why.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass, field
from collections.abc import AsyncIterator, Iterable
from typing import Any, Literal

from fastapi import APIRouter, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import StreamingResponse
from pydantic import ValidationError

from loaders.base import LoadedModel
from webui.api.auth import sees_every_client
from webui.api.body import JSONBodyRoute
from webui.api.errors import APIError, validation_error
from webui.api.protocol import ChatCompletionRequest
from webui.api.responses_items import chat_messages, item_id, output_as_items, read_input, translated
from webui.api.responses_output import ResponseEvents, ResponseReader, ResponseRun, replayed
from webui.api.responses_protocol import ResponsesRequest, check_includes
from webui.api.routes import count_prompt, keep_answer, prepare_chat, serving, start_chat
from webui.api.serving import Choice, note_usage
from webui.api.stored import page_of
from webui.engine import EngineError, InvalidParameter
from webui.store.responses import ResponseStore, StoredResponse

log = logging.getLogger("webui.api")
router = APIRouter(route_class=JSONBodyRoute)  # bodies read whole or refused (webui/api/body.py)


@dataclass
class Responses:
    """The stored responses and the background ones generating now (``app.state.responses``)."""

    store: ResponseStore
    running: dict[str, ResponseRun] = field(default_factory=dict)


def _state(request: Request) -> Responses:
    return request.app.state.responses


def _client(request: Request) -> str | None:
    """Whose responses a request sees: its own key's (None: an admin key or a server without keys, every one)."""
    return None if sees_every_client(request) else request.state.client


def _found(request: Request, response_id: str, param: str = "response_id") -> StoredResponse:
    found = _state(request).store.get(response_id, _client(request))
    if found is None:
        raise APIError(404, f"no stored response has the id '{response_id}' (responses made with store: false are "
                            f"not kept, and each API key sees its own)", type="not_found_error", param=param,
                       code="not_found")
    return found


def _history(request: Request, previous: str | None) -> list[tuple[str, dict]]:
    """The items of the conversation ``previous`` ends: each earlier response's input items and output items."""
    chain: list[StoredResponse] = []
    while previous is not None and previous not in {r.id for r in chain}:
        found = _state(request).store.get(previous, _client(request))
        if found is None:
            said = f", which {chain[-1].id} continues, was deleted" if chain else " does not exist (or another " \
                                                                                  "API key made it)"
            raise APIError(404, f"previous_response_id: the response '{previous}'{said}", type="not_found_error",
                           param="previous_response_id", code="not_found")
        if found.status in ("queued", "in_progress"):
            raise APIError(400, f"previous_response_id: the response '{previous}' is still {found.status}; continue "
                                f"it once it has ended", param="previous_response_id")
        chain.append(found)
        previous = found.previous
    items = [item for r in reversed(chain) for item in r.input + output_as_items(r.response.get("output") or [])]
    return [("previous_response_id", item) for item in items]


@dataclass
class Conversation:
    """A Responses request read: its own input items, and the chat request that serves it."""

    items: list[dict]
    chat: ChatCompletionRequest
    origins: list[str]  # the field each chat message came from (input[i], instructions, previous_response_id)


def read_request(body: ResponsesRequest, request: Request) -> Conversation:
    body.check()
    history = _history(request, body.previous_response_id)
    items = read_input(body.input, lambda wanted: _state(request).store.item(wanted, _client(request)))
    if not items and not history:
        raise APIError(400, "input is required: a string, or a list of input items (messages, function call "
                            "outputs)", param="input")
    named = ["input"] if isinstance(body.input, str) else [f"input[{i}]" for i in range(len(items))]
    messages, origins = chat_messages(history + list(zip(named, items)), body.instructions)
    try:
        chat = ChatCompletionRequest.model_validate({**body.chat_fields(), "messages": messages})
    except ValidationError as exc:
        raise translated(validation_error(RequestValidationError(exc.errors())), origins) from None
    return Conversation(items, chat, origins)


def _cache_block(model: LoadedModel, request: Request) -> int | None:
    """The prefix cache's block size for ``model`` (None: it keeps no prefix cache)."""
    engine = next((slot.engine for slot in serving(request).services.models.slots() if slot.model is model), None)
    return engine.config.prefix_block_tokens if engine is not None and engine.stats().prefix_cache is not None \
        else None


def new_response(body: ResponsesRequest, rid: str, created: float, model: str, params: dict[str, Any]) -> dict:
    """The response object as it starts: the request's settings echoed, no output yet."""
    return {"id": rid, "object": "response", "created_at": created, "status": "in_progress",
            "background": body.background, "completed_at": None, "error": None, "incomplete_details": None,
            "instructions": body.instructions, "max_output_tokens": body.max_output_tokens,
            "max_tool_calls": body.max_tool_calls, "model": model, "output": [],
            "parallel_tool_calls": body.parallel_tool_calls is not False,
            "previous_response_id": body.previous_response_id, "reasoning": {"effort": None, "summary": None},
            "service_tier": "default", "store": body.store, "temperature": params.get("temperature", body.temperature),
            "text": {"format": body.text_format(), "verbosity": (body.text or {}).get("verbosity") or "medium"},
            "tool_choice": body.tool_choice or "auto", "tools": body.echoed_tools(),
            "top_logprobs": body.top_logprobs or 0, "top_p": params.get("top_p", body.top_p),
            "truncation": body.truncation or "disabled", "usage": None, "user": body.user,
            "metadata": body.metadata or {}, "safety_identifier": body.safety_identifier,
            "prompt_cache_key": body.prompt_cache_key}


def _sse(events: Iterable[dict] | AsyncIterator[dict]) -> StreamingResponse:
    async def lines() -> AsyncIterator[str]:
        if isinstance(events, AsyncIterator):
            async for event in events:
                yield f"event: {event['type']}\ndata: {json.dumps(event, ensure_ascii=False)}\n\n"
        else:
            for event in events:
                yield f"event: {event['type']}\ndata: {json.dumps(event, ensure_ascii=False)}\n\n"

    return StreamingResponse(lines(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


@router.post("/v1/responses", response_model=None)  # a JSON body, or an SSE stream
async def create_response(body: ResponsesRequest, request: Request) -> dict | StreamingResponse:
    state, conversation = _state(request), read_request(body, request)
    try:
        run = await start_chat(conversation.chat, request)
    except (APIError, InvalidParameter) as exc:
        raise translated(exc, conversation.origins) from exc
    rid, created, client = item_id("resp"), time.time(), request.state.client
    seen = getattr(request.state, "seen", None) or {}
    out = ResponseEvents(new_response(body, rid, created, run.model.name, seen.get("params") or {}))
    if body.background:  # answered queued; polled, streamed or cancelled by its id from now on
        out.response["status"] = "queued"
        first = [out.lifecycle("response.created"), out.lifecycle("response.queued")]
    else:
        first = [out.lifecycle("response.created")]
    if body.store:  # kept from the start (retrieved while it generates), and again as it ends
        try:
            await asyncio.to_thread(state.store.add, StoredResponse(rid, client, created, out.response,
                                                                    conversation.items, body.background))
        except BaseException:
            for stream in run.streams:  # not generating for nobody
                stream.cancel()
            raise
    out.response["status"] = "in_progress"
    first.append(out.lifecycle("response.in_progress"))

    async def ended(response: dict[str, Any], choice: Choice) -> None:
        if not body.store:
            return
        try:  # (one deleted meanwhile stays deleted)
            await asyncio.to_thread(state.store.update, rid, response)
        except Exception:  # noqa: BLE001 - the answer still goes out; what could not be kept is logged
            log.exception("could not store the response %s", rid)

    reader = ResponseReader(out, run.plan, body.logprobs_wanted(), _cache_block(run.model, request))
    generating = ResponseRun(out, reader, run.streams, ended, time.time, first)
    if body.store:  # (followed by GET ?stream=true, stopped by cancel or delete, while it generates)
        state.running[rid] = generating
        generating.task.add_done_callback(lambda _: state.running.pop(rid, None))
    if body.background:
        if body.stream:
            return _sse(generating.follow())  # leaving the stream does not stop a background response
        return keep_answer(request, first[0]["response"])

    def kept() -> dict:
        note_usage(request, [generating.choice])
        return keep_answer(request, out.response)

    if body.stream:
        async def events() -> AsyncIterator[dict]:
            try:
                async for event in generating.follow():
                    yield event
            finally:
                if not generating.done.is_set():  # the client left: stop generating
                    generating.cancel()
                kept()

        return _sse(events())
    await _until_done(generating, request)
    error = out.response.get("error")
    if error is not None and reader.queue_timed_out:
        raise APIError(503, error["message"], type="service_unavailable", code="queue_timeout")
    if error is not None:
        raise APIError(500, error["message"], type="server_error")
    return kept()


async def _until_done(run: ResponseRun, request: Request) -> None:
    """Wait for ``run`` to end; a client that goes away cancels it."""
    while not run.done.is_set():
        try:
            await asyncio.wait_for(run.done.wait(), 0.25)
        except asyncio.TimeoutError:
            if await request.is_disconnected():
                run.cancel()
                await run.done.wait()


def _includes(request: Request) -> list[str]:
    """include[] as the SDK sends it in a query (brackets), or include=... repeated."""
    return request.query_params.getlist("include[]") + request.query_params.getlist("include")


@router.get("/v1/responses/{response_id}", response_model=None)
def retrieve_response(response_id: str, request: Request, stream: bool = False,
                      starting_after: int | None = None) -> dict | StreamingResponse:
    check_includes(_includes(request))
    found = _found(request, response_id)
    if not stream:
        if starting_after is not None:
            raise APIError(400, "starting_after is only taken with stream=true", param="starting_after")
        return found.response
    after = -1 if starting_after is None else starting_after
    running = _state(request).running.get(found.id)
    if running is not None:
        return _sse(running.follow(after))
    return _sse(event for event in replayed(found.response) if event["sequence_number"] > after)


@router.delete("/v1/responses/{response_id}")
def delete_response(response_id: str, request: Request) -> dict:
    found = _found(request, response_id)
    running = _state(request).running.get(found.id)
    if running is not None:
        running.cancel()
    _state(request).store.delete(found.id)
    return {"id": found.id, "object": "response", "deleted": True}


@router.post("/v1/responses/{response_id}/cancel")
async def cancel_response(response_id: str, request: Request) -> dict:
    found = _found(request, response_id)
    if not found.background:
        raise APIError(400, f"only responses created with background: true can be cancelled; '{response_id}' was "
                            f"answered when it was made", param="response_id")
    running = _state(request).running.get(found.id)
    if running is not None:  # (one that has ended is returned as it is)
        running.cancel()
        await running.done.wait()
        found = _found(request, response_id)
    return found.response


@router.get("/v1/responses/{response_id}/input_items")
def input_items(response_id: str, request: Request, after: str | None = None, before: str | None = None,
                limit: int = Query(20, ge=1, le=100), order: Literal["asc", "desc"] = "desc") -> dict:
    check_includes(_includes(request))
    return page_of(_found(request, response_id).input, after=after, before=before, limit=limit, order=order)


@router.post("/v1/responses/input_tokens")
async def input_tokens(body: ResponsesRequest, request: Request) -> dict:
    """The prompt's tokens as a real request with this body would have them (chat template, tools, images,
    documents, truncation), without generating."""
    conversation = read_request(body, request)
    try:
        chat = await prepare_chat(conversation.chat, request)
        counted = await asyncio.to_thread(count_prompt, chat)
        if counted is None:
            raise APIError(400, f"counting tokens needs a local model; '{chat.model.name}' is a remote server",
                           param="model")
    except (APIError, EngineError) as exc:
        raise translated(exc, conversation.origins) from exc
    return {"object": "response.input_tokens", "input_tokens": counted}


@router.post("/v1/responses/compact")
def compact_response(request: Request) -> dict:
    raise APIError(400, "responses.compact is not served here: it compacts a conversation into OpenAI's encrypted "
                        "items, which only OpenAI's models read; continue with previous_response_id, or send a "
                        "shorter input (truncation: 'auto' keeps the prompt's end)", code="unsupported_endpoint")
