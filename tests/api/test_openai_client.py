"""The official `openai` client (sync and async) against the real server and the real default model.

Error cases each get a fresh client: after some 400s the server closes the keep-alive connection (see
tests/api/test_bad_requests.py::test_a_sampling_error_keeps_the_connection_and_its_log_line).
"""

from __future__ import annotations

import asyncio
import json
import re
import time

import openai
import pytest
from pydantic import BaseModel, Field

from tests.conftest import run_async

MODEL = "SmolLM2-135M-Instruct"
ALIAS = "gpt-test"
QUESTION = "What is the capital of France?"
FRANCE = [{"role": "user", "content": QUESTION}]
STORY = [{"role": "user", "content": "Write one sentence about a dragon who likes tea."}]
COMPLETION_PROMPT = "The capital of France is"
PROMPTS = (QUESTION, "dragon who likes tea", COMPLETION_PROMPT)


@pytest.fixture
def client(api):
    with openai.OpenAI(base_url=api.base_url, api_key=api.key, max_retries=0, timeout=120) as c:
        yield c


def fresh(api, key: str | None = "<api>") -> openai.OpenAI:
    return openai.OpenAI(base_url=api.base_url, api_key=api.key if key == "<api>" else key, max_retries=0,
                         timeout=120)


def greedy_chat(client, **extra):
    return client.chat.completions.create(**{"model": MODEL, "messages": FRANCE, "temperature": 0, "max_tokens": 12,
                                             **extra})


# -- chat, not streamed ---------------------------------------------------------------------------------------------

def test_chat_answers_the_capital_of_france(client):
    r = greedy_chat(client)
    assert r.object == "chat.completion" and r.id.startswith("chatcmpl-")
    assert r.model == MODEL
    assert len(r.choices) == 1
    choice = r.choices[0]
    assert choice.index == 0
    assert choice.message.role == "assistant"
    assert "Paris" in choice.message.content
    assert choice.finish_reason in ("stop", "length")
    u = r.usage
    assert u.prompt_tokens > 0
    assert 0 < u.completion_tokens <= 12
    assert u.total_tokens == u.prompt_tokens + u.completion_tokens
    if choice.finish_reason == "length":
        assert u.completion_tokens == 12


def test_greedy_chat_is_repeatable(client):
    assert greedy_chat(client).choices[0].message.content == greedy_chat(client).choices[0].message.content


def test_the_alias_serves_the_loaded_model(client):
    r = client.chat.completions.create(model=ALIAS, messages=FRANCE, temperature=0, max_tokens=12)
    assert r.choices[0].message.content == greedy_chat(client).choices[0].message.content


def test_models_list_has_the_loaded_model_and_its_alias(client):
    ids = [m.id for m in client.models.list()]
    assert MODEL in ids and ALIAS in ids
    assert len(ids) == len(set(ids))  # --served-model-name repeats the model's own name: listed once


def test_length_finish_when_max_tokens_is_reached(client):
    r = client.chat.completions.create(model=MODEL, messages=STORY, temperature=0, max_tokens=3,
                                       extra_body={"ignore_eos": True})
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 3


def test_max_completion_tokens_is_honoured(client):
    r = client.chat.completions.create(model=MODEL, messages=STORY, temperature=0, max_completion_tokens=4,
                                       extra_body={"ignore_eos": True})
    assert r.usage.completion_tokens == 4
    assert r.choices[0].finish_reason == "length"
    # max_completion_tokens wins over max_tokens
    r = client.chat.completions.create(model=MODEL, messages=STORY, temperature=0, max_completion_tokens=2,
                                       max_tokens=10, extra_body={"ignore_eos": True})
    assert r.usage.completion_tokens == 2


def test_extra_sampling_fields_and_a_preset_are_accepted(client):
    r = client.chat.completions.create(
        model=MODEL, messages=FRANCE, max_tokens=12,
        extra_body={"top_k": 1, "min_p": 0.1, "repetition_penalty": 1.1, "preset": "Precise"})
    assert r.choices[0].message.content
    assert r.usage.completion_tokens <= 12
    # text-generation-webui's samplers under its own names, as its API and front-ends send them
    r = client.chat.completions.create(
        model=MODEL, messages=FRANCE, max_tokens=6, seed=3,
        extra_body={"dry_multiplier": 0.8, "dry_sequence_breakers": '"\\n", ":"', "xtc_probability": 0.5,
                    "mirostat_mode": 2, "dynamic_temperature": True, "dynatemp_low": 0.5, "dynatemp_high": 1.5,
                    "sampler_priority": "min_p\ntemperature", "custom_token_bans": "0", "temperature_last": True})
    assert r.choices[0].message.content and r.usage.completion_tokens <= 6


