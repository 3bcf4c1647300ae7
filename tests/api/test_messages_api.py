"""Anthropic's Messages API with Anthropic's official client, against a real server and the real default model (a
tiny random LLaVA loaded beside it for images): replies as chat completions give them, streams, tool use, stop
reasons, token counts, the models list in Anthropic's shape, and errors in Anthropic's shape through the client's
own exception classes. Generations are kept short. Also: a kept /v1/messages request shows and replays in the
Requests tab's controller (in process, on the tiny random model)."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request

import anthropic
import httpx
import openai
import pytest

from tests.api.conftest import APIServer, start_api
from tests.vision_models import png
from webui.images import data_url

pytestmark = pytest.mark.real_model

MODEL = "SmolLM2-135M-Instruct"
ALIAS = "claude-test"
VISION = "tiny-llava"
FRANCE = [{"role": "user", "content": "What is the capital of France?"}]
STORY = [{"role": "user", "content": "Write a long story about a dragon who likes tea."}]
GREEDY = {"temperature": 0}  # (this client version has no temperature argument: it goes as extra_body)
WEATHER = {"name": "get_weather", "description": "Get the current weather in a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
ASK_WEATHER = [{"role": "user", "content": "What is the weather in Paris?"}]
RED = png((200, 30, 30), stripe=5)


@pytest.fixture(scope="module")
def api(tmp_path_factory, default_model_dir, tiny_llava_dir):
    """The default model in use (also as the alias 'claude-test'), the tiny LLaVA loaded beside it."""
    models = tmp_path_factory.mktemp("messages-models") / "models"
    models.mkdir()
    (models / VISION).symlink_to(tiny_llava_dir, target_is_directory=True)
    ctx, base, key = start_api(tmp_path_factory, default_model_dir, "--models-dir", str(models), "--also-load",
                               VISION, "--served-model-name", ALIAS, MODEL)
    with ctx as server:
        with urllib.request.urlopen(base.removesuffix("/v1") + "/health", timeout=10):
            pass
        yield APIServer(base, key, server)


def fresh(api: APIServer, key: str | None = None) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=api.root, api_key=key or api.key, max_retries=0, timeout=120)


@pytest.fixture
def client(api):
    with fresh(api) as c:
        yield c


def create(client, **fields):
    fields.setdefault("model", MODEL)
    fields.setdefault("max_tokens", 12)
    fields.setdefault("messages", FRANCE)
    extra = {**GREEDY, **fields.pop("extra_body", {})}
    return client.messages.create(**fields, extra_body=extra)


def text_of(message) -> str:
    return "".join(block.text for block in message.content if block.type == "text")


# -- replies --------------------------------------------------------------------------------------------------------

def test_a_reply_is_the_chat_completions_reply(api, client):
    r = create(client)
    assert r.type == "message" and r.role == "assistant" and r.id.startswith("msg_") and r.model == MODEL
    assert [b.type for b in r.content] == ["text"] and "Paris" in r.content[0].text
    assert r.stop_reason in ("end_turn", "max_tokens") and r.stop_sequence is None
    with openai.OpenAI(base_url=api.base_url, api_key=api.key, max_retries=0) as oa:
        chat = oa.chat.completions.create(model=MODEL, messages=FRANCE, max_tokens=12, temperature=0)
    assert r.content[0].text == chat.choices[0].message.content
    u = r.usage
    assert u.input_tokens + u.cache_read_input_tokens == chat.usage.prompt_tokens  # (the cache's part is apart)
    assert u.output_tokens == chat.usage.completion_tokens and u.cache_creation_input_tokens == 0
    assert create(client, model=ALIAS).content == r.content  # the alias serves the loaded model


def test_a_system_prompt_as_text_or_blocks(api, client):
    system = "You are a pirate. Answer like one."
    r = create(client, system=system)
    assert create(client, system=[{"type": "text", "text": system}]).content == r.content
    with openai.OpenAI(base_url=api.base_url, api_key=api.key, max_retries=0) as oa:
        chat = oa.chat.completions.create(model=MODEL, messages=[{"role": "system", "content": system}, *FRANCE],
                                          max_tokens=12, temperature=0)
    assert text_of(r) == chat.choices[0].message.content
    read = r.usage.input_tokens + r.usage.cache_read_input_tokens
    plain = create(client).usage
    assert read == chat.usage.prompt_tokens != plain.input_tokens + plain.cache_read_input_tokens  # it was read


def test_a_stream_gives_the_same_reply_with_its_events_in_order(client):
    whole = create(client)
    with client.messages.stream(model=MODEL, max_tokens=12, messages=FRANCE, extra_body=GREEDY) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == text_of(whole) == text_of(final)
    assert final.stop_reason == whole.stop_reason and final.usage.output_tokens == whole.usage.output_tokens
    assert final.usage.input_tokens + final.usage.cache_read_input_tokens == \
        whole.usage.input_tokens + whole.usage.cache_read_input_tokens
    events = list(create(client, stream=True))
    kinds = [e.type for e in events]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    assert kinds[1:3] == ["content_block_start", "content_block_delta"] and kinds[-3] == "content_block_stop"
    assert set(kinds[2:-3]) == {"content_block_delta"}
    start = events[0].message
    assert start.content == [] and start.stop_reason is None and start.usage.input_tokens == \
        whole.usage.input_tokens + whole.usage.cache_read_input_tokens  # the whole prompt, before the cache's part


def test_stop_sequences_stop_with_the_sequence_that_matched(client):
    full = text_of(create(client, max_tokens=16))
    word = full.split()[2]
    r = create(client, max_tokens=16, stop_sequences=["no such text", word])
    assert r.stop_reason == "stop_sequence" and r.stop_sequence == word
    assert text_of(r) == full[:full.index(word)].rstrip() or text_of(r) == full[:full.index(word)]
    with client.messages.stream(model=MODEL, max_tokens=16, messages=FRANCE, stop_sequences=[word],
                                extra_body=GREEDY) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "stop_sequence" and final.stop_sequence == word


def test_max_tokens_stops_with_max_tokens(client):
    r = create(client, max_tokens=3, messages=STORY, extra_body={"ignore_eos": True})
    assert r.stop_reason == "max_tokens" and r.usage.output_tokens == 3


# -- tools ----------------------------------------------------------------------------------------------------------

def _round_trip(client, call) -> None:
    """The tool's result sent back gets a text reply."""
    history = [*ASK_WEATHER, {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in call.content]},
               {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.content[-1].id,
                                             "content": "Sunny, 24 degrees"}]}]
    answer = create(client, messages=history, tools=[WEATHER], max_tokens=16)
    assert answer.stop_reason in ("end_turn", "max_tokens") and text_of(answer)
    assert all(b.type == "text" for b in answer.content)


