"""OpenAI's Responses API (/v1/responses) with the official client against a real server and the real default model:
string and item input, greedy output equal to the same chat through chat completions, typed stream events (the
client's create(stream=True) and its responses.stream helper), function tools round trips, previous_response_id
reusing the prefix cache, stored responses (retrieve, delete, input items pages, streams replayed), input token
counts, structured output, background responses, each API key's own responses, and errors naming the field."""

from __future__ import annotations

import base64
import json
import sqlite3
import subprocess
import sys
import time

import jsonschema
import openai
import pytest

from tests.api.conftest import APIServer, start_api
from tests.conftest import ROOT, TEST_THREADS
from webui.engine.prefix_cache import BLOCK_TOKENS

pytestmark = pytest.mark.real_model

MODEL = "SmolLM2-135M-Instruct"
OTHER_KEY = "second-key-456"
FRANCE = "What is the capital of France?"
STORY = "Write one sentence about a dragon who likes tea."
WEATHER = [{"type": "function", "name": "get_weather", "description": "The weather in a city now",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]
JSON_TOKENS = 40  # the model writes JSON across lines, indented
CALL_TOKENS = 32  # a call is written <tool_call>{"name": ..., "arguments": {...}}</tool_call>: some 26 tokens


@pytest.fixture(scope="module")
def api(tmp_path_factory, default_model_dir):
    ctx, base, key = start_api(tmp_path_factory, default_model_dir, "--api-key", OTHER_KEY, "--capture-requests")
    with ctx as server:
        yield APIServer(base, key, server)


@pytest.fixture
def client(api):
    with openai.OpenAI(base_url=api.base_url, api_key=api.key, max_retries=0, timeout=120) as c:
        yield c


def other(api) -> openai.OpenAI:
    return openai.OpenAI(base_url=api.base_url, api_key=OTHER_KEY, max_retries=0, timeout=120)


def ask(c: openai.OpenAI, **fields):
    return c.responses.create(**{"model": MODEL, "input": FRANCE, "temperature": 0, "max_output_tokens": 12,
                                 **fields})


def test_a_string_input_gets_a_message_with_usage_and_the_request_echoed(client):
    r = ask(client, metadata={"run": "1"}, user="u-1", top_p=0.9)
    assert r.object == "response" and r.id.startswith("resp_") and r.status == "completed" and r.model == MODEL
    assert "Paris" in r.output_text
    [message] = r.output
    assert message.type == "message" and message.role == "assistant" and message.id.startswith("msg_")
    assert message.content[0].type == "output_text" and message.content[0].annotations == []
    u = r.usage
    assert u.input_tokens > 0 and 0 < u.output_tokens <= 12 and u.total_tokens == u.input_tokens + u.output_tokens
    assert u.output_tokens_details.reasoning_tokens == 0 and u.input_tokens_details.cached_tokens >= 0
    assert (r.metadata, r.user, r.top_p, r.temperature, r.max_output_tokens) == ({"run": "1"}, "u-1", 0.9, 0, 12)
    assert (r.store, r.truncation, r.tool_choice, r.tools, r.parallel_tool_calls) == (True, "disabled", "auto", [], True)
    assert r.text.format.type == "text" and r.incomplete_details is None and r.error is None


def test_item_input_with_instructions_equals_the_same_chat_through_chat_completions(client):
    items = [{"role": "user", "content": "Hi!"}, {"role": "assistant", "content": "Hello! How can I help?"},
             {"type": "message", "role": "user", "content": [{"type": "input_text", "text": FRANCE}]}]
    r = ask(client, instructions="Answer in one short sentence.", input=items)
    chat = client.chat.completions.create(model=MODEL, temperature=0, max_tokens=12, messages=[
        {"role": "system", "content": "Answer in one short sentence."}, {"role": "user", "content": "Hi!"},
        {"role": "assistant", "content": "Hello! How can I help?"}, {"role": "user", "content": FRANCE}])
    assert r.output_text == chat.choices[0].message.content
    assert r.usage.input_tokens == chat.usage.prompt_tokens and r.instructions == "Answer in one short sentence."
    assert r.status == ("completed" if chat.choices[0].finish_reason == "stop" else "incomplete")


def test_streamed_events_come_in_order_and_build_the_same_response(client):
    whole = ask(client)
    events = list(ask(client, stream=True))
    kinds = [e.type for e in events]
    assert kinds[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                          "response.completed"]
    assert set(kinds[4:-4]) == {"response.output_text.delta"}
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = [e for e in events if e.type == "response.output_text.delta"]
    item_id = events[2].item.id
    assert events[2].item.content == [] and events[3].part.text == "" and events[-2].item.status == "completed"
    assert all(d.item_id == item_id and d.output_index == 0 and d.content_index == 0 and d.logprobs == []
               for d in deltas)
    final = events[-1].response
    assert "".join(d.delta for d in deltas) == final.output_text == whole.output_text
    assert events[0].response.status == "in_progress" and final.status == "completed" and final.id == events[0].response.id
    assert final.usage.output_tokens == whole.usage.output_tokens
    # the client's stream helper (it checks the events' order itself) gives the same
    with client.responses.stream(model=MODEL, input=FRANCE, temperature=0, max_output_tokens=12) as stream:
        snapshots = [e.snapshot for e in stream if e.type == "response.output_text.delta"]
        done = stream.get_final_response()
    assert done.output_text == whole.output_text == snapshots[-1]
    # a reply cut by max_output_tokens ends incomplete, streamed or not
    cut = list(ask(client, max_output_tokens=2, stream=True))
    assert cut[-1].type == "response.incomplete" and cut[-1].response.incomplete_details.reason == "max_output_tokens"
    assert cut[-2].item.status == "incomplete"
    r = ask(client, max_output_tokens=2)
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens" and r.usage.output_tokens == 2


def test_a_function_tool_round_trip(client):
    r = ask(client, input="What is the weather in Paris?", tools=WEATHER, tool_choice="required",
            max_output_tokens=CALL_TOKENS)
    [call] = r.output
    assert call.type == "function_call" and call.name == "get_weather" and call.id.startswith("fc_")
    assert call.call_id.startswith("call_") and json.loads(call.arguments) == {"city": "Paris"}
    assert r.status == "completed" and r.tools[0].name == "get_weather" and r.tool_choice == "required"
    answer = ask(client, previous_response_id=r.id, tools=WEATHER, max_output_tokens=16, input=[
        {"type": "function_call_output", "call_id": call.call_id, "output": "sunny, 22 degrees"}])
    assert answer.output[0].type == "message" and answer.output_text and answer.previous_response_id == r.id
    [given] = client.responses.input_items.list(answer.id).data
    assert given.type == "function_call_output" and given.call_id == call.call_id and given.id.startswith("fco_")
    # the whole conversation sent again, item by item, renders the same prompt
    again = ask(client, tools=WEATHER, max_output_tokens=16, input=[
        {"role": "user", "content": "What is the weather in Paris?"},
        {"type": "function_call", "call_id": call.call_id, "name": "get_weather", "arguments": call.arguments},
        {"type": "function_call_output", "call_id": call.call_id, "output": "sunny, 22 degrees"}])
    assert again.usage.input_tokens == answer.usage.input_tokens and again.output_text == answer.output_text


def test_a_streamed_function_tool_round_trip(client):
    with client.responses.stream(model=MODEL, input="What is the weather in Paris?", tools=WEATHER, temperature=0,
                                 tool_choice={"type": "function", "name": "get_weather"},
                                 max_output_tokens=CALL_TOKENS) as stream:
        events = list(stream)
        r = stream.get_final_response()
    kinds = [e.type for e in events]
    assert kinds[2] == "response.output_item.added" and events[2].item.type == "function_call"
    assert "response.function_call_arguments.delta" in kinds and kinds[-3:] == [
        "response.function_call_arguments.done", "response.output_item.done", "response.completed"]
    [call] = r.output
    assert events[-3].arguments == call.arguments and json.loads(call.arguments) == {"city": "Paris"}
    assert r.tool_choice.name == "get_weather"
    events = list(ask(client, stream=True, previous_response_id=r.id, max_output_tokens=16, input=[
        {"type": "function_call_output", "call_id": call.call_id, "output": "sunny, 22 degrees"}]))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text and events[-1].response.output_text == text


def test_previous_response_id_continues_the_conversation_from_the_prefix_cache(client):
    first = ask(client, instructions="You are terse.", input=STORY, max_output_tokens=16)
    second = ask(client, previous_response_id=first.id, input="Another one.", max_output_tokens=16)
    assert second.previous_response_id == first.id and second.instructions is None
    # the first turn's input and output come first; its instructions are not carried over
    items = [{"role": "user", "content": STORY}, {"role": "assistant", "content": first.output_text},
             {"role": "user", "content": "Another one."}]
    again = ask(client, input=items, max_output_tokens=16)
    assert (again.output_text, again.usage.input_tokens) == (second.output_text, second.usage.input_tokens)
    # the earlier prompt and every whole block of its reply come from the cache: the chat template renders the
    # reply as it was generated, so the next prompt begins with the earlier prompt's tokens and then the reply's
    third = ask(client, previous_response_id=second.id, input="Thanks.", max_output_tokens=1)
    reused = third.usage.input_tokens_details.cached_tokens
    earlier = second.usage.input_tokens + second.usage.output_tokens
    assert reused >= earlier // BLOCK_TOKENS * BLOCK_TOKENS > 0
    if second.usage.output_tokens == 16:  # (a reply that long ends past the prompt's last whole block)
        assert reused > second.usage.input_tokens


def test_stored_responses_are_retrieved_listed_and_deleted(client):
    items = [{"role": "user", "content": f"Say {word}."} for word in ("one", "two", "three", "four", "five")]
    r = ask(client, input=items, max_output_tokens=2)
    assert client.responses.retrieve(r.id).model_dump() == r.model_dump()
    listed = client.responses.input_items.list(r.id, order="asc")
    assert [i.content[0].text for i in listed.data] == [m["content"] for m in items] and not listed.has_more
    ids = [i.id for i in listed.data]
    assert all(i.startswith("msg_") for i in ids) and len(set(ids)) == 5
    assert [i.id for i in client.responses.input_items.list(r.id).data] == ids[::-1]  # newest first by default
    page = client.responses.input_items.list(r.id, order="asc", limit=2)
    assert [i.id for i in page.data] == ids[:2] and page.has_more
    assert [i.id for i in page.get_next_page().data] == ids[2:4]
    assert [i.id for i in client.responses.input_items.list(r.id, order="asc", limit=2)] == ids  # every page
    assert [i.id for i in client.responses.input_items.list(
        r.id, order="asc", extra_query={"before": ids[2]}).data] == ids[:2]
    # its stream, again: the same events the request's stream had
    replayed = list(client.responses.retrieve(r.id, stream=True))
    assert replayed[-1].response.model_dump() == r.model_dump()
    assert [e.sequence_number for e in client.responses.retrieve(r.id, stream=True, starting_after=3)] == list(
        range(4, len(replayed)))
    assert client.responses.delete(r.id) is None
    for gone in (lambda: client.responses.retrieve(r.id), lambda: client.responses.input_items.list(r.id),
                 lambda: client.responses.delete(r.id)):
        with pytest.raises(openai.NotFoundError, match="no stored response has the id"):
            gone()
    unstored = ask(client, store=False, max_output_tokens=2)
    assert unstored.store is False
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(unstored.id)
    with pytest.raises(openai.NotFoundError, match="previous_response_id"):
        ask(client, previous_response_id=unstored.id)


def test_an_item_reference_names_an_item_of_a_stored_response(client):
    r = ask(client, max_output_tokens=4)
    again = ask(client, max_output_tokens=4, input=[{"type": "item_reference", "id": r.output[0].id},
                                                    {"role": "user", "content": "Say it again."}])
    assert [i.id for i in client.responses.input_items.list(again.id, order="asc").data][0] == r.output[0].id
    with pytest.raises(openai.NotFoundError, match=r"input\[0\]"):
        ask(client, input=[{"type": "item_reference", "id": "msg_nonesuch"}])


def test_input_tokens_counts_what_a_real_request_reads(client):
    fields = {"instructions": "Be brief.", "tools": WEATHER,
              "input": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},
                        {"role": "user", "content": FRANCE}]}
    counted = client.responses.input_tokens.count(model=MODEL, **fields)
    assert counted.object == "response.input_tokens"
    assert counted.input_tokens == ask(client, max_output_tokens=1, **fields).usage.input_tokens
    first = ask(client, max_output_tokens=4)
    chained = client.responses.input_tokens.count(model=MODEL, previous_response_id=first.id, input="And Spain?")
    assert chained.input_tokens == ask(client, max_output_tokens=1, previous_response_id=first.id,
                                       input="And Spain?").usage.input_tokens
    with pytest.raises(openai.BadRequestError, match="input is required"):
        client.responses.input_tokens.count(model=MODEL)


