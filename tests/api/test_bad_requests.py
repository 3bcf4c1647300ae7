"""Client mistakes against the real API server: each gets its own 4xx and an OpenAI error body naming the field.

Every case is sent on a fresh connection (see test_a_sampling_error_keeps_the_connection_and_its_log_line for why).
"""

from __future__ import annotations

import json
import re
import socket
import time

import httpx
import pytest

from tests.api.conftest import API_KEY

CHAT, COMP = "/v1/chat/completions", "/v1/completions"
HI = [{"role": "user", "content": "Hi"}]
LONG = " ".join(["word"] * 9000)  # about 9000 tokens: over SmolLM2's 8192-token context
ANY = object()  # this case does not check the field


def chat(**fields) -> dict:
    return {"messages": HI, "max_tokens": 1, **fields}


def comp(**fields) -> dict:
    return {"prompt": "Hi", "max_tokens": 1, **fields}


def case(name, body, status=400, param=ANY, *, path=CHAT, method="POST", raw: bytes | None = None,
         auth: str | None = f"Bearer {API_KEY}", code=ANY):
    return pytest.param(method, path, body, raw, auth, status, param, code, id=name)

CASES = [
    # the body itself
    case("malformed-json", None, raw=b'{"messages": [', param=None),
    case("empty-body", None, raw=b"", param=None),
    case("body-is-a-list", [1, 2], param=None),
    case("body-is-a-string", "hello", param=None),
    # wrong types
    case("temperature-string", chat(temperature="hot"), param="temperature"),
    case("temperature-bool", chat(temperature=True), param="temperature"),
    case("n-string", chat(n="x"), param="n"),
    case("messages-string", {"messages": "hi"}, param="messages"),
    case("stop-number", chat(stop=5), param="stop"),
    case("max_tokens-fraction", chat(max_tokens=1.5), param="max_tokens"),
    case("logit_bias-non-numeric", chat(logit_bias={"5": "x"}), param="logit_bias.5"),
    case("stream_options-string", chat(stream=True, stream_options="x"), param="stream_options"),
    case("ignore_eos-string", chat(ignore_eos="x"), param="ignore_eos"),
    case("model-number", chat(model=5), param="model"),
    case("echo-string", comp(echo="x"), param="echo", path=COMP),
    # out of range, one per sampling field
    case("temperature-9", chat(temperature=9), param="temperature"),
    case("temperature-nan", None, raw=b'{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1, '
                                      b'"temperature": NaN}', param="temperature"),
    case("top_p-0", chat(top_p=0), param="top_p"),
    case("top_p-1.5", chat(top_p=1.5), param="top_p"),
    case("top_k-minus-5", chat(top_k=-5), param="top_k"),
    case("min_p-2", chat(min_p=2), param="min_p"),
    case("typical_p-0", chat(typical_p=0), param="typical_p"),
    case("repetition_penalty-0", chat(repetition_penalty=0), param="repetition_penalty"),
    case("presence_penalty-3", chat(presence_penalty=3), param="presence_penalty"),
    case("frequency_penalty-minus-3", chat(frequency_penalty=-3), param="frequency_penalty"),
    case("no_repeat_ngram_size-21", chat(no_repeat_ngram_size=21), param="no_repeat_ngram_size"),
    case("sampler_priority-unknown", chat(sampler_priority=["top_k", "top_q"]), param="sampler_priority"),
    case("sampler_priority-number", chat(sampler_priority=5), param="sampler_priority"),
    case("mirostat_mode-1", chat(mirostat_mode=1), param="mirostat_mode"),
    case("dry_sequence_breakers-unquoted", chat(dry_sequence_breakers="a, b"), param="dry_sequence_breakers"),
    case("custom_token_bans-not-ids", chat(custom_token_bans="1, x"), param="custom_token_bans"),
    case("custom_token_bans-outside-vocab", chat(custom_token_bans=[10**7]), param="custom_token_bans"),
    case("structured_outputs-bad-regex", chat(structured_outputs={"regex": "[a-"}), param="structured_outputs"),
    case("guided_regex-bad", chat(guided_regex="(a"), param="guided_regex"),
    case("guided_choice-empty", chat(guided_choice=[]), param="guided_choice"),
    case("response_format-unknown-type", chat(response_format={"type": "yaml"}), param="response_format"),
    case("response_format-schema-missing", chat(response_format={"type": "json_schema"}), param="response_format"),
    case("two-constraints", chat(guided_regex="a", response_format={"type": "json_object"}), param="guided_regex"),
    case("tool_choice-without-tools", chat(tool_choice="required"), param="tool_choice"),
    case("tools-not-functions", chat(tools=[{"type": "retrieval"}]), param="tools[0]"),
    case("tools-bad-schema", chat(tools=[{"type": "function", "function": {"name": "f", "parameters": {
        "type": "nope"}}}]), param="tools[0]"),
    case("tool_choice-and-response_format", chat(tools=[{"type": "function", "function": {"name": "f"}}],
                                                  tool_choice="required", response_format={"type": "json_object"}),
         param="tool_choice"),
    case("tool_calls-without-a-function", {"messages": [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "x"}]}, {"role": "user", "content": "hi"}], "max_tokens": 1}, param=ANY),
    case("n-0", chat(n=0), param="n"),
    case("n-17", chat(n=17), param="n"),
    case("max_tokens-0", chat(max_tokens=0), param="max_tokens"),
    case("max_tokens-huge", chat(max_tokens=10**9), param="max_tokens"),
    case("max_completion_tokens-0", chat(max_completion_tokens=0), param="max_completion_tokens"),
    case("min_tokens-over-max_tokens", chat(min_tokens=5, max_tokens=2), param="min_tokens"),
    case("min_tokens-minus-1", chat(min_tokens=-1), param="min_tokens"),
    case("seed-a-string", chat(seed="abc"), param="seed"),
    case("top_logprobs-21", chat(logprobs=True, top_logprobs=21), param="top_logprobs"),
    case("top_logprobs-minus-1", chat(logprobs=True, top_logprobs=-1), param="top_logprobs"),
    case("completions-logprobs-21", comp(logprobs=21), param="logprobs", path=COMP),
    case("logit_bias-500", chat(logit_bias={"5": 500}), param="logit_bias"),
    case("logit_bias-token-out-of-vocab", chat(logit_bias={str(10**7): 1}), param="logit_bias"),
    case("logit_bias-negative-token", chat(logit_bias={"-3": 1}), param="logit_bias"),
    case("stop-empty-string", chat(stop=""), param="stop"),
    case("stop-17-strings", chat(stop=[f"s{i}" for i in range(17)]), param="stop"),
    # messages
    case("messages-empty", {"messages": []}, param="messages"),
    case("messages-missing", {"max_tokens": 1}, param="messages"),
    case("role-unknown", {"messages": [{"role": "bot", "content": "x"}]}, param="messages.0.role"),
    case("role-missing", {"messages": [{"content": "x"}]}, param="messages.0.role"),
    case("message-not-an-object", {"messages": ["hi"]}, param="messages.0"),
    case("content-a-number", {"messages": [{"role": "user", "content": 5}]}, param="messages.0.content"),
    # prompts
    case("prompt-missing", {"max_tokens": 1}, param="prompt", path=COMP),
    case("prompt-empty-list", {"prompt": []}, param="prompt", path=COMP),
    case("prompt-empty-string", comp(prompt=""), param="prompt", path=COMP),
    case("prompt-token-out-of-vocab", comp(prompt=[10**7]), param="prompt", path=COMP),
    case("chat-prompt-over-context", {"messages": [{"role": "user", "content": LONG}], "max_tokens": 1},
         param="messages", code="context_length_exceeded"),
    case("completions-prompt-over-context", comp(prompt=LONG), param="prompt", path=COMP,
         code="context_length_exceeded"),
    # fields that need another (as OpenAI and vLLM answer)
    case("top_logprobs-without-logprobs", chat(top_logprobs=2), param="top_logprobs"),
    case("stream_options-without-stream", chat(stream_options={"include_usage": True}), param="stream_options"),
    case("stream_options-stream-false", chat(stream=False, stream_options={"include_usage": True}),
         param="stream_options"),
    case("suffix", comp(suffix=" and so on."), param="suffix", path=COMP),
    case("chat-max_completion_tokens-0", chat(max_completion_tokens=0), param="max_completion_tokens"),
    case("too-many-sequences", comp(prompt=["Hi"] * 20, n=16), param="n", path=COMP),
    # text that is valid JSON but not Unicode: a lone UTF-16 surrogate
    case("lone-surrogate-in-content", None, raw=b'{"messages": [{"role": "user", "content": "a\\ud800b"}], '
                                               b'"max_tokens": 1}', param="messages.0.content"),
    case("lone-surrogate-in-prompt", None, raw=b'{"prompt": ["Hi", "\\udfff"], "max_tokens": 1}', param="prompt.1",
         path=COMP),
    case("lone-surrogate-in-stop", None, raw=b'{"messages": [{"role": "user", "content": "Hi"}], "stop": "\\ud83d"}',
         param="stop"),
    # model and preset names
    case("model-unknown", chat(model="no-such-model"), 404, "model", code="model_not_found"),
    case("preset-unknown", chat(preset="NoSuchPreset"), param="preset"),
    case("preset-path-characters", chat(preset="../x"), param="preset"),
    # auth
    case("auth-missing", chat(), 401, None, auth=None, code="invalid_api_key"),
    case("auth-wrong-key", chat(), 401, None, auth="Bearer wrong-key", code="invalid_api_key"),
    case("auth-basic-scheme", chat(), 401, None, auth=f"Basic {API_KEY}", code="invalid_api_key"),
    case("auth-missing-completions", comp(), 401, None, path=COMP, auth=None, code="invalid_api_key"),
    case("auth-missing-models", None, 401, None, path="/v1/models", method="GET", auth=None,
         code="invalid_api_key"),
    # routes
    case("route-unknown", chat(), 404, None, path="/v1/no-such-route"),
    case("route-unknown-get", None, 404, None, path="/v1/embeddingz", method="GET"),
    case("get-on-post-route", None, 405, None, path="/v1/completions", method="GET"),  # (GET chat: stored ones)
]


