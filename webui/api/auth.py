"""API keys for every route but /health, and the admin key for the management endpoints.

A key comes as ``Authorization: Bearer KEY`` (OpenAI's clients) or as ``x-api-key: KEY`` (Anthropic's), on any
route; when both headers come, the bearer one is the key.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass

from fastapi import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from webui.api.errors import APIError
from webui.engine.types import BACKGROUND, INTERACTIVE


@dataclass(frozen=True)
class InProcessCaller:
    """A request this server sends its own API app in process (a batch's row, webui/api/batch_jobs.py): it is
    ``client``'s (the label of the key that made the batch) and runs at ``priority``. Only ``in_process`` puts one
    in a request's ASGI scope, which nothing a remote client sends can write: no HTTP request can claim a key's
    label or a priority with it."""

    client: str
    priority: int = BACKGROUND


def in_process(app: ASGIApp, caller: InProcessCaller) -> ASGIApp:
    """``app`` as ``caller`` calls it (give it to httpx.ASGITransport)."""

    async def call(scope: Scope, receive: Receive, send: Send) -> None:
        scope["state"] = {**scope.get("state", {}), "caller": caller}
        await app(scope, receive, send)

    return call


def _caller(request: Request) -> InProcessCaller | None:
    caller = getattr(request.state, "caller", None)
    return caller if isinstance(caller, InProcessCaller) else None


def request_priority(request: Request) -> int:
    """The engine priority of a request's generations: BACKGROUND for a batch's rows, INTERACTIVE for the rest."""
    caller = _caller(request)
    return INTERACTIVE if caller is None else caller.priority


def _given_key(request: Request) -> str:
    """The key a request sends: its bearer token, else its x-api-key header."""
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and given.strip():
        return given.strip()
    given = request.headers.get("x-api-key", "").strip()
    if given:
        return given
    raise APIError(401, "missing API key: send the header 'Authorization: Bearer <key>' (or 'x-api-key: <key>', as "
                        "Anthropic's clients do)", code="invalid_api_key")


def _which(given: str, keys: tuple[str, ...]) -> int | None:
    """The position of ``given`` among ``keys`` (compared in constant time with each), or None."""
    found = None
    for i, key in enumerate(keys):
        if hmac.compare_digest(given.encode(), key.encode()):
            found = i
    return found


def require_key(request: Request) -> None:
    """Key auth when API or admin keys are set; keys are compared in constant time and never logged.

    Sets ``request.state.client``, the label that names the key in kept requests ("key 2", "admin 1"; "" on a
    server without keys), never the key itself; a request sent in process (``in_process``) is its caller's."""
    caller = _caller(request)
    if caller is not None:  # sent in process, as the key that made the batch (checked when it was made)
        request.state.client = caller.client
        return
    config = request.app.state.serving.config
    keys = config.api_keys + config.admin_keys
    request.state.client = ""
    if not keys:
        return
    given = _given_key(request)
    at = _which(given, keys)
    if at is None:
        raise APIError(401, "incorrect API key", code="invalid_api_key")
    request.state.client = f"key {at + 1}" if at < len(config.api_keys) else f"admin {at - len(config.api_keys) + 1}"


def _matches(given: str, keys: tuple[str, ...]) -> bool:
    return _which(given, keys) is not None


def sees_every_client(request: Request) -> bool:
    """An admin key (or a server without keys) sees every client's kept requests; an API key its own."""
    return not request.state.client or request.state.client.startswith("admin ")


def visible_client(request: Request) -> str | None:
    """Whose stored objects (completions, files, batches) a request sees: its key's label, or None for every
    client's (an admin key, a server without keys)."""
    return None if sees_every_client(request) else request.state.client


def require_admin(request: Request) -> None:
    """The management endpoints: an admin key when one is set; refused when only API keys are set; open when the
    server has no key at all (it then listens on 127.0.0.1 only)."""
    config = request.app.state.serving.config
    if not config.admin_keys:
        if config.api_keys:
            raise APIError(403, "the management endpoints are off: this server has API keys but no admin key; "
                                "start it with --admin-key to manage models over the API", type="permission_error",
                           code="admin_key_required")
        return
    given = _given_key(request)
    if _matches(given, config.admin_keys):
        return
    if _matches(given, config.api_keys):
        raise APIError(403, "this API key cannot manage models or adapters; send an admin key (--admin-key)",
                       type="permission_error", code="admin_key_required")
    raise APIError(401, "incorrect API key", code="invalid_api_key")
