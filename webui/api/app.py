"""The OpenAI-compatible API app (and Anthropic's Messages API beside it): routes, auth, errors and one log line per
request."""

from __future__ import annotations

import logging
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI
from starlette.types import ASGIApp, Scope, Send

from webui.api import batches, embeddings, files, manage, message_batches, messages, responses, stored, utility
from webui.api.auth import require_key
from webui.api.batch_jobs import BatchJobs
from webui.api.capture import Capture
from webui.api.errors import APIError, install_error_handlers, speaks_anthropic
from webui.api.routes import router
from webui.api.serving import APIConfig, Serving
from webui.services import Services

log = logging.getLogger("webui.api")


class AccessLog:
    """Pure ASGI middleware: one line per request when its response ends (streams included)."""

    def __init__(self, app: ASGIApp, counts: Counter | None = None) -> None:
        self.app, self.counts = app, counts if counts is not None else Counter()

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        request_id = uuid.uuid4().hex[:12]
        started = time.perf_counter()
        state = scope.setdefault("state", {})
        status = 0

        async def send_logged(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message.setdefault("headers", []).append((b"x-request-id", request_id.encode()))
            await send(message)

        try:
            await self.app(scope, receive, send_logged)
        finally:
            self.counts[status] += 1
            ttft = state.get("ttft")
            line = (f"request {request_id} {scope['method']} {scope['path']} status={status} "
                    f"prompt_tokens={state.get('prompt_tokens', '-')} "
                    f"completion_tokens={state.get('completion_tokens', '-')} "
                    f"ttft={'-' if ttft is None else f'{ttft:.3f}s'} finish={state.get('finish', '-')} "
                    f"duration={time.perf_counter() - started:.3f}s")
            if "prompt" in state:
                line += f" prompt={state['prompt']!r}"
            log.info(line)


UPLOAD_SLACK = 64 * 2**10  # bytes a multipart body may hold beyond its file: boundaries, part headers, fields


class Guard:
    """Pure ASGI middleware: refuse bodies over the limit with 413 before they are parsed (by Content-Length, or
    as soon as a chunked body grows over it), and answer any error no handler mapped with a 500 in OpenAI's error
    shape (Anthropic's on its routes; logged with its traceback), so no route can answer a bare "Internal Server
    Error".

    ``uploads`` maps the paths that take a file (POST /v1/files) to their own limit on the file, in place of
    ``max_body_bytes`` (their route checks the file's exact size; here the body may have ``UPLOAD_SLACK`` more)."""

    def __init__(self, app: ASGIApp, max_body_bytes: int | None,
                 uploads: Mapping[str, int | None] | None = None) -> None:
        self.app, self.body_limit, self.uploads = app, max_body_bytes, dict(uploads or {})

    def _refusal(self, scope: Scope) -> tuple[int | None, APIError]:
        """The limit on this request's body and the 413 that refuses it."""
        if scope["method"] == "POST" and scope["path"] in self.uploads:
            limit = self.uploads[scope["path"]]
            return None if limit is None else limit + UPLOAD_SLACK, APIError(
                413, f"the file is over the server's limit of {limit} bytes for an upload (--api-max-file-mb)",
                param="file", code="file_too_large")
        return self.body_limit, APIError(413, f"the request body is over the server's limit of {self.body_limit} "
                                              f"bytes (--api-max-body-mb); send less per request",
                                         code="request_too_large")

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        limit, too_large = self._refusal(scope)
        if limit is not None:
            length = dict(scope.get("headers") or []).get(b"content-length", b"")
            if length.isdigit() and int(length) > limit:
                return await self._answer(send, too_large, scope)
        started = answered = False
        seen = 0

        async def counted():
            nonlocal seen, answered
            if answered:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request" and limit is not None:
                seen += len(message.get("body", b""))
                if seen > limit:  # answer now; the route reads a disconnect and gives up
                    answered = True
                    await self._answer(send, too_large, scope)
                    return {"type": "http.disconnect"}
            return message

        async def watched(message):
            nonlocal started
            if answered:
                return  # the 413 went out already
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counted, watched)
        except Exception as exc:
            if answered:
                return
            log.exception("unexpected error while serving %s %s", scope.get("method"), scope.get("path"))
            if not started:
                await self._answer(send, APIError(500, f"internal server error: {type(exc).__name__} (the "
                                                       "server's log has the details)", type="server_error"), scope)

    @staticmethod
    async def _answer(send: Send, error: APIError, scope: Scope) -> None:
        response = error.response(speaks_anthropic(scope))
        await send({"type": "http.response.start", "status": response.status_code,
                    "headers": response.raw_headers})
        await send({"type": "http.response.body", "body": response.body})


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    """While the app is served: its batch runner goes on with the open batches (webui/api/batch_jobs.py)."""
    await app.state.batch_jobs.start()
    try:
        yield
    finally:
        await app.state.batch_jobs.stop()


def create_api_app(services: Services, config: APIConfig) -> FastAPI:
    """The API app. Served (uvicorn runs its lifespan), it runs the API's batches; an app only called in process
    (a replay) runs none."""
    app = FastAPI(title="LLM Workbench OpenAI-compatible API", version="1", docs_url="/docs", redoc_url=None,
                  lifespan=_lifespan)
    app.state.serving = Serving(services, config)
    install_error_handlers(app)
    app.state.request_counts = Counter()
    app.state.batch_jobs = BatchJobs(app, services.api_batches, services.api_files)
    app.state.responses = responses.Responses(services.responses)
    for routes in (router, messages.router, embeddings.router, stored.router, responses.router, manage.router,
                   utility.router, files.router, batches.router, message_batches.router):
        app.include_router(routes, dependencies=[Depends(require_key)])

    @app.get("/health")
    def health() -> dict:
        return services.health()

    app.add_middleware(Capture, store=services.requests, max_body_bytes=config.max_body_bytes)
    app.add_middleware(Guard, max_body_bytes=config.max_body_bytes, uploads={"/v1/files": config.max_file_bytes})
    app.add_middleware(AccessLog, counts=app.state.request_counts)
    return app
