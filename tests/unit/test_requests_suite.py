"""Kept API requests as a promptfoo suite (webui/api/suite.py, #33): read back by our promptfoo reader, each
request one prompt with its parameters; what cannot be carried is named."""

from __future__ import annotations

import pytest
import yaml

from webui.api.suite import promptfoo_suite
from webui.batch.promptfoo import read_config
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
    assert suite.notes == ["chatcmpl-1: tools not carried (a promptfoo prompt's config takes sampling parameters)",
                           "chatcmpl-3: left out (refused with status 422, so no model read it)",
                           "emb-4: left out (/v1/embeddings is not a chat or completion request)"]
    providers = yaml.safe_load(suite.text)["providers"]
    assert [(p["label"], p["prompts"], p["config"]) for p in providers] == [
        ("SmolLM2-135M-Instruct", ["chatcmpl-1"], {"seed": 1}), ("other", ["chatcmpl-2"], {"seed": 2})]
    _, rows, settings = read_config(suite.text, tmp_path)
    assert [(r.id, r.settings) for r in rows] == [("test 1 · chatcmpl-1", ("SmolLM2-135M-Instruct",)),
                                                  ("test 1 · chatcmpl-2", ("other",))]


def test_nothing_to_export_says_why():
    with pytest.raises(ValueError, match="refused with status 400"):
        promptfoo_suite([kept("chatcmpl-1", {"messages": CHAT}, status=400)])
