"""Kept API requests as a promptfoo suite (webui/api/suite.py, #33): read back by our promptfoo reader, each
request one prompt with its parameters; what cannot be carried is named."""

from __future__ import annotations

import pytest
import yaml

from webui.api.suite import promptfoo_suite
from webui.batch.promptfoo.reader import read_config
from webui.store.requests import CapturedRequest

CHAT = [{"role": "system", "content": "Answer in one word."}, {"role": "user", "content": "Capital of France?"}]


def kept(request_id: str, body: dict, endpoint: str = "/v1/chat/completions", status: int = 200,
         model: str = "SmolLM2-135M-Instruct") -> CapturedRequest:
    return CapturedRequest(request_id, 0.0, endpoint, status, "key 1", body, {}, model)


def test_requests_become_prompts_with_their_parameters_and_read_back(tmp_path):
    items = [kept("chatcmpl-1", {"model": "m", "messages": CHAT, "temperature": 0.7, "max_tokens": 12, "seed": 5,
                                 "stop": ["\n"], "stream": True}),
             kept("cmpl-2", {"model": "m", "prompt": "Once upon a time", "max_tokens": 8, "seed": 5},
                  endpoint="/v1/completions")]
    suite = promptfoo_suite(items)
    assert suite.prompts == 2 and suite.notes == []
    data = yaml.safe_load(suite.text)
    assert data["providers"] == [{"id": "workbench:SmolLM2-135M-Instruct", "label": "SmolLM2-135M-Instruct",
                                  "config": {"seed": 5}}]
    assert data["prompts"][0]["config"] == {"temperature": 0.7, "max_tokens": 12, "stop": ["\n"]}
    _, rows, settings = read_config(suite.text, tmp_path)
    assert [r.messages for r in rows] == [tuple(CHAT), None] and rows[1].text == "Once upon a time"
    assert [r.id for r in rows] == ["test 1 · chatcmpl-1", "test 1 · cmpl-2"]
    assert rows[0].params == {"temperature": 0.7, "max_tokens": 12, "stop": ["\n"]}
    assert settings[0].model == "SmolLM2-135M-Instruct" and settings[0].params.seed == 5


def test_what_a_prompt_cannot_carry_and_requests_no_model_read_are_named(tmp_path):
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    items = [kept("chatcmpl-1", {"messages": CHAT, "tools": tools, "seed": 1}),
             kept("chatcmpl-2", {"messages": CHAT, "seed": 2}, model="other"),
             kept("chatcmpl-3", {"messages": "nope"}, status=422),
             kept("emb-4", {"input": "x"}, endpoint="/v1/embeddings")]
    suite = promptfoo_suite(items)
    assert suite.prompts == 2
    assert suite.notes == ["chatcmpl-3: left out (refused with status 422, so no model read it)",
                           "emb-4: left out (/v1/embeddings is not a chat or completion request)"]
    providers = yaml.safe_load(suite.text)["providers"]
    assert [(p["label"], p["prompts"], p["config"]) for p in providers] == [
        ("SmolLM2-135M-Instruct", ["chatcmpl-1"], {"seed": 1, "tools": tools}), ("other", ["chatcmpl-2"], {"seed": 2})]
    _, rows, settings = read_config(suite.text, tmp_path)
    assert [(r.id, r.settings) for r in rows] == [("test 1 · chatcmpl-1", ("SmolLM2-135M-Instruct",)),
                                                  ("test 1 · chatcmpl-2", ("other",))]


def test_a_replay_keeps_its_seed_tools_and_every_parameter_and_reads_back(tmp_path):
    """#46 item 10: a replay sent with seed 3 beside its original without one, a request with tools, stop,
    response_format, top_p and max_completion_tokens: each is sent again as it was (its own provider where its seed
    or tools differ); what no promptfoo config takes (logprobs) is named."""
    tools = [{"type": "function", "function": {"name": "weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
    schema = {"type": "json_schema", "json_schema": {"name": "a", "schema": {"type": "object"}}}
    items = [kept("chatcmpl-1", {"messages": CHAT, "temperature": 0.7}),
             kept("chatcmpl-2", {"messages": CHAT, "temperature": 0.7, "seed": 3}),
             kept("chatcmpl-3", {"messages": CHAT, "tools": tools, "tool_choice": "auto", "seed": 3, "top_p": 0.9,
                                 "stop": ["."], "max_completion_tokens": 9, "logprobs": True}),
             kept("chatcmpl-4", {"messages": CHAT, "response_format": schema, "max_tokens": 7})]
    suite = promptfoo_suite(items)
    assert suite.notes == ["chatcmpl-3: logprobs not carried (neither a promptfoo prompt's config nor its "
                           "provider's takes them)"]
    data = yaml.safe_load(suite.text)
    assert [(p["label"], p.get("config"), p["prompts"]) for p in data["providers"]] == [
        ("SmolLM2-135M-Instruct #1", None, ["chatcmpl-1", "chatcmpl-4"]),
        ("SmolLM2-135M-Instruct #2", {"seed": 3}, ["chatcmpl-2"]),
        ("SmolLM2-135M-Instruct #3", {"seed": 3, "tools": tools, "tool_choice": "auto"}, ["chatcmpl-3"])]
    assert [p.get("config") for p in data["prompts"]] == [
        {"temperature": 0.7}, {"temperature": 0.7}, {"top_p": 0.9, "stop": ["."], "max_tokens": 9},
        {"response_format": schema, "max_tokens": 7}]
    _, rows, settings = read_config(suite.text, tmp_path)
    by_label = {s.label: s for s in settings}
    assert [(r.id.split(" · ")[1], r.settings) for r in rows] == [
        ("chatcmpl-1", ("SmolLM2-135M-Instruct #1",)), ("chatcmpl-2", ("SmolLM2-135M-Instruct #2",)),
        ("chatcmpl-3", ("SmolLM2-135M-Instruct #3",)), ("chatcmpl-4", ("SmolLM2-135M-Instruct #1",))]
    assert by_label["SmolLM2-135M-Instruct #2"].params.seed == 3
    replayed = by_label["SmolLM2-135M-Instruct #3"]
    assert replayed.params.seed == 3 and replayed.prompt is not None and replayed.prompt.tools is not None
    assert rows[2].params == {"top_p": 0.9, "stop": ["."], "max_tokens": 9}
    assert rows[3].params is not None and rows[3].params["max_tokens"] == 7 and rows[3].params["structured_outputs"]


def test_nothing_to_export_says_why():
    with pytest.raises(ValueError, match="refused with status 400"):
        promptfoo_suite([kept("chatcmpl-1", {"messages": CHAT}, status=400)])
