"""OpenAI's Files API (#45) for the Batch API: ``POST /v1/files`` (multipart ``file`` and ``purpose``), list,
retrieve, ``/content`` and delete, in OpenAI's shapes (webui/store/api_files.py keeps them).

An upload's purpose is ``batch`` (a batch's input); ``batch_output`` is this server's, on the output and error
files a batch writes; OpenAI's other purposes are refused by name (nothing here reads those files). An upload has
its own size limit, ``--api-max-file-mb`` (default 200 MB, OpenAI's limit for a batch input), in place of
``--api-max-body-mb``: a 413 as soon as the body is over it (webui/api/app.py ``Guard``). Each API key sees and
uses only its own files; an admin key (or a server without keys) every key's; another key's file is a 404.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from typing import Any, BinaryIO, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import StreamingResponse
from starlette.datastructures import FormData, UploadFile
from starlette.formparsers import MultiPartException
from starlette.requests import ClientDisconnect

from webui.api.auth import visible_client
from webui.api.body import JSONBodyRoute
from webui.api.errors import APIError
from webui.api.stored import cursor_page
from webui.store.api_files import FileStore, StoredFile

router = APIRouter(route_class=JSONBodyRoute)  # (an upload is multipart: read by its route, which declares no body)

UPLOAD_PURPOSE, OUTPUT_PURPOSE = "batch", "batch_output"
OTHER_PURPOSES = ("assistants", "vision", "user_data", "evals", "fine-tune")  # OpenAI's, for APIs not served here
EXPIRY_S = (3600, 2592000)  # OpenAI's bounds on expires_after.seconds: an hour to 30 days
MAX_FILENAME = 512


def file_store(request: Request) -> FileStore:
    return request.app.state.serving.services.api_files


def file_object(file: StoredFile) -> dict[str, Any]:
    """A file as OpenAI returns it."""
    return {"id": file.id, "object": "file", "bytes": file.bytes, "created_at": file.created_at,
            "filename": file.filename, "purpose": file.purpose, "status": "processed", "expires_at": file.expires_at,
            "status_details": None}


def expiry_seconds(anchor: Any, seconds: Any, param: str) -> int:
    """The seconds of an ``expires_after`` ({anchor: "created_at", seconds}), checked as OpenAI checks them."""
    if anchor != "created_at":
        raise APIError(400, f"{param}.anchor must be 'created_at' (the only anchor), got {anchor!r}",
                       param=f"{param}.anchor")
    try:
        value = int(seconds)
    except (TypeError, ValueError):
        value = None
    if value is None or isinstance(seconds, bool) or not EXPIRY_S[0] <= value <= EXPIRY_S[1]:
        raise APIError(400, f"{param}.seconds must be a whole number from {EXPIRY_S[0]} (an hour) to {EXPIRY_S[1]} "
                            f"(30 days), got {seconds!r}", param=f"{param}.seconds")
    return value


def found(request: Request, file_id: str) -> StoredFile:
    """The file ``file_id`` if the request's key may see it; a 404 otherwise."""
    file = file_store(request).get(file_id, visible_client(request))
    if file is None:
        raise APIError(404, f"no file has the id '{file_id}' (each API key sees its own files)",
                       type="invalid_request_error", param="file_id", code="not_found")
    return file


def _purpose(value: Any) -> str:
    if value is None:
        raise APIError(400, "'purpose' is required: send it as a form field beside the file (purpose=batch)",
                       param="purpose")
    if not isinstance(value, str):
        raise APIError(400, "purpose must be a form field, not a file", param="purpose")
    if value == OUTPUT_PURPOSE:
        raise APIError(400, f"purpose '{OUTPUT_PURPOSE}' is set by this server on the files a batch writes; upload "
                            f"a batch's input with purpose '{UPLOAD_PURPOSE}'", param="purpose")
    if value in OTHER_PURPOSES:
        raise APIError(400, f"purpose '{value}' is not served here: this server keeps files for its Batch API only; "
                            f"upload a batch's input with purpose '{UPLOAD_PURPOSE}'", param="purpose")
    if value != UPLOAD_PURPOSE:
        raise APIError(400, f"purpose must be '{UPLOAD_PURPOSE}', got {value!r}", param="purpose")
    return value


def _upload(form: FormData, limit: int | None) -> UploadFile:
    upload = form.get("file")
    if not isinstance(upload, UploadFile):
        raise APIError(400, "'file' is required: send the file as the multipart/form-data part 'file' (with a "
                            "'purpose' field)", param="file")
    if limit is not None and (upload.size or 0) > limit:
        raise APIError(413, f"the file is over the server's limit of {limit} bytes for an upload "
                            f"(--api-max-file-mb)", param="file", code="file_too_large")
    if len(upload.filename or "") > MAX_FILENAME:
        raise APIError(400, f"the file's name is longer than {MAX_FILENAME} characters", param="file")
    return upload


@router.post("/v1/files")
async def upload_file(request: Request) -> dict[str, Any]:
    try:
        form = await request.form(max_files=1, max_fields=8)
    except MultiPartException as exc:
        raise APIError(400, f"the upload is not multipart/form-data this server reads: {exc.message}",
                       param="file") from None
    except ClientDisconnect:  # (cut short, or refused as too large: nobody reads this answer)
        raise APIError(400, "the upload ended before the length it declared; send the whole file") from None
    try:
        upload = _upload(form, request.app.state.serving.config.max_file_bytes)
        purpose = _purpose(form.get("purpose"))
        anchor, seconds = form.get("expires_after[anchor]"), form.get("expires_after[seconds]")
        expires = None if anchor is None and seconds is None else expiry_seconds(anchor, seconds, "expires_after")
        file = await asyncio.to_thread(file_store(request).add, request.state.client, upload.filename or "upload",
                                       purpose, upload.file, expires)
    finally:
        await form.close()
    return file_object(file)


@router.get("/v1/files")
def list_files(request: Request, purpose: str | None = None, after: str | None = None,
               limit: int = Query(10000, ge=0, le=10000), order: Literal["asc", "desc"] = "desc") -> dict[str, Any]:
    files, more = file_store(request).page(client=visible_client(request), purpose=purpose, after=after,
                                           limit=limit, order=order)
    return cursor_page([file_object(f) for f in files], more)


@router.get("/v1/files/{file_id}")
def retrieve_file(file_id: str, request: Request) -> dict[str, Any]:
    return file_object(found(request, file_id))


def _chunks(handle: BinaryIO) -> Iterator[bytes]:
    with handle:
        while chunk := handle.read(2**20):
            yield chunk


@router.get("/v1/files/{file_id}/content", response_model=None)
def file_content(file_id: str, request: Request) -> StreamingResponse:
    file = found(request, file_id)
    try:
        handle = file_store(request).open(file)  # (open now: a delete meanwhile cannot cut the answer short)
    except FileNotFoundError:
        raise APIError(404, f"the file '{file_id}' was deleted", param="file_id", code="not_found") from None
    return StreamingResponse(_chunks(handle), media_type="application/octet-stream",
                             headers={"content-length": str(os.fstat(handle.fileno()).st_size)})


@router.delete("/v1/files/{file_id}")
def delete_file(file_id: str, request: Request) -> dict[str, Any]:
    file = found(request, file_id)
    file_store(request).delete(file.id)
    return {"id": file.id, "object": "file", "deleted": True}
