"""promptfoo providers as settings (#32): completion runs raw, config keys mapped to our parameters (OpenAI's,
response_format, Hugging Face's), keys that change nothing named in the notes, the others refused by name."""

from __future__ import annotations

import re

import pytest

from webui.batch.asserts.errors import BatchInputError
from webui.batch.run.grid import plan, GridSpec
from webui.batch.promptfoo.reader import read_suite
from webui.batch.run.runner import BatchJob


def test_completion_runs_raw_and_chat_and_workbench_use_the_template(tmp_path):
    suite = read_suite("prompts: ['Q: {{q}}\\nA:']\ntests: [{vars: {q: hi}}]\nproviders:\n"
                       "  - openai:completion:gpt-3.5-turbo-instruct\n  - openai:chat:gpt-4o\n  - workbench:tiny\n",
                       tmp_path)
    assert [(s.provider, s.raw, s.model) for s in suite.settings] == [
        ("openai:completion:gpt-3.5-turbo-instruct", True, None), ("openai:chat:gpt-4o", False, None),
        ("workbench:tiny", False, "tiny")]
    job = BatchJob("x", suite.rows, GridSpec([], {}), settings=suite.settings)
    again = BatchJob.from_stored("x", job.to_stored(suite.settings))  # a stored run re-runs raw too
    assert [s.raw for s in again.settings or []] == [True, False, False]


def test_config_keys_map_to_our_parameters(tmp_path):
    suite = read_suite("prompts: [x]\nproviders:\n"
                       "  - id: a\n    config: {response_format: {type: json_object}, seed: 7, "
                       "max_completion_tokens: 9}\n"
                       "  - id: b\n    config:\n      response_format:\n        type: json_schema\n"
                       "        json_schema: {name: p, schema: {type: object, properties: {n: {type: integer}}}}\n"
                       "  - id: c\n    config: {max_new_tokens: 12, top_k: 5, repetition_penalty: 1.2, "
                       "do_sample: true}\n"
                       "  - id: d\n    config: {do_sample: false, temperature: 0.9}\n"
                       "  - id: e\n    config: {response_format: {type: text}}\n", tmp_path)
    a, b, c, d, e = (s.params for s in suite.settings)
    assert a.structured_outputs[0] == "json_object" and a.seed == 7 and a.max_new_tokens == 9
    assert b.structured_outputs[0] == "json" and '"integer"' in b.structured_outputs[1]
    assert (c.max_new_tokens, c.top_k, c.repetition_penalty, c.temperature) == (12, 5, 1.2, 1.0)
    assert d.temperature == 0.9  # do_sample false never overrides a temperature written beside it
    assert not e.structured_outputs and suite.notes == []
    cell = plan(suite.rows, suite.settings[:1], 1, 7)[0]
    assert cell.params.structured_outputs == a.structured_outputs


def test_keys_that_change_nothing_are_named_once_in_the_notes(tmp_path):
    suite = read_suite("prompts: [x, y]\nproviders:\n  - id: openai:chat:gpt-4o\n    config:\n      apiKey: sk-1\n"
                       "      apiBaseUrl: http://x\n      organization: org\n      temperature: 0.5\n", tmp_path)
    assert len(suite.notes) == 3
    assert all(n.startswith("providers[0] (openai:chat:gpt-4o).config.") for n in suite.notes)
    assert "apiKey is not applied (the workbench needs no API key)" in suite.notes[0]
    assert suite.settings[0].params.temperature == 0.5


@pytest.mark.parametrize("config, said", [
    ("{mystery: 1, min_p: 0.1}", "unknown setting(s) mystery (no parameter here has that name"),
    ("{num_beams: 4}", "unknown setting(s) num_beams (beam search is not a sampler here)"),
    ("{tools: [{type: function, function: {name: f}}], tool_choice: maybe}", "tool_choice must be \"none\", "),
    ("{tools: [{type: function}]}", "tools[0] must be {\"type\": \"function\", \"function\": {\"name\""),
    ("{functions: [{name: f, parameters: 3}]}", "tools[0].function.parameters must be a JSON schema object "
                                                "(functions are read as tools"),
    ("{function_call: maybe}", ".function_call must be \"none\", \"auto\" or {name: FUNCTION}"),
    ("{prompt: {prefix: 1}}", ".prompt must be a mapping of prefix and suffix texts"),
    ("{return_full_text: true}", "return_full_text: true (outputs here are the completion only"),
    ("{response_format: {type: json_schema}}", ".response_format: response_format: json_schema needs"),
    ("{response_format: json}", ".response_format must be a mapping"),
    ("{max_new_tokens: 5, max_tokens: 6}", "give max_new_tokens or max_tokens, not both"),
])
def test_keys_that_would_change_outputs_are_refused_by_name(config, said, tmp_path):
    with pytest.raises(BatchInputError, match=re.escape("providers[0] (a).config") + ".*" + re.escape(said)):
        read_suite(f"prompts: [x]\nproviders:\n  - id: a\n    config: {config}\n", tmp_path)