# -- chat, streamed ---------------------------------------------------------------------------------------------------

def test_greedy_streaming_equals_non_streaming(client):
    whole = greedy_chat(client)
    chunks = list(greedy_chat(client, stream=True, stream_options={"include_usage": True}))
    first, last = chunks[0], chunks[-1]
    assert first.choices[0].delta.role == "assistant"
    assert all(c.object == "chat.completion.chunk" and c.id == first.id for c in chunks)
    # a final chunk with no choices carries the usage; the ones before it carry none
    assert last.choices == [] and last.usage is not None
    assert all(c.usage is None for c in chunks[:-1])
    with_choices = [c for c in chunks if c.choices]
    finishes = [c.choices[0].finish_reason for c in with_choices if c.choices[0].finish_reason]
    assert finishes == [whole.choices[0].finish_reason]
    assert with_choices[-1].choices[0].finish_reason is not None  # the finish chunk comes last
    deltas = [c.choices[0].delta.content for c in with_choices[1:] if c.choices[0].delta.content]
    assert len(deltas) >= 2  # streamed in pieces, not in one go
    assert "".join(deltas) == whole.choices[0].message.content
    # the same counts; the stream may read more of its prompt from the prefix cache than the first request did
    assert last.usage.model_dump(exclude={"prompt_tokens_details"}) == \
        whole.usage.model_dump(exclude={"prompt_tokens_details"})


def test_a_repeated_prompt_reports_cached_tokens_in_usage(client):
    """The prefix cache: OpenAI's usage.prompt_tokens_details.cached_tokens, streamed or not, chat or completion."""
    system = {"role": "system", "content": "You answer in one word. " + "Be brief and exact. " * 12}
    messages = [system, {"role": "user", "content": "What colour is the sky on a clear day?"}]
    first = greedy_chat(client, messages=messages)
    again = greedy_chat(client, messages=messages)
    assert again.choices[0].message.content == first.choices[0].message.content
    details = again.usage.prompt_tokens_details
    assert details is not None and again.usage.prompt_tokens > details.cached_tokens >= 48
    other_question = [system, {"role": "user", "content": "Name a fruit."}]  # shares the system prompt only
    chunks = list(greedy_chat(client, messages=other_question, stream=True, stream_options={"include_usage": True}))
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens >= 48
    prompt = COMPLETION_PROMPT + " a city that" * 20
    done = [client.completions.create(model=MODEL, prompt=prompt, max_tokens=2, temperature=0) for _ in range(2)]
    assert done[0].usage.prompt_tokens_details.cached_tokens < done[1].usage.prompt_tokens_details.cached_tokens
    assert done[0].choices[0].text == done[1].choices[0].text


def test_streaming_without_include_usage_has_no_usage_chunk(client):
    chunks = list(greedy_chat(client, stream=True, max_tokens=3))
    assert all(c.choices for c in chunks)
    assert all(getattr(c, "usage", None) is None for c in chunks)


@pytest.mark.parametrize("stop", ["Paris", ["Paris", "."]])
def test_stop_strings_never_appear(client, stop):
    r = greedy_chat(client, stop=stop)
    text = r.choices[0].message.content
    assert r.choices[0].finish_reason == "stop"
    assert "Paris" not in text
    assert text.startswith("The capital of France")  # the greedy answer up to the stop
    streamed = "".join(c.choices[0].delta.content or "" for c in greedy_chat(client, stop=stop, stream=True))
    assert streamed == text


# -- logprobs -------------------------------------------------------------------------------------------------------

