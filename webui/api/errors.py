"""One mapping from exceptions to OpenAI's error body and status code.

{"error": {"message", "type", "param", "code"}}: 400 for a bad request (naming
the parameter), 401 for auth, 404 for an unknown model, 503 when the server
cannot take the request now. Nothing a client does produces a 500.

Anthropic's Messages API (webui/api/messages.py) gets the same errors in its own
shape, {"type": "error", "error": {"type", "message"}}, with the type Anthropic
gives each status (and 529 overloaded_error where we answer 503): on its routes
(/v1/messages...), and on /v1/models when the request carries
``anthropic-version`` (``speaks_anthropic``).
"""

from __future__ import annotations

import logging
from typing import Any, Sequence

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import Scope

from webui.engine import EngineError, InvalidParameter, NoModelLoaded, PromptTooLong, QueueFull
from webui.engine.types import GeneratesNoText
from webui.names import InvalidName
from webui.presets import PresetError

log = logging.getLogger("webui.api")


MAX_MESSAGE, MAX_PARAM = 4000, 200  # characters: a value echoed (a name of megabytes) is cut in its middle


def _bounded(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    keep = limit // 4
    return f"{text[:limit - keep]} [... {len(text) - limit} characters left out ...] {text[-keep:]}"


class APIError(Exception):
    def __init__(self, status: int, message: str, type: str = "invalid_request_error", param: str | None = None,
                 code: str | None = None, headers: dict[str, str] | None = None):
        message, param = _bounded(message, MAX_MESSAGE), None if param is None else _bounded(param, MAX_PARAM)
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code
        self.headers = headers or {}

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def response(self, anthropic: bool = False) -> JSONResponse:
        """The error as OpenAI's body, or with ``anthropic`` as Anthropic's (see ``anthropic_body``)."""
        if anthropic:
            status, body = self.anthropic_body()
            return JSONResponse(body, status_code=status, headers=self.headers)
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)

    def anthropic_body(self) -> tuple[int, dict]:
        """(status, body) in Anthropic's shape: the type its API gives the status, the field named in the message
        (its body has no ``param``)."""
        status = 529 if self.status == 503 else self.status  # Anthropic's "temporarily overloaded"
        kind = ANTHROPIC_TYPES.get(status) or ("api_error" if status >= 500 else "invalid_request_error")
        message = self.message
        if self.param and self.param not in message:
            message = f"{self.param}: {message}"
        return status, {"type": "error", "error": {"type": kind, "message": message}}


# Anthropic's error types by status (https://docs.anthropic.com/en/api/errors)
ANTHROPIC_TYPES = {400: "invalid_request_error", 401: "authentication_error", 402: "billing_error",
                   403: "permission_error", 404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error",
                   500: "api_error", 504: "timeout_error", 529: "overloaded_error"}


def speaks_anthropic(scope: Scope) -> bool:
    """Whether a request is answered in Anthropic's dialect: the Messages API's routes, and the models list when
    the client sends ``anthropic-version`` (as Anthropic's clients always do)."""
    path = scope.get("path", "")
    if path == "/v1/messages" or path.startswith("/v1/messages/"):
        return True
    return (path == "/v1/models" or path.startswith("/v1/models/")) and any(
        key.lower() == b"anthropic-version" for key, _ in scope.get("headers") or [])


def to_api_error(exc: Exception) -> APIError:
    """The APIError for an exception raised while serving a request."""
    if isinstance(exc, APIError):
        return exc
    if isinstance(exc, InvalidParameter):
        return APIError(400, str(exc), param=exc.param)
    if isinstance(exc, GeneratesNoText):
        return APIError(400, str(exc), param="model")
    if isinstance(exc, PromptTooLong):
        return APIError(400, str(exc), param="messages", code="context_length_exceeded")
    if isinstance(exc, (PresetError, InvalidName)):
        return APIError(400, str(exc), param="preset")
    if isinstance(exc, QueueFull):
        return APIError(503, str(exc), type="server_overloaded", code="queue_full",
                        headers={"x-should-retry": "false"})
    if isinstance(exc, NoModelLoaded):
        return APIError(503, str(exc), type="service_unavailable", code="no_model_loaded")
    if isinstance(exc, ValueError):
        return APIError(400, str(exc))
    log.exception("unexpected error while serving a request")
    return APIError(500, f"internal server error: {type(exc).__name__}", type="server_error")


