"""text-generation-webui's chat extras on /v1/chat/completions (mode, character, user_name, user_bio,
instruction_template, chat_template_str, chat_instruct_command), sent with the official openai client's
``extra_body`` to the API app in process, on the tiny model: the prompt each mode renders (read back from the stored
request), its stop strings, a record's body reproducing a chat reply, and the errors for what is wrong."""

from __future__ import annotations

import httpx
import openai
import pytest

from tests.conftest import run_async
from webui.api.app import create_api_app
from webui.api.serving import APIConfig
from webui.chat.characters import Character

MESSAGES = [{"role": "user", "content": "Where to?"}]
BASE = {"model": "tiny", "messages": MESSAGES, "max_tokens": 3, "temperature": 0, "store": True}


@pytest.fixture
def app(services):
    services.characters.create(Character("Ann", "Ahoy!", "{{char}} is a pirate.", "Zed", "{{user}} sails."))
    return create_api_app(services, APIConfig())


def call(app, **extra_body):
    """(the completion, the stored request's details: the prompt as rendered and the parameters as resolved)."""
    async def go():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
            client = openai.AsyncOpenAI(base_url="http://test/v1", api_key="none", http_client=http, max_retries=0)
            return await client.chat.completions.create(**BASE, extra_body=extra_body)

    done = run_async(go())
    return done, app.state.serving.services.requests.get(done.id).details


def error(app, **extra_body) -> openai.APIStatusError:
    with pytest.raises(openai.APIStatusError) as caught:
        call(app, **extra_body)
    return caught.value


def test_chat_mode_writes_the_transcript_and_stops_at_the_next_turn(app):
    done, seen = call(app, mode="chat", character="Ann")
    assert seen["prompt"] == "Ann is a pirate.\n\nZed sails.\n\nZed: Where to?\nAnn:"
    assert {"\nZed:", "\nAnn:"} <= set(seen["params"]["stop"])
    assert done.choices[0].message.role == "assistant"
    _, named = call(app, mode="chat", character="Ann", user_name="Mo", user_bio="")
    assert named["prompt"] == "Ann is a pirate.\n\nMo: Where to?\nAnn:"


def test_chat_instruct_with_an_instruction_template_and_a_command(app):
    _, seen = call(app, mode="chat-instruct", character="Ann", instruction_template="Alpaca",
                   chat_instruct_command="Be <|character|>.\n<|prompt|>")
    assert seen["prompt"].endswith("### Instruction:\nBe Ann.\nAnn is a pirate.\n\nZed sails.\n\nZed: Where to?\n"
                                   "\n\n### Response:\nAnn:")
    assert {"### Instruction:", "\nZed:", "\nAnn:"} <= set(seen["params"]["stop"])


def test_a_chat_template_str_writes_the_transcript(app):
    _, seen = call(app, mode="chat", chat_template_str="{% for m in messages %}[{{ name1 if m['role'] == 'user' "
                                                       "else name2 }}] {{ m['content'] }}\n{% endfor %}"
                                                       "{% if add_generation_prompt %}[{{ name2 }}]{% endif %}")
    assert seen["prompt"] == "[You] Where to?\n[Assistant]"


def test_instruct_requests_are_unchanged_and_a_character_by_content_is_taken(app):
    _, plain = call(app)
    _, instruct = call(app, mode="instruct", instruction_template="ChatML")
    assert plain["prompt"].endswith("<|im_start|>user\nWhere to?<|im_end|>\n<|im_start|>assistant\n")
    assert instruct["prompt"] == "<|im_start|>user\nWhere to?<|im_end|>\n<|im_start|>assistant\n"
    _, by_content = call(app, mode="chat", character={"name": "Bo", "context": "Bo digs."})
    assert by_content["prompt"] == "Bo digs.\n\nYou: Where to?\nBo:"


@pytest.mark.parametrize("extra, status, param, message", [
    ({"mode": "roleplay"}, 400, "mode", "mode must be one of instruct, chat, chat-instruct, got 'roleplay'"),
    ({"mode": "chat", "character": "Nobody"}, 404, "character", "there is no character 'Nobody' in "),
    ({"mode": "chat", "character": "../etc"}, 400, "character", "plain name"),
    ({"mode": "chat", "character": {"context": "x"}}, 400, "character", 'at least "name"'),
    ({"instruction_template": "Nope"}, 400, "instruction_template", "there is no template 'Nope'"),
    ({"instruction_template": "ChatML", "chat_template": "ChatML"}, 400, "instruction_template", "not both"),
    ({"mode": "chat", "chat_template_str": "{% for %}"}, 400, "chat_template_str", "could not be rendered"),
    ({"mode": "chat-instruct", "chat_instruct_command": "no slot"}, 400, "chat_instruct_command",
     "must contain <|prompt|>"),
    ({"mode": "chat", "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]}, 400, "mode",
     "tools are only taken in the instruct mode"),
])
def test_what_is_wrong_is_named(app, extra, status, param, message):
    caught = error(app, **extra)
    body = caught.response.json()["error"]
    assert caught.status_code == status and body["param"] == param and message in body["message"]
    if status == 404:
        assert "characters" in body["message"] and body["code"] == "character_not_found"


def test_a_reproduce_records_body_is_the_chat_replys_prompt(app, services):
    from webui.chat import chat_messages, render_chat_prompt
    from webui.chat.modes import ChatMode
    from webui.engine import SamplingParams
    from webui.reproduce import ReproduceRecord

    mode = ChatMode("chat-instruct", services.characters.get("Ann"))
    record = ReproduceRecord("tiny", SamplingParams(temperature=0.0, max_new_tokens=3), chat_messages(MESSAGES),
                             chat_mode=mode)
    _, body = record.api_body()
    extra = {k: body[k] for k in ("mode", "character")}
    _, seen = call(app, **extra)
    assert seen["prompt"] == render_chat_prompt(services.loaded.tokenizer, MESSAGES, mode=mode)


def test_a_chat_template_str_that_fails_as_it_renders_is_a_400(app):
    caught = error(app, mode="chat", chat_template_str="{{ name1 + 1 }}")
    assert caught.status_code == 400 and caught.response.json()["error"]["param"] == "chat_template_str"