def test_a_json_schema_format_gives_json_that_fits_it(client):
    schema = {"type": "object", "properties": {"city": {"type": "string"}, "country": {"type": "string"}},
              "required": ["city", "country"], "additionalProperties": False}
    r = ask(client, input="Name a city and its country.", max_output_tokens=JSON_TOKENS,
            text={"format": {"type": "json_schema", "name": "place", "schema": schema, "strict": True}})
    jsonschema.validate(json.loads(r.output_text), schema)
    assert r.text.format.type == "json_schema" and r.text.format.name == "place"
    free = ask(client, max_output_tokens=8, text={"format": {"type": "json_object"}})
    assert free.output_text.startswith("{") and free.text.format.type == "json_object"  # (any object: cut at 8)


def test_logprobs_come_with_their_include(client):
    r = ask(client, max_output_tokens=3, include=["message.output_text.logprobs"], top_logprobs=2)
    logprobs = r.output[0].content[0].logprobs
    assert len(logprobs) == 3 and all(len(lp.top_logprobs) == 2 and lp.logprob <= 0 for lp in logprobs)
    assert "".join(lp.token for lp in logprobs) == r.output_text and r.top_logprobs == 2


def test_a_background_response_is_polled_streamed_and_cancelled(client):
    r = ask(client, background=True, max_output_tokens=8)
    assert r.status == "queued" and r.background and r.output == []
    deadline = time.monotonic() + 60
    while r.status in ("queued", "in_progress") and time.monotonic() < deadline:
        time.sleep(0.2)
        r = client.responses.retrieve(r.id)
    assert r.status in ("completed", "incomplete") and r.output_text
    assert client.responses.cancel(r.id).status == r.status  # one that has ended stays as it is
    long = ask(client, background=True, max_output_tokens=400, input="Tell a very long story.",
               extra_body={"ignore_eos": True})
    events = client.responses.retrieve(long.id, stream=True)
    assert next(iter(events)).type == "response.created"
    events.close()
    cancelled = client.responses.cancel(long.id)
    assert cancelled.status == "cancelled" and cancelled.usage.output_tokens < 400
    assert client.responses.retrieve(long.id).status == "cancelled"
    with pytest.raises(openai.BadRequestError, match="background: true"):
        client.responses.cancel(ask(client, max_output_tokens=1).id)
    with pytest.raises(openai.BadRequestError, match="store: true"):
        ask(client, background=True, store=False)