def send(api, method: str, path: str, body, raw: bytes | None, auth: str | None) -> httpx.Response:
    headers = {"Authorization": auth} if auth else {}
    if raw is not None:
        headers["Content-Type"] = "application/json"
    with httpx.Client(base_url=api.root, timeout=60) as client:  # a fresh connection per case
        if raw is not None:
            return client.request(method, path, content=raw, headers=headers)
        return client.request(method, path, json=body, headers=headers)


def test_a_body_over_the_limit_is_a_413_before_it_is_read(api):
    """8 MiB is the default limit (--api-max-body-mb): a declared length over it, and a chunked body that grows
    over it, are refused in OpenAI's error shape; the server keeps answering."""
    big = json.dumps(chat(messages=[{"role": "user", "content": "x" * (9 * 2**20)}])).encode()
    headers = {"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json"}
    with httpx.Client(base_url=api.root, timeout=60, headers=headers) as client:
        r = client.post(CHAT, content=big)
        assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large", r.text
        assert "--api-max-body-mb" in r.json()["error"]["message"]
        r = client.post(CHAT, content=(big[i:i + 2**20] for i in range(0, len(big), 2**20)))  # chunked
        assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large", r.text
    r = send(api, "POST", CHAT, chat(temperature=0), None, f"Bearer {API_KEY}")
    assert r.status_code == 200


