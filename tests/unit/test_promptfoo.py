"""promptfoo configs read into a batch (prompts x tests, asserts, providers as settings), and results written
in promptfoo's output shape."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import ROOT
from webui.batch import BatchInputError
from webui.batch.promptfoo import load_config, read_config, to_promptfoo
from webui.batch.results import ResultRow

SUITE = ROOT / "tests" / "data" / "promptfoo" / "promptfooconfig.yaml"


def test_the_suite_becomes_prompts_times_tests_and_providers_become_settings():
    description, rows, settings = load_config(SUITE)
    assert description == "Capitals" and len(rows) == 4  # 2 tests x 2 prompts
    assert rows[0].text == "What is the capital of France? Answer with the city only."
    assert rows[1].text == "Name the capital city of France." and rows[1].id == "France · prompt.txt"
    assert [a.label for a in rows[0].asserts] == ["not-is-json", "latency:600000", "icontains:paris",
                                                  "similar:Paris"]
    assert rows[0].asserts[2].weight == 2 and rows[0].asserts[3].threshold == 0.1
    japan = rows[2].asserts
    assert japan[2].label == "contains-any:Tokyo,tokyo,TOKYO" and japan[3].kind == "python"
    assert Path(str(japan[3].value)).is_file()
    assert [s.label for s in settings] == ["greedy", "warm"]
    assert settings[0].params.greedy and settings[0].params.max_new_tokens == 8
    assert settings[1].params.temperature == 0.7 and settings[1].params.seed == 3


@pytest.mark.parametrize("config, said", [
    ("prompts: ['{{q}}']\ntests:\n  - vars: {q: hi}\n    assert:\n      - type: javascript\n        value: 'true'",
     "the assert type 'javascript' is not supported here"),
    ("prompts: ['{{q}}']\ntests:\n  - vars: {q: hi}\n    assert:\n      - type: perplexity\n        threshold: 1",
     "'perplexity' is not supported"),
    ("prompts: ['{{q}}']\ntests:\n  - vars: {other: hi}", "the template uses {{q}}, but the row has no 'q'"),
    ("tests: []", "prompts is missing"),
    ("prompts: ['x']\nproviders:\n  - id: a\n    config: {temperature: 9}", "temperature must be in"),
    ("prompts: ['x']\nproviders:\n  - id: a\n    config: {mystery: 1}", "unknown setting(s) mystery"),
    ("prompts: ['{{q}}']\ntests:\n  - vars: {q: hi}\n    assert:\n      - type: python\n        value: len(output)",
     "inline Python is not supported"),
    ("prompts: [x\n", "not valid YAML"),
    ("prompts: ['x']\nproviders: ['workbench:']", "workbench: needs a model name"),
    ("promts: ['x']", "unknown key(s) promts"),
])
def test_what_cannot_run_is_named(config, said, tmp_path):
    with pytest.raises(BatchInputError, match=said.replace("(", r"\(").replace(")", r"\)")
                       .replace("{", r"\{").replace("}", r"\}").replace("[", r"\[")):
        read_config(config, tmp_path)


def test_a_workbench_provider_names_a_loaded_model_and_others_run_on_the_model_in_use(tmp_path):
    config = ("prompts: ['x']\nproviders:\n  - workbench:SmolLM2-135M-Instruct@llamacpp\n"
              "  - id: workbench:tiny\n    label: small\n    config: {temperature: 0}\n  - openai:chat:gpt-4o-mini")
    _, _, settings = read_config(config, tmp_path)
    assert [(s.label, s.model) for s in settings] == [
        ("workbench:SmolLM2-135M-Instruct@llamacpp", "SmolLM2-135M-Instruct@llamacpp"), ("small", "tiny"),
        ("openai:chat:gpt-4o-mini", None)]


def test_results_in_promptfoos_output_shape():
    row = ResultRow(0, "France", "What is the capital of France?", "greedy", {}, 0, 0, "Paris", "stop", 10, 2,
                    ttft=0.1, tokens_per_second=10.0, passed=True, score=1.0)
    data = json.loads(to_promptfoo([row], "Capitals"))
    (result,) = data["results"]["results"]
    assert result["success"] and result["response"]["output"] == "Paris" and result["provider"]["label"] == "greedy"
    assert result["latencyMs"] == 300 and result["gradingResult"]["pass"] and data["results"]["stats"] == {
        "successes": 1, "failures": 0}
