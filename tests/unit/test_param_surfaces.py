"""Every sampling parameter, defined once in its spec, means the same on every surface that carries it.

A request body -> SamplingParams -> reproduce record -> API body -> SamplingParams
gives the same values back; the UI's controls, presets, the remote loader's body
and the user guide are derived from (or checked against) the same specs, so a
field added to the specs without the rest fails here.
"""

from __future__ import annotations

import pytest

from tests.conftest import ROOT
from webui.api.protocol import ChatCompletionRequest, CompletionRequest
from webui.controllers.parameters import params_from_values, values_from_params
from webui.engine.params import InvalidParameter, SamplingParams, api_names, specs
from webui.reproduce import ReproduceRecord, parse_record

WIDGETS = {"slider", "number", "checkbox", "lines", "text", "json", "constraint"}
SPECIAL = {"stop": ["END", "\n###"], "logit_bias": {"5": -50.0, "17": 2.5}, "ban_eos": True, "seed": 1234,
           "dynamic_temperature": True, "temperature_last": True, "mirostat_mode": 2,
           "dry_sequence_breakers": ["\n", "##"], "custom_token_bans": [5, 17], "sampler_priority": ["min_p", "top_k"],
           "auto_max_new_tokens": True, "add_bos_token": False, "skip_special_tokens": False,
           "negative_prompt": "A dull, wrong answer.",
           "structured_outputs": {"json": {"type": "object", "properties": {"b": {"type": "integer"}, "a": {}}}}}


def example(name: str):
    """A value for ``name`` that is not neutral and inside its bounds."""
    if name in SPECIAL:
        return SPECIAL[name]
    spec, neutral = specs()[name], SamplingParams().to_dict()[name]
    value = spec.minimum + 3 * spec.step if spec.minimum + 3 * spec.step != neutral else spec.minimum + 5 * spec.step
    return int(value) if spec.kind is int else round(value, 4)


def every_field_set() -> dict:
    return {api_names()[name]: example(name) for name in specs()}


def test_each_spec_is_complete():
    seen = set()
    for name, spec in specs().items():
        assert spec.help and spec.widget in WIDGETS, name
        assert spec.widget != "text" or spec.to_text is not None, f"{name}: a text control needs to_text"
        assert (spec.check is not None) or spec.kind in (int, float), f"{name}: a non-number needs a check hook"
        if spec.kind in (int, float):
            assert spec.minimum is not None and spec.maximum is not None and spec.step, name
        api = api_names()[name]
        assert api not in seen, f"two parameters under the API name {api}"
        seen.add(api)
        for request in (ChatCompletionRequest, CompletionRequest):
            assert api in request.model_fields, f"{name} is not a request field ({api}) of {request.__name__}"


def test_request_to_record_to_api_body_and_back_gives_the_same_values():
    body = every_field_set()
    params = ChatCompletionRequest(messages=[{"role": "user", "content": "hi"}], **body).to_sampling_params(
        SamplingParams())
    assert params.changed() == {name: SamplingParams.from_dict({name: example(name)}).to_dict()[name]
                                for name in specs()}, "every field the request set reaches SamplingParams"
    record = parse_record(ReproduceRecord("m", params, [{"role": "user", "content": "hi"}], loader="llamacpp",
                                          loras=(("a", 0.5), ("b", 1.25))).to_json())
    route, api_body = record.api_body()
    assert route == "/chat/completions" and record.loader == "llamacpp"
    request = ChatCompletionRequest(**api_body)
    assert request.to_sampling_params(SamplingParams()) == params
    assert request.loras == [("a", 0.5), ("b", 1.25)] and request.model == "m"  # every adapter, at its weight
    assert SamplingParams.from_dict(params.changed()) == params  # presets store changed()
    assert params_from_values(dict(zip(specs(), values_from_params(params)))) == params  # the UI's controls


def test_completions_round_trip_and_the_remote_body():
    params = SamplingParams.from_api(every_field_set())
    record = ReproduceRecord("m", params, prompt="Once")
    route, body = record.api_body()
    assert route == "/completions" and CompletionRequest(**body).to_sampling_params(SamplingParams()) == params
    assert {k: v for k, v in body.items() if k not in ("model", "prompt")} == params.api_body()


def test_neutral_extras_are_not_sent_but_standard_fields_are():
    body = SamplingParams(temperature=0.5).api_body()
    assert body["temperature"] == 0.5 and body["max_tokens"] == 512
    assert not {"top_k", "min_p", "ignore_eos", "min_tokens"} & set(body)


@pytest.mark.parametrize("field, value, said", [
    ("max_tokens", 0, r"max_tokens must be in \[1, 32768\], got 0"),
    ("ignore_eos", "yes", "ignore_eos must be true or false"),
    ("min_tokens", 600, r"min_tokens must be <= max_tokens \(16\), got 600"),
])
def test_api_errors_name_the_api_field(field, value, said):
    with pytest.raises(InvalidParameter, match=said) as info:  # what every request's to_sampling_params runs
        SamplingParams.from_api({field: value}, SamplingParams.from_dict({"max_new_tokens": 16}))
    assert info.value.param == field


def test_max_completion_tokens_is_named_as_given():
    req = ChatCompletionRequest(messages=[{"role": "user", "content": "x"}], max_completion_tokens=0, max_tokens=5)
    with pytest.raises(InvalidParameter, match="max_completion_tokens must be in") as info:
        req.to_sampling_params(SamplingParams())
    assert info.value.param == "max_completion_tokens"


def test_the_user_guide_table_lists_every_parameter_under_both_names():
    guide = (ROOT / "docs" / "user-guide.md").read_text()
    for name, spec in specs().items():
        row = next((line for line in guide.splitlines() if line.startswith(f"| `{name}` |")), None)
        assert row is not None, name
        assert spec.help in row and spec.range_text() in row, name
        kind = "OpenAI" if spec.openai else "extra"
        assert f"| `{api_names()[name]}` ({kind}) |" in row, f"{name}: the guide should give its API field"