def test_a_tool_use_round_trip(client):
    r = create(client, messages=ASK_WEATHER, tools=[WEATHER], tool_choice={"type": "tool", "name": "get_weather"},
               max_tokens=40)
    assert r.stop_reason == "tool_use"
    use = r.content[-1]
    assert use.type == "tool_use" and use.name == "get_weather" and use.id.startswith("toolu_")
    assert isinstance(use.input, dict) and isinstance(use.input.get("city"), str)
    _round_trip(client, r)


def test_a_streamed_tool_use_round_trip(client):
    whole = create(client, messages=ASK_WEATHER, tools=[WEATHER], tool_choice={"type": "any"}, max_tokens=40)
    with client.messages.stream(model=MODEL, max_tokens=40, messages=ASK_WEATHER, tools=[WEATHER],
                                tool_choice={"type": "any", "disable_parallel_tool_use": True},
                                extra_body=GREEDY) as stream:
        events = list(stream)
        final = stream.get_final_message()
    assert final.stop_reason == "tool_use" and [b.type for b in final.content] == ["tool_use"]
    assert final.content[0].input == whole.content[-1].input and final.content[0].name == "get_weather"
    deltas = [e for e in events if e.type == "content_block_delta"]
    assert deltas and all(e.delta.type == "input_json_delta" for e in deltas)
    assert json.loads("".join(e.delta.partial_json for e in deltas)) == final.content[0].input
    _round_trip(client, final)


# -- token counts, images, models -----------------------------------------------------------------------------------

def test_count_tokens_is_what_a_request_reads(client):
    fields = {"model": MODEL, "messages": ASK_WEATHER, "system": "Be brief.", "tools": [WEATHER]}
    counted = client.messages.count_tokens(**fields).input_tokens
    u = create(client, **fields, max_tokens=2).usage
    assert counted == u.input_tokens + u.cache_read_input_tokens + u.cache_creation_input_tokens
    assert counted > client.messages.count_tokens(model=MODEL, messages=ASK_WEATHER).input_tokens  # tools count


def test_an_image_message_to_a_vision_model_and_to_a_text_only_one(client):
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": data_url(RED).partition(",")[2]}}
    messages = [{"role": "user", "content": [image, {"type": "text", "text": "What is in the picture?"}]}]
    r = create(client, model=VISION, messages=messages, max_tokens=4)
    counted = client.messages.count_tokens(model=VISION, messages=messages).input_tokens
    assert counted == r.usage.input_tokens + r.usage.cache_read_input_tokens
    assert counted > client.messages.count_tokens(model=VISION, messages=[
        {"role": "user", "content": "What is in the picture?"}]).input_tokens  # the image's tokens count
    with pytest.raises(anthropic.BadRequestError) as e:
        create(client, messages=messages)
    error = e.value.body["error"]
    assert error["type"] == "invalid_request_error" and "messages.0.content.0" in error["message"]
    assert "text-only" in error["message"]


