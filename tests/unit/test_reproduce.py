"""Reproduce records: JSON round trip, the equivalent API request, snippets that are valid code, bad records."""

from __future__ import annotations

import hashlib
import json
from types import SimpleNamespace
import shlex

import pytest

from webui.chat.modes import ChatMode
from webui.engine import SamplingParams
from webui.reproduce import RecordError, ReproduceRecord, parse_record


def record(**kw) -> ReproduceRecord:
    params = SamplingParams(temperature=0.7, top_k=40, seed=123, stop=("\n\n",), max_new_tokens=20)
    return ReproduceRecord("SmolLM2-135M-Instruct", params, [{"role": "user", "content": "Hi 'there'"}], **kw)


def test_json_round_trip():
    r = record(loras=(("secret", 1.0),))
    assert parse_record(r.to_json()) == r


def test_the_api_request_carries_every_setting():
    route, body = record(loras=(("secret", 0.5), ("other", 1.0))).api_body()
    assert route == "/chat/completions" and body["model"] == "SmolLM2-135M-Instruct"
    assert body["loras"] == [["secret", 0.5], ["other", 1.0]]  # every adapter at the record's own weight
    assert (body["temperature"], body["top_k"], body["seed"], body["stop"], body["max_tokens"]) == (
        0.7, 40, 123, ["\n\n"], 20)
    raw = ReproduceRecord("m", SamplingParams(temperature=0), prompt="Once")
    assert raw.api_body() == ("/completions", {"model": "m", "temperature": 0.0, "top_p": 1.0, "max_tokens": 512,
                                               "presence_penalty": 0.0, "frequency_penalty": 0.0, "prompt": "Once"})


def test_snippets_are_valid_code():
    r = record()
    compile(r.openai_snippet(), "<snippet>", "exec")
    words = shlex.split(r.curl())
    assert words[0] == "curl" and json.loads(words[-1])["messages"][0]["content"] == "Hi 'there'"
    assert "extra_body={'top_k': 40}" in r.openai_snippet()


@pytest.mark.parametrize("text,message", [
    ("{", "not valid JSON"),
    ('{"format": "other"}', "not a workbench record"),
    ('{"format": "llm-workbench.record", "model": "m"}', "needs 'model'"),
    ('{"format": "llm-workbench.record", "model": "m", "params": {}}', "either 'messages'"),
    ('{"format": "llm-workbench.record", "model": "m", "params": {"top_p": 3}, "prompt": "x"}', "top_p must be in"),
])
def test_bad_records_say_what_is_wrong(text, message):
    with pytest.raises(RecordError, match=message):
        parse_record(text)


def test_a_record_keeps_the_load_options_and_refuses_a_malformed_one():
    made = parse_record(record(loader="llamacpp", load_options={"n_ctx": 4096, "cache_type": "q8_0"}).to_json())
    assert made.loader == "llamacpp" and made.load_options == {"n_ctx": 4096, "cache_type": "q8_0"}
    bad = json.loads(record().to_json())
    bad["load_options"] = ["n_ctx=4096"]
    with pytest.raises(RecordError, match="'load_options' must be an object"):
        parse_record(json.dumps(bad))


def test_a_record_says_which_draw_picked_its_sampled_tokens():
    """Records made before the batched sampling stage have no 'draw': their seeds picked tokens by another draw,
    which a re-run says; greedy records repeat whatever the draw. The response cache keeps sampled cells apart
    by draw too."""
    from webui.batch.run.cache import cache_key
    from webui.engine.sampling import DRAW

    now = parse_record(record().to_json())
    assert now.draw == DRAW and not now.other_draw
    old = json.loads(record().to_json())
    del old["draw"]
    assert parse_record(json.dumps(old)).other_draw
    greedy = json.loads(ReproduceRecord("m", SamplingParams(temperature=0), prompt="x").to_json())
    del greedy["draw"]
    assert not parse_record(json.dumps(greedy)).other_draw
    old["draw"] = "new"
    with pytest.raises(RecordError, match="'draw' must be a whole number"):
        parse_record(json.dumps(old))
    def key_before(params):  # the response cache's key without the draw in it
        request = {"model": "m", "loader": "t", "device": "cpu", "dtype": "float32", "load_options": {}, "loras": [],
                   "prompt": "p", "raw": False, "params": params}
        return hashlib.sha256(json.dumps(request, sort_keys=True, ensure_ascii=False).encode()).hexdigest()

    model = SimpleNamespace(name="m", loader="t", device="cpu", dtype="float32", load_options={})
    sampled, plain = SamplingParams(temperature=0.7, seed=1).to_dict(), SamplingParams(temperature=0).to_dict()
    assert cache_key(model, [], "p", False, sampled) != key_before(sampled)  # not served from the old draw
    assert cache_key(model, [], "p", False, plain) == key_before(plain)  # greedy cells made before stay cached


CHAT_MODE = {"mode": "chat-instruct", "character": {"name": "Ann", "greeting": "Hi {{user}}",
                                                    "context": "{{char}} is a pirate.", "user_name": "Zed",
                                                    "user_bio": ""},
             "command": "Be {{char}}.\n<|prompt|>"}