def test_a_client_that_leaves_a_stream_cancels_its_generation(client):
    stream = ask(client, stream=True, input="Tell a very long story.", max_output_tokens=400,
                 extra_body={"ignore_eos": True})
    events = iter(stream)
    created = next(events).response
    assert next(e for e in events if e.type == "response.output_text.delta")
    stream.close()
    deadline = time.monotonic() + 30
    while (r := client.responses.retrieve(created.id)).status == "in_progress" and time.monotonic() < deadline:
        time.sleep(0.2)
    assert r.status == "cancelled" and 0 < r.usage.output_tokens < 400


def test_an_input_file_is_read_as_a_document(client):
    note = base64.b64encode(b"The secret word is PELICAN. " * 20).decode()
    plain = client.responses.input_tokens.count(model=MODEL, input="What is the secret word?")
    part = {"type": "input_file", "filename": "note.txt", "file_data": f"data:text/plain;base64,{note}"}
    with_file = client.responses.input_tokens.count(model=MODEL, input=[{"role": "user", "content": [
        part, {"type": "input_text", "text": "What is the secret word?"}]}])
    assert with_file.input_tokens > plain.input_tokens + 20 * 6
    with pytest.raises(openai.BadRequestError) as caught:
        ask(client, input=[{"role": "user", "content": [{**part, "filename": "x.pdf",
                                                          "file_data": "data:application/pdf;base64,AAAA"}]}])
    assert caught.value.body["param"].startswith("input[0].content[0]")


