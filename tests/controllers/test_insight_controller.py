"""InsightController without a browser: prompt tokens, next tokens, re-running a record, perplexity."""

from __future__ import annotations

import re

import pytest

from webui.controllers import UserError
from webui.controllers.insight import InsightController, shown_token
from webui.engine import SamplingParams
from webui.reproduce import ReproduceRecord


@pytest.fixture
def controller(services):
    return InsightController(services)


def test_prompt_and_next_tokens(controller):
    seen = controller.inspect("Hello there", True, "Be brief.")
    assert "Hello there" in seen.text and "<|im_start|>assistant" in seen.text and len(seen.ids) > 3
    found = controller.next_tokens("The capital of France is", False, "", SamplingParams(top_k=5))
    assert len(found.tokens) == 20 and sum(t.kept for t in found.tokens) == 5
    assert found.summary.startswith("Top token `") and "cut 15 of these 20" in found.summary
    assert found.summary.endswith("Shaped by, in order: `top_k`.")
    reordered = SamplingParams(temperature=0.5, min_p=0.2, top_k=5, sampler_priority=["min_p", "top_k", "temperature"])
    assert controller.next_tokens("The capital of France is", False, "", reordered).steps == [
        "min_p", "top_k", "temperature"]
    guided = controller.next_tokens("The capital of France is", False, "",
                                    SamplingParams(guidance_scale=2.0, negative_prompt="The capital of Spain is"))
    assert guided.steps == ["cfg"] and [t.after for t in guided.tokens] != [t.probability for t in guided.tokens]
    assert "**" not in found.summary.split("(")[0]  # a token with a leading space is not put in bold
    assert len(found.rows()[0]) == 5
    assert shown_token(" Paris\n") == "␣Paris↵"


def test_mistakes_are_user_errors(controller, services):
    with pytest.raises(UserError, match="empty"):
        controller.next_tokens("", False, "", SamplingParams())
    with pytest.raises(UserError, match="not valid JSON"):
        controller.rerun("{")
    services.models.unload()
    with pytest.raises(UserError, match="no model is loaded"):
        controller.inspect("x", False, "")


def test_a_record_reruns_to_the_same_text(controller, services):
    params = SamplingParams(temperature=0, max_new_tokens=5, ban_eos=True)
    record = ReproduceRecord("tiny", params, prompt="Once upon a time")
    text, note = controller.rerun(record.to_json())
    again, _ = controller.rerun(record.to_json())
    assert text == again and "5 tokens" in note and "made with" not in note
    other = ReproduceRecord("another-model", params, prompt="Once upon a time")
    assert "made with **another-model**" in controller.rerun(other.to_json())[1]


def test_perplexity_is_stored_for_comparison(controller):
    note = controller.perplexity("The cat sat on the mat. The dog sat on the log.", 16)
    assert note.startswith("**Perplexity ")
    rows = controller.perplexity_rows()
    assert len(rows) == 1 and rows[0][0] == "tiny" and rows[0][5] == 16


def test_the_next_tokens_the_output_constraint_masks_are_named(controller):
    params = SamplingParams(structured_outputs={"regex": "[a-z ]+"})
    found = controller.next_tokens("Once upon a time", False, "", params)
    assert [t.masked for t in found.tokens] == [re.fullmatch("[a-z ]+", t.token) is None for t in found.tokens]
    assert all(t.after == 0 for t in found.tokens if t.masked)
    masked = sum(t.masked for t in found.tokens)
    assert 0 < masked < 20 and f"({masked} masked by the output constraint)" in found.summary
    assert {row[4] for row in found.rows()} == {"masked by the constraint", "kept"}
    assert found.steps == ["structured_outputs"]


def test_the_prompt_inspector_shows_a_chat_modes_prompt(controller, services):
    from webui.chat.characters import Character

    services.characters.create(Character("Ann", "Ahoy!", "{{char}} is a pirate.", "Zed"))
    chat = controller.inspect("Where to?", True, "", "chat", "Ann")
    assert chat.text == "Ann is a pirate.\n\nZed: Where to?\nAnn:"
    both = controller.inspect("Where to?", True, "", "chat-instruct", "Ann")
    assert 'for the character "Ann"' in both.text and both.text.endswith("<|im_start|>assistant\nAnn:")
    with pytest.raises(UserError, match="no character 'Bob'"):
        controller.inspect("Hi", True, "", "chat", "Bob")
    with pytest.raises(UserError, match="mode must be one of"):
        controller.inspect("Hi", True, "", "novel")
