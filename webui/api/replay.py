"""Replaying a kept API request (#33): the same body (or with changes) sent again to this workbench's own API, in
process, so it runs through exactly the code the app's request ran through, on the same engine. A greedy or seeded
request gives the same tokens again. The replay is kept beside the original (``details.replay_of``), whether
capture is on or not.

    again = replay(services, requests.get(id))                          # as it was sent
    hotter = replay(services, requests.get(id), {"temperature": 0.9})   # with changes
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx

from webui.api.body import BodyError, check_value
from webui.api.capture import REPLAY_ID, REPLAY_OF
from webui.services import Services
from webui.store.requests import CapturedRequest


class ReplayError(ValueError):
    """A kept request that cannot be sent again (its body was not a JSON object, say)."""


def replay_body(item: CapturedRequest, changes: dict[str, Any] | None = None) -> dict[str, Any]:
    """The body to send again: the one sent, unstreamed (and not in the background), with ``changes`` over it (a
    change to None removes the field)."""
    if not isinstance(item.request, dict):
        raise ReplayError(f"request {item.id} was not a JSON object as sent, so it cannot be sent again")
    body = {**item.request, **(changes or {}), "stream": False}
    body.pop("stream_options", None)
    body.pop("background", None)  # a Responses API request: answered whole, as a replay reads it
    try:  # (a body the API would not read: NaN in it, or nested too deep; sending it could not even encode it)
        check_value(body, "its body with the changes" if changes else "its body")
    except BodyError as exc:
        raise ReplayError(f"request {item.id} cannot be sent again: {exc}") from None
    return {key: value for key, value in body.items() if value is not None}


def replay(services: Services, item: CapturedRequest, changes: dict[str, Any] | None = None) -> CapturedRequest:
    """Send ``item`` again (with ``changes``) and return the replay as kept in the store."""
    return asyncio.run(areplay(services, item, changes))


async def areplay(services: Services, item: CapturedRequest, changes: dict[str, Any] | None = None
                  ) -> CapturedRequest:
    from webui.api.app import create_api_app
    from webui.api.serving import APIConfig, new_id

    body = replay_body(item, changes)
    named = str(body.get("model", "")).partition(":")[0]
    if item.model and "model" not in (changes or {}) and named not in services.models.names():
        body["model"] = item.model  # an alias of the server it came to: the model that answered it
    limit = int(services.config.api_max_body_mb * 2**20) or None  # (the server's own: a body it took, it takes)
    app = create_api_app(services, APIConfig(timeout=None, max_body_bytes=limit))
    fallback_id = new_id("req")
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://replay",
                                 timeout=None) as client:
        # JSON in ASCII: a lone surrogate the app sent (refused again, with its reason) goes as the escape it came as
        answer = await client.post(item.endpoint, content=json.dumps(body), headers={
            "content-type": "application/json", REPLAY_OF: item.id, REPLAY_ID: fallback_id})
    given = answer.json().get("id") if answer.status_code == 200 else None
    kept = services.requests.get(given if isinstance(given, str) else fallback_id)
    if kept is None:  # refused before it reached the capture (a body over the limit, say): why, as answered
        error = answer.json().get("error") if answer.status_code != 200 else None
        said = f": {error.get('message')}" if isinstance(error, dict) else ""
        raise ReplayError(f"the replay of {item.id} was answered {answer.status_code}{said} (and not kept)")
    return kept