def test_chat_logprobs_with_top_logprobs(client):
    r = client.chat.completions.create(model=MODEL, messages=FRANCE, temperature=0, max_tokens=4, logprobs=True,
                                       top_logprobs=3, extra_body={"ignore_eos": True})
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens == 4
    assert "".join(t.token for t in content) == r.choices[0].message.content
    for t in content:
        assert t.logprob <= 0
        assert t.bytes == list(t.token.encode())
        assert len(t.top_logprobs) == 3
        values = [alt.logprob for alt in t.top_logprobs]
        assert values == sorted(values, reverse=True)
        assert t.top_logprobs[0].token == t.token  # greedy picks the most likely token
        assert t.top_logprobs[0].logprob == pytest.approx(t.logprob)


def test_chat_without_logprobs_has_none(client):
    assert greedy_chat(client, max_tokens=2).choices[0].logprobs is None


# -- completions ----------------------------------------------------------------------------------------------------

def test_completion_with_echo_and_logprobs(client):
    """echo with logprobs: the prompt's tokens come first (the first has no logprob), then the generated ones."""
    r = client.completions.create(model=MODEL, prompt=COMPLETION_PROMPT, max_tokens=4, temperature=0, echo=True,
                                  logprobs=2, extra_body={"ignore_eos": True})
    assert r.object == "text_completion"
    choice = r.choices[0]
    assert choice.text.startswith(COMPLETION_PROMPT)
    assert "Paris" in choice.text
    lp = choice.logprobs
    n, p = r.usage.completion_tokens, r.usage.prompt_tokens
    assert n == 4
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == p + n
    assert choice.text == "".join(lp.tokens)
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    for token, offset in zip(lp.tokens, lp.text_offset):
        assert choice.text[offset:offset + len(token)] == token
    for token, logprob, top in list(zip(lp.tokens, lp.token_logprobs, lp.top_logprobs))[1:]:
        assert len(top) == 2 and logprob <= 0
        if token in top:
            assert top[token] == pytest.approx(logprob, abs=1e-4)
    for token, logprob, top in list(zip(lp.tokens, lp.token_logprobs, lp.top_logprobs))[p:]:
        assert max(top, key=top.get) == token  # greedy
    assert r.usage.total_tokens == r.usage.prompt_tokens + n


def test_max_tokens_0_with_echo_scores_the_prompt(client):
    """The original completions API's way to score text (evaluation harnesses rely on it): nothing is generated,
    and each prompt token's logprob is the one the model gives it when it generates that token."""
    generated = client.completions.create(model=MODEL, prompt=COMPLETION_PROMPT, max_tokens=1, temperature=0,
                                          logprobs=1)
    next_token, its_logprob = generated.choices[0].logprobs.tokens[0], generated.choices[0].logprobs.token_logprobs[0]
    text = COMPLETION_PROMPT + next_token
    r = client.completions.create(model=MODEL, prompt=text, max_tokens=0, echo=True, logprobs=3)
    choice = r.choices[0]
    assert choice.text == text and choice.finish_reason == "length"
    assert r.usage.completion_tokens == 0 and r.usage.prompt_tokens == len(choice.logprobs.tokens)
    assert "".join(choice.logprobs.tokens) == text
    assert choice.logprobs.tokens[-1] == next_token
    assert choice.logprobs.token_logprobs[-1] == pytest.approx(its_logprob, abs=1e-3)
    assert all(len(top) == 3 for top in choice.logprobs.top_logprobs[1:])
    streamed = list(client.completions.create(model=MODEL, prompt=text, max_tokens=0, echo=True, logprobs=3,
                                              stream=True))
    assert "".join(c.choices[0].text for c in streamed) == text
    assert streamed[-1].choices[0].finish_reason == "length"
    plain = client.completions.create(model=MODEL, prompt=text, max_tokens=0)  # without echo: an empty answer
    assert plain.choices[0].text == "" and plain.usage.completion_tokens == 0


def test_completion_streaming_equals_non_streaming(client):
    kw = dict(model=MODEL, prompt=COMPLETION_PROMPT, max_tokens=6, temperature=0, echo=True, logprobs=2)
    whole = client.completions.create(**kw)
    chunks = list(client.completions.create(stream=True, stream_options={"include_usage": True}, **kw))
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == whole.choices[0].text
    tokens = [t for c in chunks if c.choices and c.choices[0].logprobs for t in c.choices[0].logprobs.tokens]
    assert tokens == whole.choices[0].logprobs.tokens
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == [whole.choices[0].finish_reason]
    assert chunks[-1].choices == [] and chunks[-1].usage.model_dump() == whole.usage.model_dump()