def test_the_surrogate_message_says_where_and_what_to_do(api):
    raw = b'{"messages": [{"role": "user", "content": "a\\ud800b"}], "max_tokens": 1}'
    error = send(api, "POST", CHAT, None, raw, f"Bearer {API_KEY}").json()["error"]
    assert error["message"].startswith("messages.0.content: a lone UTF-16 surrogate (U+D800) at character 1")


def test_the_table_is_big_enough():
    assert len(CASES) >= 30


@pytest.mark.parametrize("method,path,body,raw,auth,status,param,code", CASES)
def test_bad_request(api, method, path, body, raw, auth, status, param, code):
    r = send(api, method, path, body, raw, auth)
    assert r.status_code < 500, r.text
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error"}, body
    error = body["error"]
    assert set(error) == {"message", "type", "param", "code"}, error
    assert isinstance(error["message"], str) and error["message"].strip(), error
    assert isinstance(error["type"], str) and error["type"], error
    assert error["type"] != "server_error", error
    if param is not ANY:
        assert error["param"] == param, error
    if code is not ANY:
        assert error["code"] == code, error
    if status == 404:
        assert error["type"] == "not_found_error", error


def test_out_of_range_message_names_the_field_value_and_range(api):
    error = send(api, "POST", CHAT, chat(top_p=1.5), None, f"Bearer {API_KEY}").json()["error"]
    assert error["message"] == "top_p must be in (0, 1], got 1.5"