def test_a_record_keeps_the_chat_mode_and_the_character_by_content():
    r = record(chat_mode=ChatMode.from_record(CHAT_MODE))
    assert parse_record(r.to_json()) == r
    assert '"chat_mode"' not in record().to_json()  # instruct records are written as they always were
    assert parse_record(record().to_json()).chat_mode is None
    route, body = r.api_body()
    assert body["mode"] == "chat-instruct" and body["character"]["context"] == "{{char}} is a pirate."
    assert body["chat_instruct_command"] == "Be {{char}}.\n<|prompt|>" and "user_name" not in body
    assert "extra_body" in r.openai_snippet() and "'mode': 'chat-instruct'" in r.openai_snippet()
    tokenizer = SimpleNamespace(chat_template=None, encode=lambda text, add_special_tokens=False: [1])
    chat_mode = ChatMode.from_record({"mode": "chat", "character": CHAT_MODE["character"]})
    chat = parse_record(record(chat_mode=chat_mode).to_json())
    assert chat.request(tokenizer).prompt == "Ann is a pirate.\n\nZed: Hi 'there'\nAnn:"


def test_a_record_with_a_bad_chat_mode_says_what_is_wrong():
    for bad, message in (({"mode": "rp"}, "chat_mode: mode must be one of"),
                         ({"mode": "chat", "character": {"greeting": "x"}}, 'chat_mode: chat_mode.character: a '
                                                                            'character must be an object'),
                         ("chat", "chat_mode must be an object")):
        data = json.loads(record().to_json())
        with pytest.raises(RecordError, match=message):
            parse_record(json.dumps({**data, "chat_mode": bad}))


def test_a_records_adapters_and_given_start_are_typed_and_written_as_records_always_were():
    from webui.chat.reply import GivenStart

    written = json.loads(record().to_json())  # a record as JSON, with adapters and a given start of tokens
    written.update(loras=[["style", 0.5]], continue_from={"token_ids": [5, 6], "text": "Once"})
    r = parse_record(json.dumps(written))
    assert r.loras == (("style", 0.5),) and r.continue_from == GivenStart("Once", (5, 6))
    assert json.loads(r.to_json()) == written  # the same JSON back
    tokens = SimpleNamespace(encode=lambda text, add_special_tokens: [1, 2], decode=lambda ids: f"<{ids}>")
    assert r.reply(tokens, [7], "x") == "<[5, 6, 7]>"
    text_only = parse_record(json.dumps({**written, "continue_from": {"text": "Once"}}))
    assert text_only.continue_from == GivenStart("Once") and text_only.api_body()[1]["messages"][-1] == {
        "role": "assistant", "content": "Once"}
    assert parse_record(json.dumps({**written, "continue_from": None, "loras": None})).loras == ()
    for bad, message in (({"loras": [["style"]]}, r"'loras' must be a list of \[adapter name, weight\] pairs"),
                         ({"continue_from": {"token_ids": [-1]}}, r"continue_from must be \{\"token_ids\"")):
        with pytest.raises(RecordError, match=message):
            parse_record(json.dumps({**written, **bad}))


OLDEST = {  # a record as the first version wrote it (2634619): 15 sampling fields, no draw, loras as lists
    "format": "llm-workbench.record", "version": 1, "model": "SmolLM2-135M-Instruct",
    "params": {"temperature": 0.7, "top_p": 0.9, "top_k": 40, "min_p": 0.0, "typical_p": 1.0,
               "repetition_penalty": 1.1, "presence_penalty": 0.0, "frequency_penalty": 0.0,
               "no_repeat_ngram_size": 0, "max_new_tokens": 20, "min_new_tokens": 0, "stop": ["\n\n"], "seed": 123,
               "ban_eos": False, "logit_bias": {"7": -100.0}},
    "messages": [{"role": "user", "content": "Hi"}], "prompt": None, "loader": "transformers", "loras": []}


def test_a_records_params_are_sampling_params_read_once_and_written_as_records_always_were():
    r = parse_record(json.dumps(OLDEST))
    assert isinstance(r.params, SamplingParams)  # typed, not a dict re-read on each use
    assert r.params == SamplingParams(temperature=0.7, top_p=0.9, top_k=40, repetition_penalty=1.1,
                                      max_new_tokens=20, stop=("\n\n",), seed=123, logit_bias={7: -100.0})
    written = json.loads(r.to_json())["params"]  # every field now, the fields an old record left out neutral
    assert written == r.params.to_dict() and {k: written[k] for k in OLDEST["params"]} == OLDEST["params"]
    assert parse_record(r.to_json()) == r
    _, body = r.api_body()
    assert (body["temperature"], body["top_p"], body["seed"], body["logit_bias"]) == (0.7, 0.9, 123, {"7": -100.0})
    for bad, message in (({"top_k": "many"}, "top_k must be an integer"),
                         ({"nucleus": 0.5}, "unknown sampling parameter 'nucleus' in the record")):
        with pytest.raises(RecordError, match=message):
            parse_record(json.dumps({**OLDEST, "params": {**OLDEST["params"], **bad}}))
