"""GET /v1/models and /v1/models/{id} in Anthropic's shape, for a request that carries ``anthropic-version`` (as
Anthropic's clients always send): the same models as the OpenAI list (webui/api/routes.py), each as
``{"type": "model", "id", "display_name", "created_at", "lifecycle"}``, newest first as that list orders them, in
pages (``limit``, ``after_id``, ``before_id``; ``lifecycle`` filters: every model here is "active")."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webui.api.errors import APIError

UNKNOWN_RELEASE = "1970-01-01T00:00:00Z"  # Anthropic's "epoch value if the release date is unknown"
MAX_LIMIT = 1000
LIFECYCLES = ("active", "deprecated", "retired")


def anthropic_model(entry: dict[str, Any]) -> dict[str, Any]:
    """One model of the OpenAI list as Anthropic's ModelInfo."""
    loaded = "not loaded" not in entry.get("owned_by", "")
    return {"type": "model", "id": entry["id"], "display_name": entry["id"] + ("" if loaded else " (not loaded)"),
            "created_at": UNKNOWN_RELEASE, "lifecycle": "active"}


def anthropic_page(entries: list[dict[str, Any]], query: Mapping[str, str], lifecycles: list[str]) -> dict[str, Any]:
    """A page of the models in Anthropic's list shape, by its query: ``limit`` (1 to 1000, default 20), and
    ``after_id`` / ``before_id``: the models after (before) the one named; a 400 naming the field for a value it
    cannot take."""
    limit = page_limit(query.get("limit"))
    unknown = [value for value in lifecycles if value not in LIFECYCLES]
    if unknown:
        raise APIError(400, f"lifecycle: each must be one of {', '.join(LIFECYCLES)}, got {unknown[0]!r}",
                       param="lifecycle")
    models = [anthropic_model(entry) for entry in entries] if not lifecycles or "active" in lifecycles else []
    ids = [m["id"] for m in models]
    after, before = query.get("after_id"), query.get("before_id")
    start, end = 0, len(models)
    if after is not None:
        start = _position(ids, after, "after_id") + 1
    if before is not None:
        end = _position(ids, before, "before_id")
    if before is not None and after is None:
        page = models[max(start, end - limit):end]  # the `limit` models right before before_id
        more = end - limit > start
    else:
        page = models[start:min(end, start + limit)]
        more = start + limit < end
    return {"data": page, "has_more": more, "first_id": page[0]["id"] if page else None,
            "last_id": page[-1]["id"] if page else None}


def page_limit(given: str | None) -> int:
    """A list's ``limit`` query (Anthropic's: 1 to 1000, default 20), or a 400 naming it."""
    if given is None:
        return 20
    if not given.isdigit() or not 1 <= int(given) <= MAX_LIMIT:
        raise APIError(400, f"limit must be a whole number from 1 to {MAX_LIMIT}, got {given!r}", param="limit")
    return int(given)


def _position(ids: list[str], given: str, field: str) -> int:
    if given not in ids:
        raise APIError(400, f"{field}: no model '{given}' is listed here, so there is no page {field[:-3]} it; "
                            f"send the id of a listed model (first_id or last_id of a page)", param=field)
    return ids.index(given)
