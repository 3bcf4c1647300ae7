"""Hostile request bodies against the real API server (#43): nested 20,000 deep, strings of 10 MB in every text
field, lone surrogates in every text field, NaN and infinite numbers in every numeric field, bodies that are not
UTF-8, cut short, empty, or not an object, and wrong types; on /v1/chat/completions, /v1/completions and
/v1/embeddings. Each gets a whole answer (read off a raw socket: status line, headers, every byte its Content-Length
declares) with a 4xx and OpenAI's error body, or a whole 200 where the body is fine; the server logs no traceback
and goes on serving. With --capture-requests the hostile requests are kept (as JSON or as their text) and the store
reads back. A kept request whose body is hostile replays to a clear error (tests/api/test_bad_requests.py has the
ordinary client mistakes)."""

from __future__ import annotations

import json
import socket
import sqlite3
from dataclasses import dataclass
from typing import Any, Callable

import httpx
import pytest

from tests.api.conftest import API_KEY, APIServer, start_api
from webui.api.body import MAX_DEPTH, BodyError, parse_json
from webui.api.protocol import NUMBER_FIELDS
from webui.controllers.errors import UserError
from webui.controllers.requests import RequestsController
from webui.store.requests import CapturedRequest

SURFACE = "API bodies"
pytestmark = pytest.mark.real_model

CHAT, COMP, EMB = "/v1/chat/completions", "/v1/completions", "/v1/embeddings"
HI = [{"role": "user", "content": "Hi"}]
BASES: dict[str, Callable[..., dict]] = {
    CHAT: lambda **f: {"messages": HI, "max_tokens": 1, **f},
    COMP: lambda **f: {"prompt": "Hi", "max_tokens": 1, **f},
    EMB: lambda **f: {"input": "Hi", **f},
}
SLOT = "@@hostile@@"  # where a raw JSON text goes into a body
DEEP = 20_000
BIG = 10 * 2**20  # characters of a huge string
TOOL = {"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object"}}}
SCHEMA = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object", "description": "d"}}}
ANY_4XX = tuple(range(400, 500))


def base(path: str, **fields: Any) -> dict:
    """A fresh well-formed body of ``path`` (a deep copy: the slot is put into it)."""
    return json.loads(json.dumps(BASES[path](**fields)))


@dataclass
class Hostile:
    path: str
    body: bytes
    status: tuple[int, ...] = (400,)  # the statuses taken as right
    param: Any = ...  # ...: not checked
    content_type: str | None = "application/json"
    declared: int | None = None  # a Content-Length other than the body's
    half_close: bool = False  # shut the socket's sending side after the body


def with_raw(path: str, slot_at: Callable[[dict], None], raw: bytes, **kw: Any) -> Hostile:
    """A well-formed body of ``path`` with ``raw`` (any JSON text) where ``slot_at`` put the slot."""
    body = base(path)
    slot_at(body)
    text = json.dumps(body).encode()
    assert text.count(f'"{SLOT}"'.encode()) == 1, text
    return Hostile(path, text.replace(f'"{SLOT}"'.encode(), raw), **kw)


def setter(*keys: Any) -> Callable[[dict], None]:
    """Puts the slot at body[k1][k2]...[kn] (the containers on the way are the body's own)."""
    def put(body: dict) -> None:
        target: Any = body
        for key in keys[:-1]:
            target = target[key]
        target[keys[-1]] = SLOT
    return put


def nested(kind: str, depth: int) -> bytes:
    return b'{"a": ' * depth + b"1" + b"}" * depth if kind == "objects" else b"[" * depth + b"]" * depth