def test_completion_without_echo(client):
    r = client.completions.create(model=ALIAS, prompt=COMPLETION_PROMPT, max_tokens=3, temperature=0)
    assert not r.choices[0].text.startswith(COMPLETION_PROMPT)
    assert r.choices[0].text.strip().startswith("Paris")
    assert r.choices[0].logprobs is None


# -- n and seeds ------------------------------------------------------------------------------------------------------

def test_n_choices_with_a_seed_repeat(client):
    def ask():
        return client.chat.completions.create(model=MODEL, messages=STORY, temperature=1, seed=1234, n=3,
                                              max_tokens=8)
    first = ask()
    assert sorted(c.index for c in first.choices) == [0, 1, 2]
    assert 3 <= first.usage.completion_tokens <= 24
    texts = [c.message.content for c in sorted(first.choices, key=lambda c: c.index)]
    assert len(set(texts)) > 1  # choice i samples with seed + i
    again = ask()
    assert [c.message.content for c in sorted(again.choices, key=lambda c: c.index)] == texts
    assert again.usage.model_dump() == first.usage.model_dump()


def test_seed_reproducibility(client):
    def sample(seed: int) -> str:
        r = client.chat.completions.create(model=MODEL, messages=STORY, temperature=1, seed=seed, max_tokens=16,
                                           extra_body={"ignore_eos": True})
        return r.choices[0].message.content

    a = sample(42)
    assert sample(42) == a
    assert any(sample(seed) != a for seed in (7, 8))


# -- errors map to the client's exception classes -------------------------------------------------------------------

@pytest.mark.parametrize("fields,param", [
    ({"top_logprobs": 2}, "top_logprobs"),  # without logprobs: true
    ({"stream_options": {"include_usage": True}}, "stream_options"),  # without stream: true
], ids=["top_logprobs-alone", "stream_options-alone"])  # (a lone surrogate cannot leave this client: the raw
# body is in tests/api/test_bad_requests.py)
def test_request_edge_cases_are_bad_requests_naming_the_field(api, fields, param):
    with fresh(api) as c, pytest.raises(openai.BadRequestError) as e:
        c.chat.completions.create(**{"model": MODEL, "messages": FRANCE, "max_tokens": 1, **fields})
    assert e.value.status_code == 400 and e.value.body["param"] == param


def test_suffix_is_a_bad_request_and_max_tokens_0_is_not(api):
    with fresh(api) as c:
        with pytest.raises(openai.BadRequestError) as e:
            c.completions.create(model=MODEL, prompt="def f():", suffix="    return 1", max_tokens=4)
        assert e.value.body["param"] == "suffix"
        r = c.completions.create(model=MODEL, prompt="Hello", max_tokens=0)
        assert r.choices[0].text == "" and r.usage.completion_tokens == 0

def test_wrong_key_is_an_authentication_error(api):
    with fresh(api, "not-the-key") as c, pytest.raises(openai.AuthenticationError) as e:
        greedy_chat(c, max_tokens=1)
    assert e.value.status_code == 401
    assert e.value.body["code"] == "invalid_api_key"


def test_no_key_is_an_authentication_error(api):
    # the client insists on a key, so it is given one and told to leave the header out
    with fresh(api, "unused") as c, pytest.raises(openai.AuthenticationError) as e:
        c.models.list(extra_headers={"Authorization": openai.Omit()})
    assert "missing API key" in e.value.message
    assert e.value.response.request.headers.get("authorization") is None


def test_unknown_model_is_not_found(api):
    with fresh(api) as c, pytest.raises(openai.NotFoundError) as e:
        c.chat.completions.create(model="gpt-no-such-model", messages=FRANCE, max_tokens=1)
    assert e.value.body["param"] == "model"
    assert e.value.body["code"] == "model_not_found"


def test_bad_temperature_is_a_bad_request_naming_it(api):
    with fresh(api) as c, pytest.raises(openai.BadRequestError) as e:
        greedy_chat(c, temperature=9)
    assert e.value.body["param"] == "temperature"
    assert "temperature" in e.value.message


def test_a_prompt_over_the_context_is_context_length_exceeded(api):
    long = [{"role": "user", "content": " ".join(["word"] * 9000)}]
    with fresh(api) as c, pytest.raises(openai.BadRequestError) as e:
        c.chat.completions.create(model=MODEL, messages=long, max_tokens=1)
    assert e.value.code == "context_length_exceeded"
    assert "8192" in e.value.message