def test_each_api_key_sees_its_own_responses(api, client):
    mine = ask(client, max_output_tokens=2)
    with other(api) as theirs:
        for act in (lambda: theirs.responses.retrieve(mine.id), lambda: theirs.responses.delete(mine.id),
                    lambda: theirs.responses.input_items.list(mine.id), lambda: theirs.responses.cancel(mine.id)):
            with pytest.raises(openai.NotFoundError, match="each API key sees its own"):
                act()
        with pytest.raises(openai.NotFoundError, match=f"previous_response_id: the response '{mine.id}'"):
            ask(theirs, previous_response_id=mine.id)
        with pytest.raises(openai.NotFoundError, match="no stored response of this API key"):
            ask(theirs, input=[{"type": "item_reference", "id": mine.output[0].id}])
        assert ask(theirs, max_output_tokens=1).id != mine.id
    assert client.responses.retrieve(mine.id).id == mine.id


@pytest.mark.parametrize(("fields", "status", "param", "said"), [
    ({"tools": [{"type": "web_search"}]}, 400, "tools[0].type", "hosted tool 'web_search'"),
    ({"tools": [{"type": "file_search", "vector_store_ids": ["vs_1"]}]}, 400, "tools[0].type", "file_search"),
    ({"tools": [{"type": "function"}]}, 400, "tools[0].name", "needs a 'name'"),
    ({"tool_choice": {"type": "web_search_preview"}}, 400, "tool_choice", "not served"),
    ({"model": "no-such-model"}, 404, "model", "does not exist"),
    ({"temperature": "hot"}, 400, "temperature", "valid number"),
    ({"temperature": 9}, 400, "temperature", "temperature"),
    ({"input": 5}, 400, "input", "input"),
    ({"input": [{"role": "robot", "content": "hi"}]}, 400, "input[0].role", "role must be one of"),
    ({"input": [{"role": "user", "content": [{"type": "input_audio"}]}]}, 400, "input[0].content[0].type",
     "unknown content part"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "data:image/png;base64,AA=="}]}]},
     400, "input[0].content[0].image_url", "takes no images"),
    ({"input": [{"type": "function_call_output", "output": "x"}]}, 400, "input[0].call_id", "call_id"),
    ({"input": [{"type": "web_search_call", "id": "ws_1"}]}, 400, "input[0].type", "hosted tools"),
    ({"reasoning": {"effort": "high"}}, 400, "reasoning.effort", "no model here reasons"),
    ({"input": None}, 400, "input", "input is required"),
    ({"max_output_tokens": 0}, 400, "max_output_tokens", "greater than or equal to 1"),
    ({"max_tokens": 5}, 400, "max_tokens", "max_output_tokens"),
    ({"messages": [{"role": "user", "content": "hi"}]}, 400, "messages", "takes input"),
    ({"text": {"format": {"type": "json_schema", "schema": {}}}}, 400, "text.format.name", "needs a 'name'"),
    ({"text": {"format": {"type": "yaml"}}}, 400, "text.format.type", "json_schema"),
    ({"include": ["file_search_call.results"]}, 400, "include[0]", "file_search"),
    ({"conversation": "conv_1"}, 400, "conversation", "Conversations API"),
    ({"previous_response_id": "resp_nonesuch"}, 404, "previous_response_id", "does not exist"),
    ({"tool_choice": "required"}, 400, "tool_choice", "needs tools"),
    ({"tools": WEATHER, "tool_choice": {"type": "function", "name": "nope"}}, 400, "tool_choice", "nope"),
    ({"tools": WEATHER, "tool_choice": "required", "text": {"format": {"type": "json_object"}}}, 400, "tool_choice",
     "text.format"),
    ({"metadata": {"k": 5}}, 400, "metadata.k", "metadata"),
    ({"tools": [{**WEATHER[0], "strict": "yes"}]}, 400, "tools[0].strict", "true or false"),
    ({"text": {"verbosity": "loud"}}, 400, "text.verbosity", "low, medium or high"),
    ({"input": [{"type": "function_call_output", "call_id": "c", "output": [{"type": "input_image"}]}]}, 400,
     "input[0].output[0].type", "input_text"),
    ({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "file-1"}]}]}, 400,
     "input[0].content[0].file_id", "file_data"),
])
def test_errors_name_the_field_in_openai_shape(api, fields, status, param, said):
    body = {"model": MODEL, "input": "hi", "max_output_tokens": 2, **fields}
    with openai.OpenAI(base_url=api.base_url, api_key=api.key, max_retries=0, timeout=60) as c:
        with pytest.raises(openai.APIStatusError) as caught:
            c.post("/responses", body={k: v for k, v in body.items() if v is not None}, cast_to=object)
    error = caught.value
    assert error.status_code == status, error.body
    assert error.body["param"] == param and said in error.body["message"], error.body
    assert error.body["type"] == ("not_found_error" if status == 404 else "invalid_request_error")