# Text fields: (path, extra fields that make a body with the field, where the slot goes in it)
def text_fields() -> list[tuple[str, str, dict, tuple]]:
    chat: list[tuple[str, dict, tuple]] = [
        ("model", {}, ("model",)),
        ("messages.0.content", {}, ("messages", 0, "content")),
        ("messages.0.content.0.text", {"messages": [{"role": "user", "content": [{"type": "text", "text": "x"}]}]},
         ("messages", 0, "content", 0, "text")),
        ("messages.0.name", {"messages": [{"role": "user", "content": "Hi", "name": "n"}]}, ("messages", 0, "name")),
        ("messages.0.role", {"messages": [{"role": "user", "content": "Hi"}]}, ("messages", 0, "role")),
        ("messages.1.tool_call_id", {"messages": [*HI, {"role": "tool", "content": "1", "tool_call_id": "c"}]},
         ("messages", 1, "tool_call_id")),
        ("stop", {"stop": "s"}, ("stop",)),
        ("stop.1", {"stop": ["s", "t"]}, ("stop", 1)),
        ("user", {"user": "u"}, ("user",)),
        ("preset", {"preset": "p"}, ("preset",)),
        ("tools.0.function.name", {"tools": [json.loads(json.dumps(TOOL))]}, ("tools", 0, "function", "name")),
        ("tools.0.function.description", {"tools": [json.loads(json.dumps(TOOL))]},
         ("tools", 0, "function", "description")),
        ("tool_choice", {"tools": [TOOL], "tool_choice": "auto"}, ("tool_choice",)),
        ("response_format.json_schema.schema.description", {"response_format": json.loads(json.dumps(SCHEMA))},
         ("response_format", "json_schema", "schema", "description")),
        ("response_format.type", {"response_format": {"type": "text"}}, ("response_format", "type")),
        ("logit_bias key", {}, ()),  # (its own case below: the slot is a key)
        ("guided_regex", {"guided_regex": "a"}, ("guided_regex",)),
        ("guided_choice.0", {"guided_choice": ["a"]}, ("guided_choice", 0)),
        ("guided_grammar", {"guided_grammar": "g"}, ("guided_grammar",)),
        ("guided_json", {"guided_json": "j"}, ("guided_json",)),
        ("structured_outputs.regex", {"structured_outputs": {"regex": "a"}}, ("structured_outputs", "regex")),
        ("negative_prompt", {"negative_prompt": "n"}, ("negative_prompt",)),
        ("chat_template", {"chat_template": "t"}, ("chat_template",)),
        ("dry_sequence_breakers", {"dry_sequence_breakers": "d"}, ("dry_sequence_breakers",)),
        ("sampler_priority", {"sampler_priority": "s"}, ("sampler_priority",)),
        ("custom_token_bans", {"custom_token_bans": "c"}, ("custom_token_bans",)),
        ("metadata.k", {"metadata": {"k": "v"}}, ("metadata", "k")),
        ("mode", {"mode": "m"}, ("mode",)),
        ("character", {"character": "c"}, ("character",)),
        ("user_name", {"user_name": "u"}, ("user_name",)),
        ("user_bio", {"user_bio": "u"}, ("user_bio",)),
        ("user_name-in-chat-mode", {"mode": "chat", "user_name": "u"}, ("user_name",)),  # (a stop string: "\nu:")
        ("instruction_template", {"instruction_template": "i"}, ("instruction_template",)),
        ("chat_template_str", {"chat_template_str": "c"}, ("chat_template_str",)),
        ("chat_instruct_command", {"chat_instruct_command": "c"}, ("chat_instruct_command",)),
        ("loras.0.0", {"loras": [["a", 1.0]]}, ("loras", 0, 0)),
    ]
    comp = [("prompt", {}, ("prompt",)), ("prompt.1", {"prompt": ["Hi", "x"]}, ("prompt", 1)),
            ("suffix", {"suffix": "s"}, ("suffix",)), ("stop", {"stop": "s"}, ("stop",)),
            ("model", {}, ("model",)), ("user", {"user": "u"}, ("user",))]
    emb = [("input", {}, ("input",)), ("input.1", {"input": ["Hi", "x"]}, ("input", 1)),
           ("model", {}, ("model",)), ("user", {"user": "u"}, ("user",))]
    return [(CHAT, *f) for f in chat] + [(COMP, *f) for f in comp] + [(EMB, *f) for f in emb]


