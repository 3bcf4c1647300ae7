"""The proof on the real default model: sampled at temperature 1.0, constrained output always fits.

100 samples against a JSON schema (a string, an integer in a range, an enum and an array) all parse and
validate; a regex and a choice hold for every sample; llama.cpp's own json.gbnf (tests/data/gbnf, source
named) gives JSON that Python's parser accepts. Each test's samples run as one engine batch (the engine's steps
cost about the same for 16 sequences as for 100, so 100 in one batch take a fraction of 100 in waves of 16).
"""

from __future__ import annotations

import json
import re

import jsonschema
import pytest

from tests.conftest import ROOT
from webui.engine import Engine, EngineConfig, GenerationRequest, SamplingParams

pytestmark = pytest.mark.real_model

SCHEMA = {"type": "object", "additionalProperties": False, "required": ["name", "age", "role", "skills"],
          "properties": {"name": {"type": "string", "minLength": 1, "maxLength": 16},
                         "age": {"type": "integer", "minimum": 18, "maximum": 99},
                         "role": {"enum": ["engineer", "artist", "teacher", "farmer"]},
                         "skills": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 3}}}


@pytest.fixture(scope="module")
def wide_engine(real_model):
    """The default model's engine with room for every sample of a test in one batch."""
    engine = Engine(real_model, EngineConfig(max_running=100))
    yield engine
    engine.close()


def chat(model, text: str) -> list[int]:
    rendered = model.tokenizer.apply_chat_template([{"role": "user", "content": text}])
    return model.tokenizer.encode(rendered, add_special_tokens=False)


def sample(engine, prompt: list[int], form: dict, n: int, max_tokens: int) -> list:
    params = SamplingParams(temperature=1.0, max_new_tokens=max_tokens, structured_outputs=form)
    streams = [engine.submit(GenerationRequest(prompt, params.replace(seed=i))) for i in range(n)]
    return [s.result() for s in streams]


def test_100_samples_of_a_json_schema_all_parse_and_validate(wide_engine, real_model):
    prompt = chat(real_model, "Describe a person as JSON with name, age, role and skills.")
    results = sample(wide_engine, prompt, {"json": SCHEMA}, 100, 160)
    for r in results:
        assert r.finish_reason == "stop", r.text
        jsonschema.validate(json.loads(r.text), SCHEMA)
    assert len({r.text for r in results}) > 20  # sampled, not one answer repeated


def test_a_regex_and_a_choice_hold_for_every_sample(wide_engine, real_model):
    dates = sample(wide_engine, chat(real_model, "When was the Eiffel Tower built?"),
                   {"regex": r"[12][0-9]{3}-(0[1-9]|1[0-2])-[0-3][0-9]"}, 32, 16)
    assert all(re.fullmatch(r"[12][0-9]{3}-(0[1-9]|1[0-2])-[0-3][0-9]", r.text) for r in dates)
    colours = sample(wide_engine, chat(real_model, "Name a colour."), {"choice": ["red", "green", "blue"]}, 32, 8)
    assert {r.text for r in colours} <= {"red", "green", "blue"} and len({r.text for r in colours}) > 1


def test_llama_cpps_json_grammar_gives_json_python_accepts(wide_engine, real_model):
    grammar = (ROOT / "tests" / "data" / "gbnf" / "llama.cpp-json.gbnf").read_text()
    results = sample(wide_engine, chat(real_model, "Give a small JSON object about a cat."), {"grammar": grammar},
                     16, 120)
    finished = [r for r in results if r.finish_reason == "stop"]
    assert len(finished) >= 8, [r.text for r in results]
    for r in finished:
        assert isinstance(json.loads(r.text), dict), r.text
    for r in results:  # a reply cut by max_tokens is still the start of valid JSON
        assert r.text.lstrip().startswith("{")