def test_unknown_preset_is_a_bad_request(api):
    with fresh(api) as c, pytest.raises(openai.BadRequestError) as e:
        greedy_chat(c, max_tokens=1, extra_body={"preset": "NoSuchPreset"})
    assert e.value.body["param"] == "preset"


def test_the_client_keeps_working_after_a_bad_request(api):
    with fresh(api) as c:
        for _ in range(3):
            with pytest.raises(openai.BadRequestError) as e:
                greedy_chat(c, temperature=9)
            assert "x-request-id" in e.value.response.headers  # the access log middleware saw the response
            assert greedy_chat(c, max_tokens=1).choices[0].message.content is not None


# -- the async client ----------------------------------------------------------------------------------------------

def test_async_streaming_chat(api, client):
    expected = greedy_chat(client).choices[0].message.content

    async def main() -> tuple[list[str], str | None]:
        async with openai.AsyncOpenAI(base_url=api.base_url, api_key=api.key, max_retries=0, timeout=120) as ac:
            stream = await ac.chat.completions.create(model=ALIAS, messages=FRANCE, temperature=0, max_tokens=12,
                                                      stream=True)
            deltas, finish = [], None
            async for chunk in stream:
                deltas.append(chunk.choices[0].delta.content or "")
                finish = chunk.choices[0].finish_reason or finish
            return deltas, finish

    deltas, finish = run_async(main())
    assert "".join(deltas) == expected
    assert finish in ("stop", "length")


def test_async_concurrent_requests_all_complete(api):
    temperatures = [0, 0.5, 1.0, 1.5]

    async def main():
        async with openai.AsyncOpenAI(base_url=api.base_url, api_key=api.key, max_retries=0, timeout=120) as ac:
            return await asyncio.gather(*(
                ac.chat.completions.create(model=MODEL, messages=STORY, temperature=t, max_tokens=6, seed=i)
                for i, t in enumerate(temperatures)))

    started = time.monotonic()
    results = run_async(main())
    assert len(results) == 4
    for r in results:
        assert r.choices[0].finish_reason in ("stop", "length")
        assert 0 < r.usage.completion_tokens <= 6
    assert len({r.id for r in results}) == 4
    assert time.monotonic() - started < 60


# -- the access log (last: it reads what the tests above left) ------------------------------------------------------

ACCESS = re.compile(r"webui\.api: request [0-9a-f]{12} (GET|POST) (\S+) status=(\d+) ")


def access_lines(api) -> list[str]:
    return [x for x in api.server.log.read_text().splitlines() if "webui.api: request " in x]


def test_one_log_line_per_request_without_key_or_prompt(api):
    before = len(access_lines(api))
    with fresh(api) as c:
        c.models.list()
        greedy_chat(c, max_tokens=2)
        c.completions.create(model=MODEL, prompt=COMPLETION_PROMPT, max_tokens=2)
        with pytest.raises(openai.NotFoundError):
            c.chat.completions.create(model="gpt-no-such-model", messages=FRANCE, max_tokens=1)
    with fresh(api, "not-the-key") as c, pytest.raises(openai.AuthenticationError):
        c.models.list()
    expected = [("GET", "/v1/models", "200"), ("POST", "/v1/chat/completions", "200"),
                ("POST", "/v1/completions", "200"), ("POST", "/v1/chat/completions", "404"),
                ("GET", "/v1/models", "401")]
    deadline = time.monotonic() + 5
    while len(access_lines(api)) < before + len(expected) and time.monotonic() < deadline:
        time.sleep(0.1)
    new = access_lines(api)[before:]
    assert [ACCESS.search(x).groups() for x in new] == expected, new
    assert re.search(r"prompt_tokens=\d+ completion_tokens=2 ttft=\d+\.\d+s finish=\w+", new[1])

    log = api.server.log.read_text()
    assert api.key not in log
    for prompt in PROMPTS:
        assert prompt not in log
    assert "word word word" not in log
    for line in access_lines(api):
        assert ACCESS.search(line), line
        assert " prompt=" not in line


