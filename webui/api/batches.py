"""OpenAI's Batch API (#45): ``POST /v1/batches``, ``GET /v1/batches[/{id}]``, ``POST /v1/batches/{id}/cancel``, in
OpenAI's shapes.

A batch reads a file uploaded with purpose ``batch`` (webui/api/files.py), checked whole when the batch is made
(webui/api/batch_input.py): a bad line fails the batch at once with ``errors.data`` naming it. Its rows then run
in the background, one batch at a time in the order they were made, each through this very app as a request to
its endpoint would (webui/api/batch_jobs.py). A batch and its files are its API key's; another key's is a 404, as
is a batch made through Anthropic's Message Batches API (webui/api/message_batches.py), which these do not list.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, ConfigDict

from webui.api.auth import visible_client
from webui.api.batch_input import BatchInput, read_input
from webui.api.batch_jobs import BatchJobs
from webui.api.body import JSONBodyRoute
from webui.api.errors import APIError
from webui.api.files import UPLOAD_PURPOSE, expiry_seconds, file_store
from webui.api.protocol import check_metadata
from webui.api.stored import cursor_page
from webui.store.api_batches import CANCELLABLE, APIBatch, APIBatchStore
from webui.store.api_files import FileStore, StoredFile

router = APIRouter(route_class=JSONBodyRoute)  # bodies read whole or refused (webui/api/body.py)

ENDPOINTS: tuple[str, ...] = (
    "/v1/chat/completions",
    "/v1/completions",
    "/v1/embeddings",
    "/v1/responses",
)
"""The endpoints a batch's rows may go to. A row runs through this app as an HTTP request to its endpoint would, so
another of this app's JSON endpoints (Anthropic's ``/v1/messages``) is one more line here."""
COMPLETION_WINDOWS = {"24h": 24 * 3600}  # OpenAI's only window; a batch not done by then expires
TIMED = ("in_progress", "finalizing", "completed", "failed", "expired", "cancelling", "cancelled")  # <status>_at


class BatchCreateRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    input_file_id: str
    endpoint: str
    completion_window: str
    metadata: dict[str, Any] | None = None
    output_expires_after: dict[str, Any] | None = None


def batch_store(request: Request) -> APIBatchStore:
    return request.app.state.serving.services.api_batches


def batch_jobs(request: Request) -> BatchJobs:
    return request.app.state.batch_jobs


def batch_object(batch: APIBatch) -> dict[str, Any]:
    """A batch as OpenAI returns it."""
    usage = batch.usage
    return {"id": batch.id, "object": "batch", "endpoint": batch.endpoint, "model": batch.model,
            "errors": {"object": "list", "data": batch.errors} if batch.errors else None,
            "input_file_id": batch.input_file_id, "completion_window": batch.completion_window,
            "status": batch.status, "output_file_id": batch.output_file_id, "error_file_id": batch.error_file_id,
            "created_at": batch.created_at, "expires_at": batch.expires_at,
            **{f"{status}_at": batch.times.get(status) for status in TIMED},
            "request_counts": {"total": batch.total, "completed": batch.completed, "failed": batch.failed},
            "usage": {"input_tokens": usage.input_tokens, "input_tokens_details": {"cached_tokens": usage.cached_tokens},
                      "output_tokens": usage.output_tokens, "output_tokens_details": {"reasoning_tokens": 0},
                      "total_tokens": usage.input_tokens + usage.output_tokens},
            "metadata": batch.metadata}


def _found(request: Request, batch_id: str) -> APIBatch:
    batch = batch_store(request).get(batch_id, visible_client(request), api="openai")
    if batch is None:
        raise APIError(404, f"no batch has the id '{batch_id}' (each API key sees its own batches)",
                       param="batch_id", code="not_found")
    return batch


def _input_file(request: Request, file_id: str) -> StoredFile:
    file = file_store(request).get(file_id, visible_client(request))
    if file is None:
        raise APIError(404, f"no file has the id '{file_id}' (upload the batch's input to /v1/files first; each API "
                            f"key sees its own files)", param="input_file_id", code="not_found")
    if file.purpose != UPLOAD_PURPOSE:
        raise APIError(400, f"the file '{file_id}' has purpose '{file.purpose}'; a batch reads a file uploaded with "
                            f"purpose '{UPLOAD_PURPOSE}'", param="input_file_id")
    return file


def _read(files: FileStore, file: StoredFile, endpoint: str) -> BatchInput:
    with files.open(file) as lines:
        return read_input(lines, endpoint)


@router.post("/v1/batches")
async def create_batch(body: BatchCreateRequest, request: Request) -> dict[str, Any]:
    if body.endpoint not in ENDPOINTS:
        raise APIError(400, f"endpoint '{body.endpoint}' is not served in batches here; one of "
                            f"{', '.join(ENDPOINTS)}", param="endpoint")
    window = COMPLETION_WINDOWS.get(body.completion_window)
    if window is None:
        raise APIError(400, f"completion_window must be one of {', '.join(COMPLETION_WINDOWS)}, got "
                            f"'{body.completion_window}'", param="completion_window")
    try:
        check_metadata(body.metadata or {})
    except ValueError as exc:
        raise APIError(400, str(exc), param="metadata") from exc
    expires = body.output_expires_after
    kept_for = None if expires is None else expiry_seconds(expires.get("anchor"), expires.get("seconds"),
                                                           "output_expires_after")
    file = _input_file(request, body.input_file_id)
    try:
        read = await asyncio.to_thread(_read, file_store(request), file, body.endpoint)
    except FileNotFoundError:  # deleted since it was found
        raise APIError(404, f"the file '{file.id}' was deleted", param="input_file_id", code="not_found") from None
    batch = await asyncio.to_thread(
        batch_store(request).create, client=request.state.client, endpoint=body.endpoint, input_file_id=file.id,
        completion_window=body.completion_window, window_s=window, rows=read.rows, errors=read.errors,
        model=read.model, metadata=body.metadata, output_expires_after=kept_for)
    batch_jobs(request).wake()
    return batch_object(batch)


@router.get("/v1/batches")
def list_batches(request: Request, after: str | None = None, limit: int = Query(20, ge=0, le=100)) -> dict[str, Any]:
    batches, more = batch_store(request).page(client=visible_client(request), api="openai", after=after,
                                              limit=limit)
    return cursor_page([batch_object(b) for b in batches], more)


@router.get("/v1/batches/{batch_id}")
def retrieve_batch(batch_id: str, request: Request) -> dict[str, Any]:
    return batch_object(_found(request, batch_id))


@router.post("/v1/batches/{batch_id}/cancel")
async def cancel_batch(batch_id: str, request: Request) -> dict[str, Any]:
    batch = await asyncio.to_thread(_found, request, batch_id)
    if batch.status in ("cancelling", "cancelled"):
        return batch_object(batch)
    moved = await asyncio.to_thread(batch_store(request).set_status, batch.seq, "cancelling", only_from=CANCELLABLE)
    batch = await asyncio.to_thread(_found, request, batch_id)
    if not moved and batch.status not in ("cancelling", "cancelled"):
        raise APIError(409, f"the batch is {batch.status}; only a batch that is validating or in progress can be "
                            f"cancelled", param="batch_id", code="batch_not_cancellable")
    batch_jobs(request).wake()  # it stops the rows in flight and writes the files of what ran
    return batch_object(batch)