_JSON_NAMES = {"list": "an array", "str": "a string", "int": "a number", "float": "a number", "bool": "true or false",
               "NoneType": "null", "bytes": "a body that is not JSON"}

TYPE_TAGS = {"str", "int", "float", "bool", "list", "dict", "none", "is-instance", "literal", "union"}


def _is_tag(part: int | str) -> bool:
    """Whether a part of a pydantic error location names a union branch ("str", "list[ContentPart]")."""
    return isinstance(part, str) and (part.split("[", 1)[0].lower() in TYPE_TAGS or "[" in part)


def _param(loc: Sequence[int | str]) -> str | None:
    """The field path of a pydantic error location, without 'body' and without union branch tags ("stop.str",
    "messages.0.content.list[ContentPart].1": the branch's tag left out, what is inside it kept)."""
    parts = []
    for p in loc:
        if p != "body" and not _is_tag(p):
            parts.append(str(p))
    return ".".join(parts) or None


def _wrong_branch(error: Any, errors: list) -> bool:
    """Whether ``error`` only says a value is not of one union branch's type, while another error says what is
    wrong inside the branch it is of (a check of ours, not one more type mismatch)."""
    loc = tuple(error.get("loc", ()))
    if not (loc and str(error.get("type", "")).endswith("_type") and _is_tag(loc[-1])):
        return False
    return any(_inside(e, loc) for e in errors)


def _inside(error: Any, branch: tuple) -> bool:
    """Whether ``error`` is a check of ours (a validator's message) on the field of the union branch ``branch``."""
    return tuple(error.get("loc", ()))[:len(branch) - 1] == branch[:-1] and (
        error.get("type") == "value_error" or "param" in (error.get("ctx") or {}))


def validation_error(exc: RequestValidationError) -> APIError:
    """Pydantic's first complaint, as a 400 that names the field (of a union's branches, the one the value has the
    type of: a list of content parts that holds a bad part is told about that part, not that it is no string)."""
    errors = list(exc.errors())
    first = errors[0] if errors else {}
    if _wrong_branch(first, errors):
        first = next(e for e in errors if _inside(e, tuple(first["loc"])))
    loc = tuple(first.get("loc", ()))
    param = first.get("ctx", {}).get("param") or _param(loc)
    message = first.get("msg", "invalid request")
    kind = first.get("type")
    if kind == "json_invalid":
        return APIError(400, f"the request body is not valid JSON: {first.get('ctx', {}).get('error', message)}")
    if kind == "missing" and param is None:
        return APIError(400, "the request body is missing; send a JSON object")
    if param is None and kind in ("model_type", "model_attributes_type", "dict_type"):
        given = type(first.get("input")).__name__
        return APIError(400, f"the request body must be a JSON object (sent as Content-Type: application/json), "
                             f"got {_JSON_NAMES.get(given, given)}")
    if kind == "missing":
        return APIError(400, f"'{param}' is required", param=param)
    if kind == "value_error":
        message = message.removeprefix("Value error, ")
    return APIError(400, f"{param}: {message}" if param else message, param=param)


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def _api_error(request: Request, exc: APIError) -> JSONResponse:
        return exc.response(speaks_anthropic(request.scope))

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        return validation_error(exc).response(speaks_anthropic(request.scope))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        return APIError(exc.status_code, str(exc.detail), type=kind).response(speaks_anthropic(request.scope))

    # Only the exception types we map: a handler for plain Exception would run in Starlette's outermost
    # middleware, which re-raises after answering (a logged traceback and a dropped keep-alive connection).
    for kind in (ValueError, EngineError):
        @app.exception_handler(kind)
        async def _mapped(request: Request, exc: Exception) -> JSONResponse:
            return to_api_error(exc).response(speaks_anthropic(request.scope))
