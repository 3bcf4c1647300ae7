"""Anthropic's Message Batches API: ``POST /v1/messages/batches``, ``GET /v1/messages/batches[/{id}]``,
``POST /v1/messages/batches/{id}/cancel``, ``DELETE /v1/messages/batches/{id}`` and
``GET /v1/messages/batches/{id}/results``, in Anthropic's shapes (errors too: webui/api/errors.py
``speaks_anthropic``).

A thin adapter on the batches OpenAI's Batch API runs (webui/api/batches.py): the requests come inline, each
``{"custom_id", "params"}`` with params a /v1/messages body, checked whole when the batch is made
(webui/api/batch_input.py ``message_requests``: a bad one is a 400 naming it); they are kept as the rows of a batch
made through ``api="anthropic"`` (webui/store/api_batches.py) and run by the one runner (webui/api/batch_jobs.py),
each sent to /v1/messages in process as the batch's key, at background priority. Each row's result is kept in
Anthropic's shape; the results are read from the rows once the batch has ended. A batch is its API key's: another
key's, or one made through /v1/batches, is a 404 here (and these are not listed by /v1/batches).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict

from webui.api.auth import visible_client
from webui.api.batch_input import MESSAGES, message_requests
from webui.api.batch_jobs import message_unrun_result
from webui.api.batches import COMPLETION_WINDOWS, batch_jobs, batch_store
from webui.api.body import JSONBodyRoute
from webui.api.errors import APIError
from webui.api.messages_models import page_limit
from webui.store.api_batches import CANCELLABLE, ENDED, APIBatch

router = APIRouter(route_class=JSONBodyRoute)  # bodies read whole or refused (webui/api/body.py)

API = "anthropic"
WINDOW = "24h"  # a batch not ended 24 hours after it was made expires (its requests not run: "expired")
PROCESSING = {"cancelling": "canceling", **{status: "ended" for status in ENDED}}  # else "in_progress"


class MessageBatchCreateRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    requests: list[Any]


def rfc3339(stamp: int | None) -> str | None:
    return None if stamp is None else datetime.fromtimestamp(stamp, timezone.utc).isoformat().replace("+00:00", "Z")


def request_counts(batch: APIBatch) -> dict[str, int]:
    """Anthropic's tallies: every request is "processing" until the batch ends; then each is counted by its result
    (a request that never ran as canceled or expired by how the batch ended, or errored if it failed)."""
    counts = {"processing": 0, "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0}
    if batch.status not in ENDED:
        return {**counts, "processing": batch.total}
    unrun = batch.total - batch.completed - batch.failed
    unrun_as = {"cancelled": "canceled", "expired": "expired"}.get(batch.status, "errored")
    counts.update(succeeded=batch.completed, errored=batch.failed)
    counts[unrun_as] += unrun
    return counts


def message_batch(batch: APIBatch, request: Request) -> dict[str, Any]:
    """A batch as Anthropic's MessageBatch."""
    ended = batch.status in ENDED
    return {"id": batch.id, "type": "message_batch", "processing_status": PROCESSING.get(batch.status, "in_progress"),
            "request_counts": request_counts(batch), "created_at": rfc3339(batch.created_at),
            "expires_at": rfc3339(batch.expires_at), "ended_at": rfc3339(batch.times.get(batch.status)) if ended
            else None, "cancel_initiated_at": rfc3339(batch.times.get("cancelling")), "archived_at": None,
            "results_url": str(request.url_for("message_batch_results", message_batch_id=batch.id)) if ended
            else None}


def _found(request: Request, message_batch_id: str) -> APIBatch:
    batch = batch_store(request).get(message_batch_id, visible_client(request), api=API)
    if batch is None:
        raise APIError(404, f"message_batch_id: no Message Batch has the id '{message_batch_id}' (each API key sees "
                            f"its own)", param="message_batch_id", code="not_found")
    return batch