def test_the_models_in_anthropics_shape(client, api):
    models = client.models.list()
    ids = [m.id for m in models.data]
    assert MODEL in ids and ALIAS in ids and VISION in ids and all(m.type == "model" for m in models.data)
    first = client.models.list(limit=1)
    assert len(first.data) == 1 and first.has_more and first.last_id == ids[0]
    assert client.models.list(limit=1, after_id=first.last_id).data[0].id == ids[1]
    assert client.models.retrieve(MODEL).display_name == MODEL
    with pytest.raises(anthropic.NotFoundError) as e:
        client.models.retrieve("no-such-model")
    assert e.value.body["error"]["type"] == "not_found_error"
    with pytest.raises(anthropic.BadRequestError) as e:
        client.models.list(after_id="no-such-model")
    assert "after_id" in e.value.body["error"]["message"]
    plain = httpx.get(api.base_url + "/models", headers={"x-api-key": api.key})  # no anthropic-version: OpenAI's
    assert plain.status_code == 200 and plain.json()["object"] == "list"


# -- errors, each in Anthropic's shape ------------------------------------------------------------------------------

def refused(call, kind=anthropic.BadRequestError) -> dict:
    with pytest.raises(kind) as e:
        call()
    body = e.value.body
    assert body["type"] == "error" and set(body["error"]) == {"type", "message"}, body
    return body["error"]


def test_errors_name_the_field(client):
    error = refused(lambda: client.post("/v1/messages", cast_to=object, body={"model": MODEL, "messages": FRANCE}))
    assert error["type"] == "invalid_request_error" and "max_tokens" in error["message"]
    error = refused(lambda: create(client, messages=[{"role": "system", "content": "hi"}]))
    assert "messages.0.role" in error["message"]
    error = refused(lambda: create(client, thinking={"type": "enabled", "budget_tokens": 2048}))
    assert error["message"].startswith("thinking:") and "reasoning" in error["message"]
    assert create(client, thinking={"type": "disabled"}, max_tokens=1).content  # disabled is taken
    error = refused(lambda: create(client, tools=[{"type": "web_search_20250305", "name": "web_search"}]))
    assert "tools.0" in error["message"] and "web_search_20250305" in error["message"]
    error = refused(lambda: create(client, extra_body={"top_p": 1.5}))
    assert "top_p" in error["message"]
    error = refused(lambda: create(client, stop_sequences=[""]))
    assert error["message"].startswith("stop_sequences")
    error = refused(lambda: create(client, messages=ASK_WEATHER, tools=[WEATHER],
                                   tool_choice={"type": "tool", "name": "get_time"}))
    assert "tool_choice" in error["message"] and "get_time" in error["message"]


def test_an_unknown_model_a_wrong_key_and_a_malformed_body(api, client):
    error = refused(lambda: create(client, model="claude-no-such-model"), anthropic.NotFoundError)
    assert error["type"] == "not_found_error" and "claude-no-such-model" in error["message"]
    with fresh(api, "not-the-key") as wrong:
        error = refused(lambda: create(wrong), anthropic.AuthenticationError)
    assert error["type"] == "authentication_error"
    raw = httpx.post(api.root + "/v1/messages", content=b'{"model": "x", "max_tokens": ',
                     headers={"x-api-key": api.key, "anthropic-version": "2023-06-01",
                              "content-type": "application/json"})
    assert raw.status_code == 400 and raw.json()["error"]["type"] == "invalid_request_error"
    assert "not valid JSON" in raw.json()["error"]["message"]
    missing = httpx.post(api.root + "/v1/messages", json={"model": MODEL, "max_tokens": 1, "messages": FRANCE})
    assert missing.status_code == 401 and missing.json()["error"]["type"] == "authentication_error"
    # the OpenAI routes take x-api-key too, and keep OpenAI's error shape
    chat = httpx.post(api.base_url + "/chat/completions", headers={"x-api-key": api.key},
                      json={"model": "gpt-no-such-model", "messages": FRANCE})
    assert chat.status_code == 404 and chat.json()["error"]["code"] == "model_not_found"


