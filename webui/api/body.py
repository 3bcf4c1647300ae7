"""Reading a request's JSON body (#43): one JSON value within the limits, or a 400 that says what is wrong.

Python's JSON parser recurses once per level, so a body of 20,000 nested arrays raises RecursionError, and code
that walks a parsed body (checks, templates, schema compilers, the store) recurses too. Every body a route takes
is read here: UTF-8 text, valid JSON, nested at most ``MAX_DEPTH`` levels, and no NaN or infinite numbers (JSON has
none; ``NaN`` literals and ``1e999`` are what Python's parser makes of bad input).

    value = parse_json(raw)       # BodyError (a ValueError) with a message for the client otherwise

Routes get it through ``JSONBodyRoute`` (each router's ``route_class``), which reads the body before FastAPI's own
parsing, whose errors say only "There was an error parsing the body".
"""

from __future__ import annotations

import json
import math
from email.message import Message
from typing import Any, Callable, Coroutine

from fastapi import Request, Response
from fastapi.routing import APIRoute
from starlette.requests import ClientDisconnect

from webui.api.errors import APIError
from webui.safeload import MAX_DEPTH  # one limit for every JSON a user sends



def _too_deep(what: str, field: str = "") -> str:
    return (f"{what} nests JSON deeper than {MAX_DEPTH} levels{f' in {field!r}' if field else ''} (objects and arrays "
            f"inside each other); send a flatter body")


class BodyError(ValueError):
    """A body that is not one JSON value within the limits; the message says what to send instead."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


def parse_json(raw: bytes, what: str = "the request body") -> Any:
    """The JSON value of ``raw`` (UTF-8, a byte order mark allowed), checked by ``check_value``; ``what`` names
    ``raw`` in the errors."""
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise BodyError(f"{what} is not UTF-8 text (byte {exc.start} is 0x{raw[exc.start]:02x}); send JSON encoded "
                        f"as UTF-8") from None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BodyError(f"{what} is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})") from None
    except RecursionError:
        raise BodyError(_too_deep(what)) from None
    except ValueError as exc:  # an integer of more digits than Python converts (sys.get_int_max_str_digits)
        raise BodyError(f"{what} holds a number this server cannot read ({str(exc).split(':')[0]}); send numbers "
                        f"within each field's range") from None
    check_value(value, what)
    return value


def check_value(value: Any, what: str = "the request body") -> None:
    """BodyError unless ``value`` nests at most ``MAX_DEPTH`` levels and holds only finite numbers (its ``param``
    names the field: ``temperature``, ``logit_bias.5``). Walked level by level, without recursion."""
    if isinstance(value, float) and not math.isfinite(value):
        raise BodyError(f"{what} is {_number(value)}, which is not a number JSON has; send a JSON object")
    level: list[tuple[tuple, Any]] = [((), value)] if isinstance(value, (dict, list)) else []
    depth = 0
    while level:
        depth += 1
        if depth > MAX_DEPTH:
            top = _path(level[0][0]).split(".")[0] if isinstance(value, dict) else ""
            raise BodyError(_too_deep(what, top), param=top or None)
        nested: list[tuple[tuple, Any]] = []
        for path, container in level:
            for key, item in container.items() if isinstance(container, dict) else enumerate(container):
                if isinstance(item, (dict, list)):
                    nested.append(((path, key), item))
                elif isinstance(item, float) and not math.isfinite(item):
                    field = _path((path, key))
                    raise BodyError(f"{field}: {_number(item)} is not a number JSON has (NaN, Infinity and numbers "
                                    f"as large as 1e999 are not taken); send a finite number", param=field)
        level = nested


def _number(value: float) -> str:
    return "NaN" if math.isnan(value) else "Infinity" if value > 0 else "-Infinity"


def _path(linked: tuple) -> str:
    """'messages.0.content' from the linked path ((((), 'messages'), 0), 'content')."""
    keys = []
    while linked:
        linked, key = linked
        keys.append(str(key))
    return ".".join(reversed(keys))


def _takes_json(request: Request) -> bool:
    """Whether FastAPI would read this body as JSON: no Content-Type, or application/json or .../...+json."""
    given = request.headers.get("content-type")
    if not given:
        return True
    message = Message()
    message["content-type"] = given
    subtype = message.get_content_subtype()
    return message.get_content_maintype() == "application" and (subtype == "json" or subtype.endswith("+json"))


class CheckedRequest(Request):
    """A request whose ``json()`` is ``parse_json`` of its body (kept, as Starlette keeps its own)."""

    async def json(self) -> Any:
        if not hasattr(self, "_checked_json"):
            self._checked_json = parse_json(await self.body())
        return self._checked_json


class JSONBodyRoute(APIRoute):
    """A route that reads its JSON body with ``parse_json`` first: a body too deep, not UTF-8, not JSON, with NaN,
    or cut short of its Content-Length is a 400 naming the problem (FastAPI then takes the value read here)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        reads_body = self.body_field is not None

        async def checked(request: Request) -> Response:
            request = CheckedRequest(request.scope, request.receive)
            if reads_body and _takes_json(request):
                try:
                    if await request.body():  # (an empty body is FastAPI's "missing")
                        await request.json()
                except BodyError as exc:
                    raise APIError(400, str(exc), param=exc.param) from None
                except ClientDisconnect:  # (cut short, or refused as too large: nobody reads this answer)
                    raise APIError(400, "the request body ended before the length it declared; send the whole "
                                        "body") from None
            return await handler(request)

        return checked