def test_openai_compatibility_details(api):
    import httpx

    headers = {"Authorization": f"Bearer {api.key}"}
    with httpx.Client(base_url=api.base_url, headers=headers, timeout=120) as http:
        # a chat that ends with a non-user message still gets a reply, as from OpenAI
        r = http.post("/chat/completions", json={"messages": [{"role": "developer", "content": "Say hi."}],
                                                  "max_tokens": 3})
        assert r.status_code == 200 and r.json()["choices"][0]["message"]["role"] == "assistant"
        # any int64 seed is a seed, negative ones too, and it repeats
        body = {"messages": [{"role": "user", "content": "Tell me a story."}], "max_tokens": 8, "temperature": 1,
                "seed": -9007199254740991}
        first, again = http.post("/chat/completions", json=body).json(), http.post("/chat/completions", json=body).json()
        assert first["choices"][0]["message"]["content"] == again["choices"][0]["message"]["content"]
        # /v1/completions defaults to 16 new tokens, like OpenAI
        r = http.post("/completions", json={"prompt": "Once upon a time", "ignore_eos": True}).json()
        assert r["usage"]["completion_tokens"] == 16
        # a model can be retrieved by id
        model = http.get("/models/gpt-test").json()
        assert model["id"] == "gpt-test" and model["object"] == "model"
        assert http.get("/models/no-such-model").status_code == 404


# -- structured output ---------------------------------------------------------------------------------------------

class City(BaseModel):
    city: str = Field(max_length=20)
    country: str = Field(max_length=20)


def test_parse_with_a_pydantic_model_gets_a_valid_object(client):
    r = client.chat.completions.parse(model=MODEL, messages=FRANCE, response_format=City, temperature=0,
                                      max_tokens=60)
    parsed = r.choices[0].message.parsed
    assert isinstance(parsed, City) and parsed.city and r.choices[0].finish_reason == "stop"


def test_json_object_and_vllms_fields_constrain_the_output(client):
    r = client.chat.completions.create(model=MODEL, messages=FRANCE, temperature=0, max_tokens=30,
                                       extra_body={"guided_choice": ["Paris", "Lyon"]})
    assert r.choices[0].message.content in ("Paris", "Lyon")
    r = client.completions.create(model=MODEL, prompt="The year was", max_tokens=8, temperature=0,
                                  extra_body={"structured_outputs": {"regex": " [0-9]{4}\\."}})
    assert re.fullmatch(" [0-9]{4}\\.", r.choices[0].text)
    stream = client.chat.completions.create(model=MODEL, messages=FRANCE, temperature=0, max_tokens=40, stream=True,
                                            response_format={"type": "json_object"})
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text.startswith("{")


def test_a_bad_schema_is_a_400_naming_the_field(client):
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=MODEL, messages=FRANCE, max_tokens=5, response_format={
            "type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nope"}}})
    assert info.value.body["param"] == "response_format" and "Invalid type: nope" in info.value.body["message"]


# -- chat templates --------------------------------------------------------------------------------------------------

def test_a_request_may_bring_its_chat_template_as_vllm_takes_it(client):
    plain = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}assistant:"
    own = client.chat.completions.create(model=MODEL, messages=FRANCE, max_tokens=3, temperature=0)
    named = client.chat.completions.create(model=MODEL, messages=FRANCE, max_tokens=3, temperature=0,
                                           extra_body={"chat_template": "User/Assistant"})
    given = client.chat.completions.create(model=MODEL, messages=FRANCE, max_tokens=3, temperature=0,
                                           extra_body={"chat_template": plain})
    # "User: <question>\nAssistant:" and "user: <question>\nassistant:" are far shorter than ChatML with its
    # default system prompt
    assert named.usage.prompt_tokens < own.usage.prompt_tokens and given.usage.prompt_tokens < own.usage.prompt_tokens
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=MODEL, messages=FRANCE, max_tokens=3,
                                       extra_body={"chat_template": "{% for m in messages %}x{% endfor %}"})
    assert info.value.body["param"] == "chat_template" and "does not write the messages" in info.value.body["message"]