def test_a_kept_request_shows_its_response_and_replays_to_the_same_output(api, client):
    """The Requests tab's store (--capture-requests): a streamed Responses request is kept whole, with the prompt the
    model saw, and `launch.py requests replay` sends it again (unstreamed) to the same greedy output."""
    streamed = list(ask(client, stream=True, instructions="Be brief."))
    final = streamed[-1].response
    with sqlite3.connect(api.server.log.parent / "workbench.sqlite3") as db:
        db.row_factory = sqlite3.Row
        row = db.execute("SELECT * FROM api_requests WHERE id = ?", (final.id,)).fetchone()
    assert row["endpoint"] == "/v1/responses" and row["client"] == "key 1" and row["model"] == MODEL
    assert json.loads(row["response"])["output"][0]["content"][0]["text"] == final.output_text
    assert "<|im_start|>system\nBe brief.<|im_end|>" in json.loads(row["details"])["prompt"]
    done = subprocess.run([sys.executable, str(ROOT / "launch.py"), "requests", "--user-data-dir",
                           str(api.server.log.parent), "--threads", str(TEST_THREADS), "replay", final.id],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    again = json.loads(done.stdout)
    assert again["status"] == 200 and again["response"]["output"][0]["content"][0]["text"] == final.output_text
    with sqlite3.connect(api.server.log.parent / "workbench.sqlite3") as db:
        details = db.execute("SELECT details FROM api_requests WHERE id = ?", (again["id"],)).fetchone()[0]
    assert json.loads(details)["replay_of"] == final.id
