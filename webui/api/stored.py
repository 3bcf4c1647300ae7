"""OpenAI's stored chat completions over the kept requests (#33): a chat completion created with ``store: true`` is
listed, retrieved (with its messages), tagged with metadata and deleted, in OpenAI's shapes and cursor pagination.

Each API key sees the completions it stored; an admin key (or a server without keys) sees every key's.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from fastapi import APIRouter, Body, Query, Request

from webui.api.auth import visible_client
from webui.api.body import JSONBodyRoute
from webui.api.errors import APIError
from webui.api.protocol import check_metadata
from webui.store.requests import CapturedRequest, RequestStore

router = APIRouter(route_class=JSONBodyRoute)  # bodies read whole or refused (webui/api/body.py)

_METADATA_PARAM = re.compile(r"^metadata\[(.+)\]$")


def _store(request: Request) -> RequestStore:
    return request.app.state.serving.services.requests


def _client(request: Request) -> str | None:
    return visible_client(request)


def _completion(item: CapturedRequest) -> dict[str, Any]:
    """The stored completion as OpenAI returns it: the completion with the request's metadata and settings."""
    sent = item.request if isinstance(item.request, dict) else {}
    return {**item.response, "metadata": item.metadata,
            **{key: sent.get(key) for key in ("seed", "temperature", "top_p", "presence_penalty",
                                               "frequency_penalty", "tool_choice", "tools") if key in sent}}


def _found(request: Request, completion_id: str) -> CapturedRequest:
    item = _store(request).get(completion_id, _client(request), stored=True)
    if item is None:
        raise APIError(404, f"no stored chat completion has the id '{completion_id}' (only completions created "
                            f"with store: true are kept, and each API key sees its own)", type="invalid_request_error",
                       param="completion_id", code="not_found")
    return item


def cursor_page(data: list[dict[str, Any]], has_more: bool) -> dict[str, Any]:
    """A list in OpenAI's cursor-page shape (stored completions, files, batches)."""
    return {"object": "list", "data": data, "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None, "has_more": has_more}


@router.get("/v1/chat/completions")
def list_stored(request: Request, model: str | None = None, after: str | None = None,
                limit: int = Query(20, ge=0, le=100), order: Literal["asc", "desc"] = "asc") -> dict:
    metadata = {m.group(1): value for key, value in request.query_params.items()
                if (m := _METADATA_PARAM.match(key))}
    page = _store(request).page(client=_client(request), stored=True, model=model, metadata=metadata, after=after,
                                limit=limit, order=order)
    return cursor_page([_completion(item) for item in page.items], page.has_more)


@router.get("/v1/chat/completions/{completion_id}")
def retrieve_stored(completion_id: str, request: Request) -> dict:
    return _completion(_found(request, completion_id))


@router.get("/v1/chat/completions/{completion_id}/messages")
def stored_messages(completion_id: str, request: Request, after: str | None = None,
                    limit: int = Query(20, ge=0, le=100), order: Literal["asc", "desc"] = "asc") -> dict:
    item = _found(request, completion_id)
    return page_of([_message(f"{item.id}-{i}", m) for i, m in enumerate(item.request.get("messages", []))],
                   after=after, limit=limit, order=order)


def page_of(data: list[dict[str, Any]], *, after: str | None = None, before: str | None = None, limit: int = 20,
            order: Literal["asc", "desc"] = "asc") -> dict[str, Any]:
    """One cursor page (OpenAI's list shape) of a stored object's items, given in ascending order, each with an
    "id": ``order``ed, those after the item ``after`` and before the item ``before`` (an id not among them: no
    bound), at most ``limit``. Stored completions' messages and stored responses' input items page with it."""
    data = data[::-1] if order == "desc" else list(data)
    ids = [x["id"] for x in data]
    if after in ids:
        data = data[ids.index(after) + 1:]
    ids = [x["id"] for x in data]
    if before in ids:
        data = data[:ids.index(before)]
    return cursor_page(data[:limit], len(data) > limit)


def _message(message_id: str, message: dict[str, Any]) -> dict[str, Any]:
    content = message.get("content")
    parts = content if isinstance(content, list) else None
    text = "".join(p.get("text", "") for p in parts if isinstance(p, dict)) if parts is not None else content
    return {"id": message_id, "role": message.get("role"), "content": text, "name": message.get("name"),
            "content_parts": parts, "tool_calls": message.get("tool_calls"), "refusal": None}


@router.post("/v1/chat/completions/{completion_id}")
def update_stored(completion_id: str, request: Request, metadata: Any = Body(..., embed=True)) -> dict:
    item = _found(request, completion_id)
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict):
        raise APIError(400, "metadata must be an object of string keys and values", param="metadata")
    try:
        check_metadata(metadata)
    except ValueError as exc:
        raise APIError(400, str(exc), param="metadata") from exc
    _store(request).set_metadata(item.id, metadata)
    item.metadata = dict(metadata)
    return _completion(item)


@router.delete("/v1/chat/completions/{completion_id}")
def delete_stored(completion_id: str, request: Request) -> dict:
    item = _found(request, completion_id)
    _store(request).delete(item.id)
    return {"object": "chat.completion.deleted", "id": item.id, "deleted": True}