def _cursor(request: Request, batch_id: str | None, field: str) -> None:
    if batch_id is not None and batch_store(request).get(batch_id, visible_client(request), api=API) is None:
        raise APIError(400, f"{field}: no Message Batch '{batch_id}' is listed here, so there is no page "
                            f"{field[:-3]} it; send the id of a listed batch (first_id or last_id of a page)",
                       param=field)


@router.post("/v1/messages/batches")
async def create_message_batch(body: MessageBatchCreateRequest, request: Request) -> dict[str, Any]:
    read = message_requests(body.requests)
    batch = await asyncio.to_thread(
        batch_store(request).create, client=request.state.client, endpoint=MESSAGES, input_file_id="",
        completion_window=WINDOW, window_s=COMPLETION_WINDOWS[WINDOW], rows=read.rows, model=read.model, api=API)
    batch_jobs(request).wake()
    return message_batch(batch, request)


@router.get("/v1/messages/batches")
def list_message_batches(request: Request, after_id: str | None = None, before_id: str | None = None
                         ) -> dict[str, Any]:
    """Newest first, in pages: ``limit`` (1 to 1000, default 20), ``after_id`` (the batches made before that one)
    and ``before_id`` (the ones made after it)."""
    limit = page_limit(request.query_params.get("limit"))
    _cursor(request, after_id, "after_id")
    _cursor(request, before_id, "before_id")
    batches, more = batch_store(request).page(client=visible_client(request), api=API, after=after_id,
                                              before=before_id, limit=limit)
    data = [message_batch(b, request) for b in batches]
    return {"data": data, "has_more": more, "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None}


@router.get("/v1/messages/batches/{message_batch_id}")
def retrieve_message_batch(message_batch_id: str, request: Request) -> dict[str, Any]:
    return message_batch(_found(request, message_batch_id), request)


@router.post("/v1/messages/batches/{message_batch_id}/cancel")
async def cancel_message_batch(message_batch_id: str, request: Request) -> dict[str, Any]:
    batch = await asyncio.to_thread(_found, request, message_batch_id)
    if batch.status != "cancelling":
        moved = await asyncio.to_thread(batch_store(request).set_status, batch.seq, "cancelling",
                                        only_from=CANCELLABLE)
        batch = await asyncio.to_thread(_found, request, message_batch_id)
        if not moved and batch.status != "cancelling":
            raise APIError(400, f"message_batch_id: the Message Batch '{batch.id}' has ended (processing_status "
                                f"ended); only a batch in progress can be canceled", param="message_batch_id")
        batch_jobs(request).wake()  # it stops the requests in flight; those not run are canceled
    return message_batch(batch, request)


@router.delete("/v1/messages/batches/{message_batch_id}")
async def delete_message_batch(message_batch_id: str, request: Request) -> dict[str, Any]:
    batch = await asyncio.to_thread(_found, request, message_batch_id)
    if not await asyncio.to_thread(batch_store(request).delete, batch.seq):
        raise APIError(400, f"message_batch_id: the Message Batch '{batch.id}' is still processing "
                            f"({PROCESSING.get(batch.status, 'in_progress')}); only an ended batch can be deleted: "
                            f"cancel it first", param="message_batch_id")
    return {"id": batch.id, "type": "message_batch_deleted"}


@router.get("/v1/messages/batches/{message_batch_id}/results", name="message_batch_results")
def message_batch_results(message_batch_id: str, request: Request) -> StreamingResponse:
    """Each request's result, one JSON object a line, in the order the requests were sent."""
    batch = _found(request, message_batch_id)
    if batch.status not in ENDED:
        raise APIError(400, f"message_batch_id: the Message Batch '{batch.id}' is still processing "
                            f"({PROCESSING.get(batch.status, 'in_progress')}); its results are ready once its "
                            f"processing_status is ended", param="message_batch_id")
    store = batch_store(request)

    def lines() -> Iterator[bytes]:
        for row in store.rows(batch.seq):
            result = row.result if row.result is not None else message_unrun_result(row.custom_id, batch)
            yield (json.dumps(result) + "\n").encode()

    return StreamingResponse(lines(), media_type="application/x-jsonl")
