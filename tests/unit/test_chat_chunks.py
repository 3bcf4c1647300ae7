"""The OpenAI stream's chunks without a model or a server: engine events fed to ChatChunker and CompletionChunker
(webui/api/chunks.py), the chunks they give asserted."""

from __future__ import annotations

import json

from webui.api.chunks import ChatChunker, CompletionChunker, StreamHead
from webui.api.serving import Choice
from webui.chat.tools import plan_tools
from webui.engine.types import GenerationEvent, Timings, TokenLogprob, Usage

WEATHER = {"type": "function", "function": {"name": "get_weather",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                           "required": ["city"]}}}
HEAD = StreamHead("chatcmpl-1", 1700000000, "tiny")


def step(text: str, finish: str | None = None, logprobs: list[TokenLogprob] | None = None) -> GenerationEvent:
    return GenerationEvent("r", text, token_ids=[7], logprobs=logprobs or [],
                           finish_reason=finish,  # type: ignore[arg-type]
                           usage=Usage(prompt_tokens=5, cached_tokens=2) if finish else None,
                           timings=Timings(first_token=0.1) if finish else None)


def deltas(chunks: list[dict]) -> list[dict]:
    return [c["choices"][0]["delta"] for c in chunks]


def finishes(chunks: list[dict]) -> list[str | None]:
    return [c["choices"][0]["finish_reason"] for c in chunks]


def test_text_streams_as_content_deltas_after_a_role_chunk_per_choice():
    chunker = ChatChunker(HEAD, 2)
    opening = chunker.opening()
    assert [c["choices"][0]["index"] for c in opening] == [0, 1]
    assert deltas(opening) == [{"role": "assistant", "content": ""}] * 2
    first = opening[0]
    assert (first["id"], first["object"], first["created"], first["model"]) == \
        ("chatcmpl-1", "chat.completion.chunk", 1700000000, "tiny")
    assert "usage" not in first  # no usage asked: no usage field at all
    assert deltas(chunker.feed(1, step("Hi"))) == [{"content": "Hi"}]
    assert chunker.feed(0, step("")) == []  # nothing new: no chunk
    ended = chunker.feed(1, step(" there", "stop"))
    assert deltas(ended) == [{"content": " there"}, {}] and finishes(ended) == [None, "stop"]
    assert [c["choices"][0]["index"] for c in ended] == [1, 1]
    assert finishes(chunker.feed(0, step("", "timeout"))) == ["length"]  # OpenAI has no timeout finish
    assert chunker.closing([Choice(0), Choice(1)]) == []


def test_a_usage_chunk_ends_the_stream_when_asked_and_every_other_chunk_says_usage_null():
    chunker = ChatChunker(StreamHead("chatcmpl-1", 1, "tiny", include_usage=True), 1)
    chunks = chunker.opening() + chunker.feed(0, step("a")) + chunker.feed(0, step("b", "length"))
    assert all(c["usage"] is None for c in chunks)
    choice = Choice(0)
    choice.add(step("a"))
    choice.add(step("b", "length"))
    closing = chunker.closing([choice])
    assert len(closing) == 1 and closing[0]["choices"] == []
    assert closing[0]["usage"] == {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7,
                                   "prompt_tokens_details": {"cached_tokens": 2}}


def test_logprobs_come_with_their_text_only_when_asked():
    lp = [TokenLogprob(7, "é", -0.5, top=[(7, "é", -0.5), (8, "e", -1.5)])]
    with_lp = ChatChunker(HEAD, 1, logprobs=True).feed(0, step("é", logprobs=lp))
    assert with_lp[0]["choices"][0]["logprobs"] == {"content": [{
        "token": "é", "logprob": -0.5, "bytes": [195, 169],
        "top_logprobs": [{"token": "é", "logprob": -0.5, "bytes": [195, 169]},
                         {"token": "e", "logprob": -1.5, "bytes": [101]}]}], "refusal": None}
    # a token whose text is not out yet (half a character) still brings its logprobs
    assert deltas(ChatChunker(HEAD, 1, logprobs=True).feed(0, step("", logprobs=lp))) == [{"content": ""}]
    assert ChatChunker(HEAD, 1).feed(0, step("é", logprobs=lp))[0]["choices"][0]["logprobs"] is None


