"""Structured output as a step of the pipeline: every token fits the grammar, beside free requests in one batch,
compiled once per grammar, on the transformers and llama.cpp loaders."""

from __future__ import annotations

import json
import re

import pytest

from webui.engine import GenerationRequest, InvalidParameter, SamplingParams
from tests.conftest import ROOT
from webui.engine.structured import _compiled


def constrained(form: dict, n: int = 24, **kw) -> SamplingParams:
    return SamplingParams(temperature=1.0, seed=3, max_new_tokens=n, structured_outputs=form, **kw)


def test_each_form_holds_on_a_random_model_in_one_batch_with_free_requests(tiny_engine):
    forms = {
        "regex": ({"regex": "[0-9]{3}-[a-z]{2}"}, lambda t: re.fullmatch("[0-9]{3}-[a-z]{2}", t)),
        "choice": ({"choice": ["red", "green", "blue"]}, lambda t: t in ("red", "green", "blue")),
        "gbnf": ({"grammar": 'root ::= "yes" | "no" | "maybe"'}, lambda t: t in ("yes", "no", "maybe")),
        "lark": ({"grammar": 'start: "(" NUM ")"\nNUM: /[0-9]/'}, lambda t: re.fullmatch(r"\([0-9]\)", t)),
    }
    streams = {name: tiny_engine.submit(GenerationRequest("Once upon a time", constrained(form)))
               for name, (form, _) in forms.items()}
    free = tiny_engine.submit(GenerationRequest("Once upon a time", SamplingParams(
        temperature=1.0, seed=3, max_new_tokens=8, ban_eos=True)))
    for name, stream in streams.items():
        result = stream.result()
        assert forms[name][1](result.text), (name, result.text)
        assert result.finish_reason == "stop", name  # the grammar ended and only end-of-sequence was left
    assert free.result().usage.completion_tokens == 8


def test_greedy_constrained_output_of_the_real_model_is_valid_json(real_engine):
    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                               "population": {"type": "integer", "minimum": 0,
                                                              "maximum": 99999999}},
              "required": ["city", "population"], "additionalProperties": False}
    prompt = ("<|im_start|>user\nThe largest city of France, as JSON.<|im_end|>\n<|im_start|>assistant\n")
    result = real_engine.generate(GenerationRequest(prompt, SamplingParams(
        temperature=0, max_new_tokens=60, structured_outputs={"json": schema}), add_special_tokens=False))
    data = json.loads(result.text)
    assert set(data) == {"city", "population"} and isinstance(data["population"], int)
    assert list(data) == ["city", "population"]  # in the schema's order


def test_a_grammar_is_compiled_once_for_many_sequences(tiny_engine):
    _compiled.cache_clear()
    form = {"regex": "[a-c]{4}"}
    streams = [tiny_engine.submit(GenerationRequest(f"Prompt {i}", constrained(form))) for i in range(6)]
    assert all(re.fullmatch("[a-c]{4}", s.result().text) for s in streams)
    info = _compiled.cache_info()
    assert info.misses == 1 and info.hits == 5


def test_a_loader_without_a_grammar_tokenizer_is_refused_at_once(tiny_model):
    from tests.engine.scripted import ScriptedModel
    from webui.engine import Engine

    class Plain:  # a tokenizer that offers no vocabulary to constrain
        eos_token_ids = frozenset({2})

        def encode(self, text, add_special_tokens=True):
            return [5, 6]

    engine = Engine(ScriptedModel(Plain(), []))
    try:
        with pytest.raises(InvalidParameter, match="cannot constrain output") as info:
            engine.submit(GenerationRequest("x", constrained({"regex": "a"})))
        assert info.value.param == "structured_outputs"
    finally:
        engine.close()


def test_a_finished_grammar_ends_the_reply_even_with_ban_eos(tiny_engine):
    result = tiny_engine.generate(GenerationRequest("Once", constrained({"choice": ["yes", "no"]}, ban_eos=True)))
    assert result.text in ("yes", "no") and result.finish_reason == "stop" and result.usage.completion_tokens <= 3


GBNF = sorted((ROOT / "tests" / "data" / "gbnf").glob("*.gbnf"))


@pytest.mark.parametrize("path", GBNF, ids=[p.stem for p in GBNF])
def test_gbnf_files_people_have_constrain_every_token(tiny_engine, tiny_model, path):
    """text-generation-webui's own grammar files: each token a random model draws is one the grammar accepts
    (llguidance checks the whole sequence again), and a reply that ended did so where the grammar may end."""
    import llguidance as llg

    from webui.engine.structured import grammar_of

    form = {"grammar": path.read_text()}
    result = tiny_engine.generate(GenerationRequest("Once upon a time", constrained(form, n=24, min_new_tokens=4)))
    tokens = [t for t in result.token_ids if t not in tiny_model.tokenizer.eos_token_ids]
    matcher = llg.LLMatcher(tiny_model.tokenizer.guidance_tokenizer(), grammar_of("grammar", form["grammar"]))
    assert tokens and matcher.validate_tokens(tokens) == len(tokens), result.text
    if result.finish_reason == "stop":
        matcher.consume_tokens(tokens)
        assert matcher.is_accepting(), result.text
