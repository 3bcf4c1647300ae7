"""Reading a batch's requests: OpenAI's batch input file (#45), and the requests of an Anthropic Message Batch
(``message_requests``, below).

OpenAI's batch JSONL holds one request a line,

    {"custom_id": "request-1", "method": "POST", "url": "/v1/chat/completions", "body": {"model": ..., ...}}

checked whole before anything runs: each line one JSON object (read as the API reads a body: webui/api/body.py),
custom_id a unique string, method POST, url the batch's endpoint, body an object asking no stream. Each bad line
is an error naming it (``line``, 1-based) and the field (``param``), as OpenAI lists them in a failed batch's
``errors.data``. A body's own fields are checked when its row runs, by the endpoint itself.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from webui.api.body import BodyError, parse_json
from webui.api.errors import APIError
from webui.store.api_batches import RowInput

MAX_ROWS = 50_000  # OpenAI's limit on the requests of one batch
MAX_ERRORS = 100  # listed of a bad file; the last error says how many more lines are bad
MAX_CUSTOM_ID = 512
MAX_MESSAGE_REQUESTS = 100_000  # Anthropic's limit on the requests of one Message Batch
MESSAGES = "/v1/messages"
MESSAGE_CUSTOM_ID = re.compile(r"[a-zA-Z0-9_-]{1,64}")  # Anthropic's pattern for a request's custom_id


@dataclass
class BatchInput:
    rows: list[RowInput] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)
    model: str | None = None  # the first row's body's model


def batch_error(code: str, message: str, param: str | None = None, line: int | None = None) -> dict[str, Any]:
    """One entry of a failed batch's ``errors.data`` (OpenAI's BatchError)."""
    return {"code": code, "message": message, "param": param, "line": line}


def read_input(lines: Iterable[bytes], endpoint: str) -> BatchInput:
    """The rows of a batch input file (read line by line), or the errors that fail the batch."""
    out, seen, bad = BatchInput(), set[str](), 0
    for number, raw in enumerate(lines, 1):
        if not raw.strip():
            continue  # (blank lines, such as a last one, are skipped)
        if len(out.rows) >= MAX_ROWS:
            out.errors.append(batch_error("too_many_requests", f"the file holds more than {MAX_ROWS} requests, the "
                                          f"most a batch takes; split it into several batches", line=number))
            return out
        problem = _check_line(raw, number, endpoint, seen)
        if isinstance(problem, dict):
            bad += 1
            if len(out.errors) < MAX_ERRORS:
                out.errors.append(problem)
            continue
        out.rows.append(problem)
        seen.add(problem.custom_id)
        if out.model is None:
            model = json.loads(problem.body).get("model")
            out.model = model if isinstance(model, str) else None
    if bad > len(out.errors):
        out.errors.append(batch_error("too_many_errors", f"{bad - len(out.errors)} more lines have errors; fix the "
                                                         f"ones listed and try again"))
    if not out.rows and not out.errors:
        out.errors.append(batch_error("empty_file", "the input file holds no requests; write one JSON object a line"))
    return out


def _check_line(raw: bytes, number: int, endpoint: str, seen: set[str]) -> RowInput | dict[str, Any]:
    """The row of one line, or its error."""
    try:
        value = parse_json(raw, f"line {number}")
    except BodyError as exc:
        return batch_error("invalid_json_line", str(exc), exc.param, number)
    if not isinstance(value, dict):
        return batch_error("invalid_json_line", f"line {number} is not a JSON object; write one request a line: "
                                                f'{{"custom_id", "method", "url", "body"}}', line=number)
    for name in ("custom_id", "method", "url", "body"):
        if name not in value:
            return batch_error("missing_required_parameter", f"line {number} has no '{name}'", name, number)
    custom_id, method, url, body = value["custom_id"], value["method"], value["url"], value["body"]
    if not isinstance(custom_id, str) or not custom_id or len(custom_id) > MAX_CUSTOM_ID:
        return batch_error("invalid_custom_id", f"line {number}: custom_id must be a string of 1 to {MAX_CUSTOM_ID} "
                                                f"characters", "custom_id", number)
    if custom_id in seen:
        return batch_error("duplicate_custom_id", f"line {number}: the custom_id '{custom_id}' is used by an earlier "
                                                  f"line; each request needs its own", "custom_id", number)
    if method != "POST":
        return batch_error("invalid_method", f"line {number}: method must be 'POST', got {json.dumps(method)}",
                           "method", number)
    if url != endpoint:
        return batch_error("invalid_url", f"line {number}: url {json.dumps(url)} is not the batch's endpoint "
                                          f"'{endpoint}'; every request of a batch goes to its endpoint", "url", number)
    if not isinstance(body, dict):
        return batch_error("invalid_request", f"line {number}: body must be a JSON object (the request's body)",
                           "body", number)
    if body.get("stream") not in (None, False):
        return batch_error("invalid_request", f"line {number}: a batch's requests are answered whole; leave "
                                              f"body.stream out", "body.stream", number)
    if body.get("background") not in (None, False):
        return batch_error("invalid_request", f"line {number}: a batch's requests already run in the background; "
                                              f"leave body.background out", "body.background", number)
    return RowInput(number, custom_id, url, json.dumps(body))  # (ASCII: a lone surrogate sent stays an escape)


def message_requests(requests: list[Any]) -> BatchInput:
    """The rows of an Anthropic Message Batch's ``requests`` (``[{"custom_id", "params"}]``, each params a
    /v1/messages body), checked whole before anything runs; the first bad one is a 400 naming it
    (``requests.3.custom_id``). As with OpenAI's lines, a body's own fields are checked when its row runs, by
    /v1/messages itself (a bad one is that request's ``errored`` result)."""
    if not requests:
        raise APIError(400, "requests must hold at least one request", param="requests")
    if len(requests) > MAX_MESSAGE_REQUESTS:
        raise APIError(400, f"requests holds {len(requests)} requests; a batch takes at most {MAX_MESSAGE_REQUESTS}: "
                            f"split it into several batches", param="requests")
    out, seen = BatchInput(), dict[str, int]()
    for i, request in enumerate(requests):
        where = f"requests.{i}"
        if not isinstance(request, dict):
            raise APIError(400, f"{where} must be an object: {{\"custom_id\", \"params\"}}", param=where)
        for name in ("custom_id", "params"):
            if name not in request:
                raise APIError(400, f"{where}.{name} is required", param=f"{where}.{name}")
        custom_id, params = request["custom_id"], request["params"]
        if not isinstance(custom_id, str) or not MESSAGE_CUSTOM_ID.fullmatch(custom_id):
            raise APIError(400, f"{where}.custom_id must be 1 to 64 letters, digits, '_' or '-', got "
                                f"{json.dumps(custom_id)}", param=f"{where}.custom_id")
        if custom_id in seen:
            raise APIError(400, f"{where}.custom_id '{custom_id}' is also requests.{seen[custom_id]}'s; each request "
                                f"of a batch needs its own custom_id", param=f"{where}.custom_id")
        if not isinstance(params, dict):
            raise APIError(400, f"{where}.params must be an object (a /v1/messages request's body)",
                           param=f"{where}.params")
        if params.get("stream") not in (None, False):
            raise APIError(400, f"{where}.params.stream: a batch's requests are answered whole; leave stream out",
                           param=f"{where}.params.stream")
        seen[custom_id] = i
        out.rows.append(RowInput(i + 1, custom_id, MESSAGES, json.dumps(params)))
        if out.model is None and isinstance(params.get("model"), str):
            out.model = params["model"]
    return out
