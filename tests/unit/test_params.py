"""SamplingParams: normalisation, and a clear error for every bad value."""

from __future__ import annotations

import pytest

from webui.engine.params import InvalidParameter, SamplingParams, param_fields

BAD_VALUES = [
    ("temperature", -0.1, "temperature must be in [0, 5], got -0.1"),
    ("temperature", 5.5, "temperature must be in [0, 5]"),
    ("temperature", "hot", "temperature must be a number"),
    ("top_p", 0.0, "top_p must be in (0, 1], got 0.0"),
    ("top_p", 1.5, "top_p must be in (0, 1], got 1.5"),
    ("top_k", -2, "top_k must be in [0, 1000], got -2"),
    ("top_k", 2.5, "top_k must be an integer"),
    ("min_p", 1.2, "min_p must be in [0, 1]"),
    ("typical_p", 0, "typical_p must be in (0, 1]"),
    ("repetition_penalty", 0, "repetition_penalty must be in (0, 5]"),
    ("presence_penalty", 2.5, "presence_penalty must be in [-2, 2]"),
    ("frequency_penalty", -3, "frequency_penalty must be in [-2, 2]"),
    ("no_repeat_ngram_size", 21, "no_repeat_ngram_size must be in [0, 20]"),
    ("top_n_sigma", -1, "top_n_sigma must be in [0, 5]"),
    ("tfs", 0, "tfs must be in (0, 1], got 0"),
    ("top_a", 1.5, "top_a must be in [0, 1]"),
    ("epsilon_cutoff", 10, "epsilon_cutoff must be in [0, 9]"),
    ("eta_cutoff", 21, "eta_cutoff must be in [0, 20]"),
    ("max_new_tokens", 0, "max_new_tokens must be in [1, 32768], got 0"),
    ("min_new_tokens", -1, "min_new_tokens must be in [0, 32768]"),
    ("seed", -5, "seed must be in [0,"),
    ("seed", 1.5, "seed must be an integer"),
    ("stop", [""], "stop strings must not be empty"),
    ("stop", [1], "stop must be a string or a list of strings"),
    ("stop", ["x"] * 17, "at most 16 stop strings"),
    ("ban_eos", "yes", "ban_eos must be true or false"),
    ("logit_bias", {"5": 101}, "logit_bias values must be numbers in [-100, 100], got 101 for token 5"),
    ("logit_bias", {"x": 1}, "logit_bias keys must be token ids"),
    ("logit_bias", 7, "logit_bias must map token ids to biases"),
    ("temperature", True, "temperature must be a number"),
    ("temperature", float("nan"), "temperature must be in"),
]


@pytest.mark.parametrize("name,value,message", BAD_VALUES)
def test_bad_value_names_parameter_value_and_range(name, value, message):
    with pytest.raises(InvalidParameter) as err:
        SamplingParams.from_dict({name: value})
    assert err.value.param == name
    assert message in str(err.value)


def test_every_field_has_a_bad_value_test():
    assert {n for n, *_ in param_fields()} == {n for n, _, _ in BAD_VALUES}


def test_unknown_key_is_named():
    with pytest.raises(InvalidParameter, match="unknown sampling parameter 'tempreature' in my.yaml"):
        SamplingParams.from_dict({"tempreature": 1}, source="my.yaml")


def test_min_new_tokens_cannot_exceed_max():
    with pytest.raises(InvalidParameter, match="min_new_tokens must be <= max_new_tokens"):
        SamplingParams(max_new_tokens=5, min_new_tokens=6)


def test_normalisation():
    p = SamplingParams.from_dict({"temperature": 0.000001, "top_k": -1, "seed": -1, "stop": "###",
                                  "max_new_tokens": 64.0})
    assert p.temperature == 0.0 and p.greedy
    assert p.top_k == 0 and p.seed is None and p.stop == ("###",)
    assert p.max_new_tokens == 64 and isinstance(p.max_new_tokens, int)
    assert SamplingParams(temperature=1).temperature == 1.0


def test_frozen_and_replace_validates():
    p = SamplingParams()
    with pytest.raises(Exception):
        p.temperature = 2  # type: ignore[misc]
    with pytest.raises(InvalidParameter):
        p.replace(top_p=2)
    assert p.replace(top_p=0.5).top_p == 0.5


def test_changed_lists_only_non_neutral_keys():
    assert SamplingParams(temperature=0.7, stop=("a",)).changed() == {"temperature": 0.7, "stop": ["a"]}
    assert SamplingParams().changed() == {}


def test_every_field_has_help_and_numeric_fields_have_bounds():
    for name, default, spec, help_text in param_fields():
        assert help_text, name
        if spec.kind in (int, float):
            assert spec.minimum is not None and spec.maximum is not None and spec.step, name


def test_logit_bias_normalised_from_json_style_keys():
    p = SamplingParams.from_dict({"logit_bias": {"7": -100, 3: 2.5}})
    assert p.logit_bias == ((3, 2.5), (7, -100.0))
    assert p.to_dict()["logit_bias"] == {"3": 2.5, "7": -100.0}
    assert SamplingParams.from_dict(p.changed()) == p


def test_prefix_cache_mb_on_the_command_line():
    from webui.config import config_from_args

    assert config_from_args([]).prefix_cache_mb is None
    assert config_from_args(["--prefix-cache-mb", "0"]).prefix_cache_mb == 0
    assert config_from_args(["--prefix-cache-mb", "256"]).prefix_cache_mb == 256
    for bad in ("-1", "lots"):
        with pytest.raises(SystemExit):
            config_from_args(["--prefix-cache-mb", bad])
