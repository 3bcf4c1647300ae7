"""API keys for every route but /health, and the admin key for the management endpoints.

A key comes as ``Authorization: Bearer KEY`` (OpenAI's clients) or as ``x-api-key: KEY`` (Anthropic's), on any
route; when both headers come, the bearer one is the key.
"""

from __future__ import annotations

import hmac

from fastapi import Request

from webui.api.errors import APIError


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
    server without keys), never the key itself."""
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