def test_unknown_model_lists_the_served_names(api):
    error = send(api, "POST", CHAT, chat(model="no-such-model"), None, f"Bearer {API_KEY}").json()["error"]
    assert "no-such-model" in error["message"] and "gpt-test" in error["message"]


def test_unknown_preset_lists_the_presets(api):
    error = send(api, "POST", CHAT, chat(preset="NoSuchPreset"), None, f"Bearer {API_KEY}").json()["error"]
    assert "Precise" in error["message"]


def test_empty_body_message_says_the_body_is_missing(api):
    error = send(api, "POST", CHAT, None, b"", f"Bearer {API_KEY}").json()["error"]
    assert "None" not in error["message"]


def test_unknown_fields_are_ignored(api):
    r = send(api, "POST", CHAT, chat(temperature=0, some_future_field={"x": 1}, tools=[]), None, f"Bearer {API_KEY}")
    assert r.status_code == 200, r.text


def _log_line(api, request_id: str, timeout: float = 5.0) -> str:
    deadline = time.monotonic() + timeout
    while True:
        lines = [x for x in api.server.log.read_text().splitlines() if f"request {request_id} " in x]
        if lines or time.monotonic() > deadline:
            return lines[0] if lines else ""
        time.sleep(0.1)


def test_a_validation_error_keeps_the_connection_and_is_logged(api):
    """Pydantic errors go through FastAPI's handler: x-request-id set, status logged, connection kept."""
    with httpx.Client(base_url=api.root, timeout=60, headers={"Authorization": f"Bearer {API_KEY}"}) as client:
        bad = client.post(CHAT, json=chat(n=0))
        assert bad.status_code == 400
        assert re.search(r"status=400\b", _log_line(api, bad.headers["x-request-id"]))
        for _ in range(3):
            assert client.post(CHAT, json=chat(n=0)).status_code == 400


def test_a_sampling_error_keeps_the_connection_and_its_log_line(api):
    with httpx.Client(base_url=api.root, timeout=60, headers={"Authorization": f"Bearer {API_KEY}"}) as client:
        bad = client.post(CHAT, json=chat(temperature=9))
        assert bad.status_code == 400
        assert "x-request-id" in bad.headers
        assert re.search(r"status=400\b", _log_line(api, bad.headers["x-request-id"]))
        for _ in range(3):
            assert client.post(CHAT, json=chat(temperature=9)).status_code == 400


def test_a_raw_keep_alive_socket_survives_a_pydantic_error(api):
    """Two requests on one HTTP/1.1 socket: the second is answered after a 400 from validation."""
    host, port = api.root.removeprefix("http://").split(":")
    body = json.dumps(chat(n=0)).encode()
    request = (f"POST {CHAT} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {API_KEY}\r\n"
               f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body
    with socket.create_connection((host, int(port)), timeout=10) as s:
        answers = []
        for _ in range(2):
            s.sendall(request)
            answers.append(_read_response(s))
    assert [a.split(b" ", 2)[1] for a in answers] == [b"400", b"400"]


def _read_response(s: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    length = int(re.search(rb"(?i)content-length: (\d+)", head).group(1))
    while len(rest) < length:
        chunk = s.recv(65536)
        if not chunk:
            break
        rest += chunk
    return head