def text_case(path: str, name: str, extra: dict, where: tuple, raw: bytes, **kw: Any) -> Hostile:
    if name == "logit_bias key":
        return Hostile(path, json.dumps(base(path)).encode()[:-1] + b', "logit_bias": {' + raw + b": 1}}", **kw)
    body = {**base(path), **json.loads(json.dumps(extra))}
    setter(*where)(body)
    text = json.dumps(body).encode()
    return Hostile(path, text.replace(f'"{SLOT}"'.encode(), raw), **kw)


def cases_nested() -> list:
    out = []
    for path in (CHAT, COMP, EMB):
        for kind in ("objects", "arrays"):
            out.append(pytest.param(Hostile(path, nested(kind, DEEP), param=None), id=f"{path}-root-{kind}-{DEEP}"))
    fields: list[tuple[str, str, Callable[[dict], None]]] = [
        (CHAT, "messages.0.content", setter("messages", 0, "content")),
        (CHAT, "response_format.json_schema.schema", lambda b: b.update(response_format={
            "type": "json_schema", "json_schema": {"name": "x", "schema": SLOT}})),
        (CHAT, "tools.0.function.parameters", lambda b: b.update(tools=[{"type": "function", "function": {
            "name": "f", "parameters": SLOT}}])),
        (CHAT, "metadata", lambda b: b.update(metadata=SLOT)),
        (CHAT, "logit_bias", lambda b: b.update(logit_bias=SLOT)),
        (COMP, "prompt", setter("prompt")),
        (EMB, "input", setter("input")),
    ]
    for path, name, at in fields:
        for kind in ("objects", "arrays"):
            out.append(pytest.param(with_raw(path, at, nested(kind, DEEP), param=None),
                                    id=f"{path}-{name}-{kind}-{DEEP}"))
        # past the limit but short of Python's recursion limit: refused by the check, naming the top field
        top = name.split(".")[0]
        out.append(pytest.param(with_raw(path, at, nested("arrays", MAX_DEPTH + 50), param=top),
                                id=f"{path}-{name}-arrays-{MAX_DEPTH + 50}"))
    out.append(pytest.param(Hostile(CHAT, b'{"store": true, "messages": ' + nested("arrays", DEEP) + b"}", param=None),
                            id="chat-store-true-nested-20000"))  # (capture off reads a body that can say store)
    out.append(pytest.param(Hostile("/tokenize", nested("objects", DEEP), param=None), id="tokenize-root-objects"))
    # deep but within the limit: a JSON schema nested 45 objects deep is taken, or refused with a 4xx
    schema: dict = {"type": "string"}
    for _ in range(45):
        schema = {"type": "object", "properties": {"a": schema}, "required": ["a"]}
    out.append(pytest.param(Hostile(CHAT, json.dumps(base(CHAT, response_format={
        "type": "json_schema", "json_schema": {"name": "x", "schema": schema}})).encode(), status=(200, 400)),
        id="chat-schema-45-objects-deep"))
    return out