def test_what_only_tunes_anthropics_servers_is_taken_and_their_features_are_refused(client):
    hints = dict(cache_control={"type": "ephemeral", "ttl": "5m"}, diagnostics={"previous_message_id": "msg_1"},
                 inference_geo="eu", metadata={"user_id": "u-1"}, service_tier="auto", speed="standard",
                 output_config={"effort": "low"}, thinking={"type": "adaptive"},
                 system=[{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
                 tool_choice={"type": "auto", "disable_parallel_tool_use": True},
                 tools=[{**WEATHER, "type": "custom", "allowed_callers": ["direct"], "defer_loading": True,
                         "eager_input_streaming": True, "input_examples": [{"city": "Rome"}], "strict": True,
                         "cache_control": {"type": "ephemeral"}}])
    r = create(client, **hints, max_tokens=4)
    assert r.stop_reason in ("end_turn", "max_tokens", "tool_use")
    assert client.messages.count_tokens(model=MODEL, messages=FRANCE, **{
        k: v for k, v in hints.items() if k not in ("diagnostics", "inference_geo", "metadata", "service_tier")
    }).input_tokens == create(client, **hints, max_tokens=1).usage.input_tokens + \
        create(client, **hints, max_tokens=1).usage.cache_read_input_tokens
    for field, value in (("container", {"skills": [{"skill_id": "pdf", "type": "anthropic"}]}),
                         ("mcp_servers", [{"type": "url", "url": "https://mcp.example.com", "name": "x"}]),
                         ("thinking", {"type": "between_tools"})):
        error = refused(lambda: create(client, extra_body={field: value}))
        assert error["message"].startswith(f"{field}:"), error
    document = {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "Tea is green."},
                "citations": {"enabled": True}}
    error = refused(lambda: create(client, messages=[{"role": "user", "content": [document]}]))
    assert error["message"].startswith("messages.0.content.0: citations:"), error


def test_a_document_is_read_into_the_prompt(client):
    document = {"type": "document", "title": "Notes", "context": "Notes from a meeting.",
                "source": {"type": "text", "media_type": "text/plain", "data": "The meeting is on Tuesday."}}
    messages = [{"role": "user", "content": [document, {"type": "text", "text": "When is the meeting?"}]}]
    with_it = client.messages.count_tokens(model=MODEL, messages=messages).input_tokens
    without = client.messages.count_tokens(model=MODEL, messages=[
        {"role": "user", "content": "When is the meeting?"}]).input_tokens
    assert with_it > without + 8
    assert create(client, messages=messages, max_tokens=2).usage.output_tokens > 0
    url = {"type": "document", "source": {"type": "url", "url": "https://example.com/a.pdf"}}
    error = refused(lambda: create(client, messages=[{"role": "user", "content": [url]}]))
    assert error["message"].startswith("messages.0.content.0.source:") and "URL" in error["message"]


def test_a_client_that_leaves_a_stream_cancels_its_generation(api):
    headers = {"x-api-key": api.key, "anthropic-version": "2023-06-01"}
    body = {"model": MODEL, "max_tokens": 400, "messages": STORY, "stream": True, "ignore_eos": True}
    with httpx.Client(base_url=api.root, headers=headers, timeout=60) as c:
        with c.stream("POST", "/v1/messages", json=body) as r:
            for line in r.iter_lines():
                if line.startswith("event: content_block_delta"):
                    break
    deadline = time.monotonic() + 30
    while (h := httpx.get(api.root + "/health").json())["running"] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert h["running"] == 0
    logged = [line for line in api.server.log.read_text().splitlines() if "POST /v1/messages status=200" in line]
    assert "finish=cancelled" in logged[-1] and int(logged[-1].split("completion_tokens=")[1].split()[0]) < 400


# -- kept requests (in process) -------------------------------------------------------------------------------------

def test_a_kept_message_request_shows_and_replays(services):
    from webui.api.app import create_api_app
    from webui.api.replay import areplay
    from webui.api.serving import APIConfig
    from webui.controllers.requests import RequestsController

    services.requests.capture_all = True
    app = create_api_app(services, APIConfig())
    body = {"model": "tiny", "max_tokens": 5, "temperature": 0, "stream": True,
            "messages": [{"role": "user", "content": [{"type": "text", "text": "Hello there"}]}]}

    async def send() -> str:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
            return (await c.post("/v1/messages", json=body)).text

    streamed = asyncio.run(send())
    assert streamed.rstrip().endswith('data: {"type": "message_stop"}')
    controller = RequestsController(services)
    rows = controller.table(None, endpoint="messages")
    assert len(rows) == 1 and rows[0][2] == "messages" and rows[0][6] == "Hello there"
    kept = services.requests.get(rows[0][0])
    assert kept.response["type"] == "message" and kept.response["stop_reason"] == "max_tokens"
    text = kept.response["content"][0]["text"]
    deltas = [json.loads(line[6:])["delta"] for line in streamed.splitlines() if '"content_block_delta"' in line]
    assert text == "".join(d["text"] for d in deltas)  # the stream, put together
    shown = controller.show(kept.id, None)
    assert shown.reply == text and "Hello there" in shown.prompt
    again = asyncio.run(areplay(services, kept))
    assert again.details["replay_of"] == kept.id and again.response["content"] == kept.response["content"]
    chat = services.chats.messages(controller.as_chat(kept.id, None))
    assert [(m.role, m.content) for m in chat] == [("user", "Hello there"), ("assistant", text)]