def test_continue_final_message_continues_the_assistants_start_as_vllm_does(client):
    start = "The capital of France is"
    r = client.chat.completions.create(
        model=MODEL, messages=[*FRANCE, {"role": "assistant", "content": start}], max_tokens=3, temperature=0,
        extra_body={"continue_final_message": True, "add_generation_prompt": False})
    assert "Paris" in r.choices[0].message.content and not r.choices[0].message.content.startswith(start)
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=MODEL, messages=FRANCE, max_tokens=3,
                                       extra_body={"continue_final_message": True})
    assert info.value.body["param"] == "continue_final_message"


def test_a_prompt_too_long_is_a_400_unless_truncate_prompt_tokens_asks_to_cut_it(client):
    long = "word " * 9000  # more than the default model's 8,192-token context
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model=MODEL, prompt=long, max_tokens=2)
    assert info.value.body["code"] == "context_length_exceeded" and info.value.body["param"] == "prompt"
    cut = client.completions.create(model=MODEL, prompt=long, max_tokens=2, extra_body={"truncate_prompt_tokens": 50})
    assert cut.usage.prompt_tokens == 50
    chat = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": long}], max_tokens=2,
                                          extra_body={"truncate_prompt_tokens": 30})
    assert chat.usage.prompt_tokens == 30
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model=MODEL, prompt="Hi", max_tokens=2, extra_body={"truncate_prompt_tokens": 0})
    assert info.value.body["param"] == "truncate_prompt_tokens"


# -- tool calling --------------------------------------------------------------------------------------------------

WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "The current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 24}},
                   "required": ["city"], "additionalProperties": False}}}
ASK_WEATHER = [{"role": "user", "content": "What is the weather in Paris?"}]


def test_a_required_tool_call_comes_back_with_an_id_and_arguments_that_fit(client):
    r = client.chat.completions.create(model=MODEL, messages=ASK_WEATHER, tools=[WEATHER_TOOL], tool_choice="required",
                                       parallel_tool_calls=False, temperature=0, max_tokens=60)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls" and len(choice.message.tool_calls) == 1
    call = choice.message.tool_calls[0]
    assert call.id.startswith("call_") and call.type == "function" and call.function.name == "get_weather"
    assert set(json.loads(call.function.arguments)) == {"city"}


def test_a_named_tool_call_streams_as_openai_streams_it_and_the_result_goes_back(client):
    stream = client.chat.completions.create(
        model=MODEL, messages=ASK_WEATHER, tools=[WEATHER_TOOL], temperature=0, max_tokens=60, stream=True,
        tool_choice={"type": "function", "function": {"name": "get_weather"}}, parallel_tool_calls=False)
    calls, finish, pieces = {}, None, 0
    for chunk in stream:
        for choice in chunk.choices:
            for delta in choice.delta.tool_calls or []:
                pieces += bool(delta.function.arguments)
                call = calls.setdefault(delta.index, {"id": None, "name": None, "arguments": ""})
                call["id"] = call["id"] or delta.id
                if delta.function.name:
                    call["name"] = delta.function.name
                call["arguments"] += delta.function.arguments or ""
            finish = choice.finish_reason or finish
    assert finish == "tool_calls" and len(calls) == 1
    assert pieces > 2  # the arguments arrive piece by piece as they are generated
    call = calls[0]
    assert call["name"] == "get_weather" and call["id"].startswith("call_") and "city" in json.loads(call["arguments"])
    history = ASK_WEATHER + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": call["id"], "type": "function", "function": {"name": "get_weather", "arguments": call["arguments"]}}]},
        {"role": "tool", "tool_call_id": call["id"], "content": "Sunny, 24 degrees."}]
    r = client.chat.completions.create(model=MODEL, messages=history, tools=[WEATHER_TOOL], tool_choice="none",
                                       temperature=0, max_tokens=12)
    assert r.choices[0].message.content and not r.choices[0].message.tool_calls


def test_auto_gives_either_text_or_calls_and_a_bad_choice_is_a_400(client):
    r = client.chat.completions.create(model=MODEL, messages=ASK_WEATHER, tools=[WEATHER_TOOL], temperature=0,
                                       max_tokens=40)
    message = r.choices[0].message
    assert (message.tool_calls and r.choices[0].finish_reason == "tool_calls") or message.content
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=MODEL, messages=ASK_WEATHER, tools=[WEATHER_TOOL], max_tokens=5,
                                       tool_choice={"type": "function", "function": {"name": "get_time"}})
    assert info.value.body["param"] == "tool_choice" and "get_time" in info.value.body["message"]