def cases_raw() -> list:
    out = []
    for path in (CHAT, COMP, EMB):
        good = json.dumps(base(path)).encode()
        raw: list[tuple[str, Hostile]] = [
            ("not-utf8", Hostile(path, good[:-1] + b', "user": "\xff\xfe\xfd"}', param=None)),
            ("latin-1", Hostile(path, good[:-1] + ', "user": "café"}'.encode("latin-1"), param=None)),
            ("utf-16", Hostile(path, good.decode().encode("utf-16"), param=None)),
            ("truncated-json", Hostile(path, good[:len(good) // 2], param=None)),
            # uvicorn closes a connection whose client half-closes it, so no answer can go: none, or a whole 400
            ("cut-short-half-closed", Hostile(path, good[:len(good) // 2], declared=len(good), half_close=True,
                                              status=(400, 0), param=None)),
            ("empty", Hostile(path, b"", param=None)),
            ("array", Hostile(path, b"[1, 2]", param=None)),
            ("string", Hostile(path, b'"hello"', param=None)),
            ("number", Hostile(path, b"5", param=None)),
            ("null", Hostile(path, b"null", param=None)),
            ("nan", Hostile(path, b"NaN", param=None)),
            ("huge-integer", Hostile(path, good[:-1] + b', "user": ' + b"9" * 5000 + b"}", param=None)),
            ("text-plain", Hostile(path, good, content_type="text/plain", param=None)),
            ("no-content-type", Hostile(path, good, content_type=None, param=None)),
            ("nul-bytes", Hostile(path, good + b"\x00" * 100, param=None)),
            ("two-values", Hostile(path, good + good, param=None)),
        ]
        out += [pytest.param(case, id=f"{path}-{name}") for name, case in raw]
    return out


def cases_types() -> list:
    wrong: list[tuple[str, dict, Any]] = [
        (CHAT, {"messages": {"role": "user", "content": "Hi"}}, "messages"),
        (CHAT, {"messages": [{"role": "user", "content": {"text": "Hi"}}]}, "messages.0.content"),
        (CHAT, {"messages": [[]]}, "messages.0"),
        (CHAT, {"tools": "f"}, "tools"),
        (CHAT, {"tools": [5]}, "tools.0"),
        (CHAT, {"response_format": "json"}, "response_format"),
        (CHAT, {"response_format": {"type": "json_schema", "json_schema": []}}, "response_format"),
        (CHAT, {"logit_bias": [1, 2]}, "logit_bias"),
        (CHAT, {"stop": {"a": 1}}, "stop"),
        (CHAT, {"metadata": ["a"]}, "metadata"),
        (CHAT, {"metadata": {"k": 5}}, ...),
        (CHAT, {"stream": "maybe"}, "stream"),
        (CHAT, {"n": [1]}, "n"),
        (CHAT, {"model": ["m"]}, "model"),
        (CHAT, {"user": 5}, "user"),
        (CHAT, {"tool_choice": 5}, "tool_choice"),
        (CHAT, {"loras": "a"}, "loras"),
        (CHAT, {"loras": [["a", "heavy"]]}, ...),
        (CHAT, {"logprobs": [True]}, "logprobs"),
        (CHAT, {"seed": 1.5}, "seed"),
        (CHAT, {"store": [True]}, "store"),
        (CHAT, {"character": 5}, "character"),
        (COMP, {"prompt": {"text": "Hi"}}, "prompt"),
        (COMP, {"prompt": [{"text": "Hi"}]}, "prompt"),
        (COMP, {"prompt": [[1, "a"]]}, "prompt"),
        (COMP, {"prompt": [1.5]}, "prompt"),
        (COMP, {"logprobs": "x"}, "logprobs"),
        (COMP, {"echo": [1]}, "echo"),
        (EMB, {"input": {"text": "Hi"}}, "input"),
        (EMB, {"input": 5}, "input"),
        (EMB, {"input": [[1.5]]}, "input"),
        (EMB, {"encoding_format": "hex"}, "encoding_format"),
        (EMB, {"dimensions": "ten"}, "dimensions"),
    ]
    return [pytest.param(Hostile(path, json.dumps(base(path, **f)).encode(), param=param),
                         id=f"{path}-{'-'.join(f)}-{type(next(iter(f.values()))).__name__}")
            for path, f, param in wrong]


NUMBERS = {"1e999": b"1e999", "-1e999": b"-1e999", "NaN": b"NaN"}


def cases_numbers() -> list:
    chat_fields: list[tuple[str, Callable[[dict], None]]] = [
        (name, setter(name)) for name in [*NUMBER_FIELDS, "max_completion_tokens", "top_logprobs",
                                          "truncate_prompt_tokens"]]
    chat_fields += [("logit_bias.5", lambda b: b.update(logit_bias={"5": SLOT})),
                    ("loras.0.1", lambda b: b.update(loras=[["a", SLOT]])),
                    ("messages.0.content", setter("messages", 0, "content"))]
    fields = [(CHAT, name, at) for name, at in chat_fields]
    fields += [(COMP, name, setter(name)) for name in ("temperature", "max_tokens", "logprobs", "n")]
    fields += [(COMP, "prompt.0", lambda b: b.update(prompt=[SLOT]))]
    fields += [(EMB, "dimensions", setter("dimensions")), (EMB, "input.0", lambda b: b.update(input=[SLOT]))]
    return [pytest.param(with_raw(path, at, raw, param=name), id=f"{path}-{name}-{label}")
            for path, name, at in fields for label, raw in NUMBERS.items()]


def cases_surrogates() -> list:
    return [pytest.param(text_case(path, name, extra, where, b'"a\\ud800b"',
                                   param="logit_bias" if name == "logit_bias key" else ".".join(map(str, where))),
                         id=f"{path}-{name}-lone-surrogate") for path, name, extra, where in text_fields()]


def cases_big() -> list:
    """10 MB in each text field: on a server whose body limit (16 MB) lets it through to the route."""
    big = json.dumps("x" * BIG).encode()
    return [pytest.param(text_case(path, name, extra, where, big, status=(200, *ANY_4XX)),
                         id=f"{path}-{name}-10MB") for path, name, extra, where in text_fields()]


# -- the exchange, on a raw socket ------------------------------------------------------------------------------------

@dataclass
class Answer:
    status: int  # 0: no answer at all (the connection closed)
    headers: dict[str, str]
    body: bytes


def exchange(server: APIServer, case: Hostile, timeout: float = 300) -> Answer:
    """Send ``case`` on a fresh connection (Connection: close) and read everything until the server closes it."""
    host, port = server.root.removeprefix("http://").split(":")
    length = len(case.body) if case.declared is None else case.declared
    head = (f"POST {case.path} HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {API_KEY}\r\n"
            + (f"Content-Type: {case.content_type}\r\n" if case.content_type else "")
            + f"Content-Length: {length}\r\nConnection: close\r\n\r\n").encode()
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        try:
            s.sendall(head + case.body)
            if case.half_close:
                s.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            pass  # answered (and closed) before the whole body went: what came back is read below
        data = bytearray()
        try:
            while chunk := s.recv(1 << 20):
                data += chunk
        except ConnectionResetError:
            pass
    if not data:
        return Answer(0, {}, b"")
    head_bytes, sep, body = bytes(data).partition(b"\r\n\r\n")
    assert sep, f"no end of headers in {bytes(data[:300])!r}"
    lines = head_bytes.decode("latin-1").split("\r\n")
    version, status, _ = lines[0].split(" ", 2)
    assert version == "HTTP/1.1", lines[0]
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    return Answer(int(status), headers, body)


def check_whole(answer: Answer, case: Hostile) -> Any:
    """The answer is whole (every byte of its Content-Length, valid JSON) with a status the case takes; its JSON."""
    assert answer.status in case.status, (answer.status, answer.body[:500])
    if answer.status == 0:
        return None
    assert "content-length" in answer.headers, answer.headers  # (never chunked: a JSON body of known length)
    assert len(answer.body) == int(answer.headers["content-length"]), (len(answer.body), answer.headers)
    assert answer.headers.get("content-type", "").startswith("application/json"), answer.headers
    out = json.loads(answer.body)
    if answer.status == 200:
        assert out.get("choices") or out.get("data"), out
        return out
    assert 400 <= answer.status < 500 and set(out) == {"error"}, (answer.status, out)
    error = out["error"]
    assert set(error) == {"message", "type", "param", "code"}, error
    assert isinstance(error["message"], str) and error["message"].strip() and error["type"] != "server_error", error
    assert len(answer.body) < 16_000, "an error echoes a huge value"
    if case.param is not ...:
        assert error["param"] == case.param, error
    return out


def still_serving(server: APIServer, log_from: int, generate: bool = False) -> None:
    """The server answers (``generate``: a one-token completion, for a body that reached the engine; else the
    model list, as a refused body never does), and nothing since ``log_from`` in its log is a traceback or a cut
    answer."""
    with httpx.Client(base_url=server.root, timeout=60, headers={"Authorization": f"Bearer {server.key}"}) as client:
        if generate:
            r = client.post(COMP, json={"prompt": "Hi", "max_tokens": 1})
            assert r.status_code == 200 and r.json()["choices"], r.text
        else:
            r = client.get("/v1/models")
            assert r.status_code == 200 and r.json()["data"], r.text
    with open(server.server.log, "rb") as log:
        log.seek(log_from)
        tail = log.read().decode("utf-8", "replace")
    for bad in ("Traceback", "without completing response", "unexpected error", "Exception in ASGI application"):
        assert bad not in tail, tail[-3000:]


def log_size(server: APIServer) -> int:
    return server.server.log.stat().st_size


@pytest.fixture(scope="module")
def plain(api):
    """The API tests' shared server (tests/api/conftest.py): capture off, the default 8 MB body limit."""
    return api


ALL = cases_nested() + cases_raw() + cases_types() + cases_numbers() + cases_surrogates()


@pytest.mark.parametrize("case", ALL)
def test_a_hostile_body_gets_a_whole_answer(plain, case):
    start = log_size(plain)
    check_whole(exchange(plain, case), case)
    still_serving(plain, start)


def test_the_engine_still_generates_after_every_hostile_body(plain):
    still_serving(plain, log_size(plain), generate=True)


# -- with --capture-requests: kept as JSON or as text, nothing half-written ------------------------------------------

@pytest.fixture(scope="module")
def captured(tmp_path_factory, default_model_dir):
    """A server that keeps every request, with a body limit (16 MB) that lets 10 MB strings through to the routes."""
    ctx, base_url, key = start_api(tmp_path_factory, default_model_dir, "--capture-requests", "--api-max-body-mb",
                                   "16")
    with ctx as server:
        yield APIServer(base_url, key, server)


def kept_rows(server: APIServer) -> list[sqlite3.Row]:
    with sqlite3.connect(server.server.log.parent / "workbench.sqlite3") as db:
        db.row_factory = sqlite3.Row
        return db.execute("SELECT * FROM api_requests ORDER BY seq").fetchall()


def _kept_too(case: Any) -> bool:
    """The cases sent again with capture on: chat and completions bodies (a field's lone surrogate or non-finite
    number is refused by the one parser before any route, whatever the field: a few fields stand for them all)."""
    hostile: Hostile = case.values[0]
    return hostile.path in (CHAT, COMP)


SOME_FIELDS = ("messages.0.content", "prompt", "temperature", "stop", "logit_bias")
CAPTURED = [p for p in cases_nested() + cases_raw() if _kept_too(p)] + [
    p for p in cases_surrogates() + cases_numbers() if _kept_too(p) and any(f"-{f}-" in str(p.id) for f in SOME_FIELDS)]


@pytest.mark.parametrize("case", CAPTURED + cases_big())
def test_a_hostile_body_is_kept_whole_with_capture_on(captured, case):
    before = {r["id"] for r in kept_rows(captured)}
    start = log_size(captured)
    answer = exchange(captured, case)
    out = check_whole(answer, case)
    new = [CapturedRequest.from_row(r) for r in kept_rows(captured) if r["id"] not in before]
    still_serving(captured, start, generate=answer.status == 200)
    if out is None:  # (no answer: the client left before its body was whole; what there was may be kept)
        return
    if case.path not in (CHAT, COMP):  # (only the generating endpoints are kept)
        assert new == []
        return
    assert len(new) == 1, new
    item = new[0]  # read back: the body as JSON, or as its text
    assert item.endpoint == case.path and item.status == answer.status and item.response == out
    try:  # kept as JSON when the routes' parser reads the body, else as its text
        assert item.request == parse_json(case.body)
    except BodyError:
        assert item.request == case.body.decode("utf-8", "replace")


def test_the_store_reads_back_after_the_hostile_requests(captured):
    """After every case above: the kept requests read back through the API's stored list and as rows."""
    with httpx.Client(base_url=captured.root, timeout=60, headers={"Authorization": f"Bearer {API_KEY}"}) as c:
        listed = c.get("/v1/chat/completions", params={"limit": 100})
        assert listed.status_code == 200 and listed.json()["object"] == "list", listed.text
        stored = c.post(CHAT, json=BASES[CHAT](store=True))
        assert stored.status_code == 200
        assert c.get(f"/v1/chat/completions/{stored.json()['id']}").status_code == 200
    rows = kept_rows(captured)
    assert len(rows) > 10
    for row in rows:
        item = CapturedRequest.from_row(row)
        assert item.status and item.response is not None, dict(row)


# -- replaying a kept request whose body is hostile -------------------------------------------------------------------

REPLAYS = {
    "nested-20000-kept-as-text": ("[" * DEEP + "]" * DEEP, "was not a JSON object as sent"),
    "an-array": ([1, 2], "was not a JSON object as sent"),
    "a-string": ("hello", "was not a JSON object as sent"),
    "nested-past-the-limit": ({"messages": json.loads(nested("arrays", MAX_DEPTH + 50))},
                              f"nests JSON deeper than {MAX_DEPTH} levels in 'messages'"),
    "nan-temperature": ({"messages": HI, "temperature": float("nan")}, "temperature: NaN is not a number"),
    "infinite-logit-bias": ({"messages": HI, "logit_bias": {"5": float("-inf")}}, "logit_bias.5: -Infinity"),
}


@pytest.mark.parametrize("name", REPLAYS)
def test_a_kept_hostile_body_replays_to_a_clear_error(services, name):
    sent, message = REPLAYS[name]
    services.requests.add(CapturedRequest("req-1", 1.0, CHAT, 400, "", sent, {"error": {"message": "x"}}))
    with pytest.raises(UserError) as refused:
        RequestsController(services).replay("req-1", "", None)
    assert "req-1" in str(refused.value) and message in str(refused.value), refused.value


def test_a_kept_body_over_the_limit_replays_to_a_clear_error(services):
    """Kept by a server with a higher --api-max-body-mb: the replay is refused (413) before it is kept, saying so."""
    sent = {"messages": [{"role": "user", "content": "x" * BIG}], "max_tokens": 1}
    services.requests.add(CapturedRequest("req-1", 1.0, CHAT, 400, "", sent, {"error": {"message": "x"}}))
    with pytest.raises(UserError, match=r"the replay of req-1 was answered 413: the request body is over the "
                                        r"server's limit of 8388608 bytes \(--api-max-body-mb\)"):
        RequestsController(services).replay("req-1", "", None)


@pytest.mark.parametrize("name,sent,status,param", [
    ("lone-surrogate", {"messages": [{"role": "user", "content": "a\ud800"}], "max_tokens": 1}, 400,
     "messages.0.content"),
    ("wrong-type", {"messages": "hi", "max_tokens": 1}, 400, "messages"),
])
def test_a_kept_hostile_body_replays_to_a_kept_refusal(services, name, sent, status, param):
    services.requests.add(CapturedRequest("req-1", 1.0, CHAT, status, "", sent, {"error": {"message": "x"}}))
    again = RequestsController(services).replay("req-1", "", None)
    assert again.status == status and again.details.get("replay_of") == "req-1", again
    assert again.response["error"]["param"] == param and again.response["error"]["message"], again.response


@pytest.mark.parametrize("changes,message", [
    ("[" * DEEP + "]" * DEEP, "nests JSON deeper than"),
    ('{"temperature": NaN}', "temperature: NaN"),
    ('{"temperature": 1e999}', "temperature: Infinity"),
    ('{"a": "\ud800"}', "not UTF-8"),
], ids=["nested-20000", "nan", "1e999", "raw-lone-surrogate"])
def test_hostile_replay_changes_are_refused_clearly(services, changes, message):
    services.requests.add(CapturedRequest("req-1", 1.0, CHAT, 200, "", {"messages": HI}, {"choices": []}))
    with pytest.raises(UserError, match=f"Changes must be a JSON object.*{message}"):
        RequestsController(services).replay("req-1", changes, None)
