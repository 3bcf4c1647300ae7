"""The real default model (SmolLM2-135M-Instruct) through the engine: short, real answers."""

from __future__ import annotations

import pytest
import torch

from webui.engine import GenerationRequest, SamplingParams

pytestmark = pytest.mark.real_model


def chat_prompt(model, question: str) -> str:
    return model.tokenizer.apply_chat_template([{"role": "user", "content": question}])


def test_capital_of_france_is_paris(real_engine, real_model):
    result = real_engine.generate(GenerationRequest(
        chat_prompt(real_model, "What is the capital of France?"),
        SamplingParams(temperature=0, max_new_tokens=12), add_special_tokens=False))
    assert "Paris" in result.text


@pytest.mark.parametrize("question", ["What is the capital of France?", "Write a haiku about rain.",
                                      "List three prime numbers."])
def test_engine_greedy_tokens_equal_model_generate(real_engine, real_model, question):
    ids = real_model.tokenizer.encode(chat_prompt(real_model, question), add_special_tokens=False)
    n = 16
    ours = real_engine.generate(GenerationRequest(ids, SamplingParams(temperature=0, max_new_tokens=n))).token_ids
    with torch.inference_mode():
        out = real_model.model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                        max_new_tokens=n, do_sample=False)
    assert ours == out[0, len(ids):].tolist()


def test_stop_string_on_real_output(real_engine, real_model):
    prompt = chat_prompt(real_model, "What is the capital of France?")
    full = real_engine.generate(GenerationRequest(prompt, SamplingParams(temperature=0, max_new_tokens=12),
                                                  add_special_tokens=False))
    assert " is " in full.text
    cut = real_engine.generate(GenerationRequest(prompt, SamplingParams(temperature=0, max_new_tokens=12, stop=[" is "]),
                                                 add_special_tokens=False))
    assert cut.text == full.text.split(" is ")[0] and cut.stop_string == " is "