def test_a_constrained_call_streams_its_id_and_name_then_its_arguments_and_finishes_with_tool_calls():
    chunker = ChatChunker(HEAD, 1, plan_tools([WEATHER], "required", False))
    reply = '<tool_call>{"name": "get_weather", "arguments": {"city": "Rome"}}</tool_call>'
    chunks = [c for i in range(0, len(reply), 5) for c in chunker.feed(0, step(reply[i:i + 5]))]
    chunks += chunker.feed(0, step("", "stop"))
    calls = [d["tool_calls"][0] for d in deltas(chunks[:-1])]
    assert calls[0]["index"] == 0 and calls[0]["id"].startswith("call_") and calls[0]["type"] == "function"
    assert calls[0]["function"] == {"name": "get_weather", "arguments": ""}
    assert all(set(c) == {"index", "function"} and c["index"] == 0 for c in calls[1:])
    assert json.loads("".join(c["function"]["arguments"] for c in calls[1:])) == {"city": "Rome"}
    assert deltas(chunks[-1:]) == [{}] and finishes(chunks) == [None] * (len(chunks) - 1) + ["tool_calls"]


def test_with_tool_choice_auto_text_that_may_be_a_call_is_held_back_until_it_is_known():
    plan = plan_tools([WEATHER], "auto", None)
    chunker = ChatChunker(HEAD, 1, plan)
    assert chunker.feed(0, step("<tool")) == []  # may still be a call
    ended = chunker.feed(0, step('_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>', "stop"))
    start, arguments, finish = deltas(ended)
    assert start["tool_calls"][0]["function"] == {"name": "get_weather", "arguments": ""}
    assert arguments == {"tool_calls": [{"index": 0, "function": {"arguments": '{"city": "Oslo"}'}}]}
    assert finish == {} and finishes(ended)[-1] == "tool_calls"
    # text that cannot be a call streams as it comes; its finish is the engine's
    chunker = ChatChunker(HEAD, 1, plan)
    assert deltas(chunker.feed(0, step("Sunny"))) == [{"content": "Sunny"}]
    assert deltas(chunker.feed(0, step(" today"))) == [{"content": " today"}]
    assert finishes(chunker.feed(0, step("", "length"))) == ["length"]


def test_a_call_cut_by_max_tokens_finishes_with_length():
    chunker = ChatChunker(HEAD, 1, plan_tools([WEATHER], "auto", None))
    assert chunker.feed(0, step('<tool_call>{"name": "get_weather", "arguments": {"ci')) == []
    ended = chunker.feed(0, step("", "length"))
    assert deltas(ended)[0]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert finishes(ended)[-1] == "length"


def test_completion_chunks_open_with_the_echoed_prompt_and_offset_logprobs_past_it():
    head = StreamHead("cmpl-1", 1, "tiny", include_usage=True)
    scored = {"tokens": ["Hi"], "token_logprobs": [None], "top_logprobs": [None], "text_offset": [0]}
    chunker = CompletionChunker(head, 4, 2, ["Hi", ""], [scored, None], logprobs=True)
    opening = chunker.opening()  # the second prompt echoes nothing: its choices open with no chunk
    assert [(c["object"], c["choices"][0]["index"], c["choices"][0]["text"]) for c in opening] == \
        [("text_completion", 0, "Hi"), ("text_completion", 1, "Hi")]
    assert opening[0]["choices"][0]["logprobs"] is scored and opening[0]["usage"] is None
    first = chunker.feed(1, step(" yo", logprobs=[TokenLogprob(3, " yo", -0.25)]))
    assert first[0]["choices"][0]["logprobs"]["text_offset"] == [2]
    second = chunker.feed(1, step("!", "stop", [TokenLogprob(4, "!", -1.0)]))
    assert second[0]["choices"][0]["logprobs"]["text_offset"] == [5]
    assert second[0]["choices"][0]["finish_reason"] == "stop"
    assert chunker.feed(3, step("")) == []
    choices = [Choice(i) for i in range(4)]
    for c in choices:
        c.add(step("x", "stop"))
    assert chunker.closing(choices)[0]["usage"]["prompt_tokens"] == 10  # each of the 2 prompts counted once
