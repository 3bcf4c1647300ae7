"""A tool call cut by max_tokens (#33): the call so far comes back in tool_calls with finish_reason "length", its
arguments as far as they were generated, streamed the same way; the template's markup never reaches the client."""

from __future__ import annotations

import openai
import pytest

from tests.api.test_openai_client import ASK_WEATHER, MODEL, WEATHER_TOOL

pytestmark = pytest.mark.real_model

CUT = 16  # tokens: the function's name is written, its arguments are not finished


@pytest.fixture
def client(api):
    with openai.OpenAI(base_url=api.base_url, api_key=api.key, max_retries=0, timeout=120) as c:
        yield c


def ask(client, **extra):
    return client.chat.completions.create(**{
        "model": MODEL, "messages": ASK_WEATHER, "tools": [WEATHER_TOOL], "tool_choice": "required",
        "parallel_tool_calls": False, "temperature": 0, "max_tokens": CUT, **extra})


def test_a_call_cut_by_max_tokens_comes_back_as_a_call_so_far(client):
    whole = ask(client, max_tokens=60).choices[0].message.tool_calls[0].function.arguments
    choice = ask(client).choices[0]
    assert choice.finish_reason == "length" and choice.message.content is None
    (call,) = choice.message.tool_calls
    assert call.function.name == "get_weather" and call.id.startswith("call_")
    assert call.function.arguments != whole and whole.replace(" ", "").startswith(
        call.function.arguments.replace(" ", "")), (call.function.arguments, whole)


def test_a_streamed_call_cut_by_max_tokens_streams_the_same_call(client):
    calls, finish, content = {}, None, ""
    for chunk in ask(client, stream=True):
        for choice in chunk.choices:
            content += choice.delta.content or ""
            for delta in choice.delta.tool_calls or []:
                call = calls.setdefault(delta.index, {"name": None, "arguments": ""})
                call["name"] = delta.function.name or call["name"]
                call["arguments"] += delta.function.arguments or ""
            finish = choice.finish_reason or finish
    unstreamed = ask(client).choices[0].message.tool_calls[0]
    assert finish == "length" and "<tool_call>" not in content and not content.strip()
    assert list(calls) == [0] and calls[0] == {"name": "get_weather", "arguments": unstreamed.function.arguments}

