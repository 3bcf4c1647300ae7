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
    ("stop", ["x" * 1001], "stop strings are at most 1000 characters long, got one of 1001"),
    ("ban_eos", "yes", "ban_eos must be true or false"),
    ("logit_bias", {"5": 101}, "logit_bias values must be numbers in [-100, 100], got 101 for token 5"),
    ("logit_bias", {"x": 1}, "logit_bias keys must be token ids"),
    ("logit_bias", 7, "logit_bias must map token ids to biases"),
    ("xtc_threshold", 0.6, "xtc_threshold must be in [0, 0.5]"),
    ("xtc_probability", -0.1, "xtc_probability must be in [0, 1]"),
    ("dynamic_temperature", 1, "dynamic_temperature must be true or false"),
    ("dynatemp_low", 0, "dynatemp_low must be in (0, 5]"),
    ("dynatemp_high", 6, "dynatemp_high must be in (0, 5]"),
    ("dynatemp_exponent", 0, "dynatemp_exponent must be in (0, 5]"),
    ("smoothing_factor", 11, "smoothing_factor must be in [0, 10]"),
    ("smoothing_curve", 0.5, "smoothing_curve must be in [1, 10]"),
    ("temperature_last", "no", "temperature_last must be true or false"),
    ("mirostat_mode", 1, "mirostat_mode 1 (Mirostat v1) is not offered; use 2"),
    ("mirostat_mode", 3, "mirostat_mode must be in [0, 2]"),
    ("mirostat_tau", 11, "mirostat_tau must be in [0, 10]"),
    ("mirostat_eta", 2, "mirostat_eta must be in [0, 1]"),
    ("adaptive_target", 1.5, "adaptive_target must be in [0, 1]"),
    ("adaptive_decay", 1.0, "adaptive_decay must be in [0, 0.99]"),
    ("repetition_penalty_range", -1, "repetition_penalty_range must be in [0, 32768]"),
    ("encoder_repetition_penalty", 0, "encoder_repetition_penalty must be in (0, 5]"),
    ("dry_multiplier", 6, "dry_multiplier must be in [0, 5]"),
    ("dry_base", 0.5, "dry_base must be in [1, 4]"),
    ("dry_allowed_length", 0, "dry_allowed_length must be in [1, 20]"),
    ("dry_sequence_breakers", '"\\n", :', "dry_sequence_breakers must be quoted strings separated by commas"),
    ("dry_sequence_breakers", [""], "dry_sequence_breakers strings must not be empty"),
    ("dry_sequence_breakers", 5, "dry_sequence_breakers must be a list of strings"),
    ("custom_token_bans", "1, x", "custom_token_bans must be token ids (integers >= 0) separated by commas, got 'x'"),
    ("custom_token_bans", [-1], "custom_token_bans must be token ids"),
    ("custom_token_bans", list(range(1001)), "custom_token_bans may hold at most 1000 tokens"),
    ("sampler_priority", ["top_k", "top_q"], "sampler_priority: unknown sampler 'top_q'; samplers: repetition_penalty,"),
    ("sampler_priority", 7, "sampler_priority must be a list of sampler names"),
    ("guidance_scale", 3, "guidance_scale must be in [-0.5, 2.5]"),
    ("negative_prompt", 5, "negative_prompt must be a string, got 5"),
    ("structured_outputs", {"regex": "[a-"}, "structured_outputs: invalid regex: "),
    ("structured_outputs", {"json": {"type": "foo"}}, "structured_outputs: not a valid JSON schema: Invalid type: foo"),
    ("structured_outputs", {"json": "{not json"}, "structured_outputs: the JSON schema is not valid JSON"),
    ("structured_outputs", {"choice": []}, "structured_outputs: choice must be a list of non-empty strings"),
    ("structured_outputs", {"grammar": "root ::= ("}, "structured_outputs: invalid grammar"),
    ("structured_outputs", {"regex": "a", "choice": ["b"]}, "structured_outputs must hold one of json, json_object"),
    ("structured_outputs", {"yaml": "x"}, "structured_outputs must hold one of"),
    ("auto_max_new_tokens", 1, "auto_max_new_tokens must be true or false"),
    ("truncation_length", -1, "truncation_length must be in [0, 1048576]"),
    ("add_bos_token", "no", "add_bos_token must be true or false"),
    ("skip_special_tokens", None, "skip_special_tokens must be true or false"),
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


def test_text_forms_of_the_list_parameters():
    p = SamplingParams.from_dict({"sampler_priority": "min_p, top_k\ntemperature", "custom_token_bans": "7, 3,7",
                                  "dry_sequence_breakers": '["\\n", "::"]'})
    assert p.sampler_priority[-3:] == ("min_p", "top_k", "temperature") and len(p.sampler_priority) == 21
    assert p.custom_token_bans == (3, 7) and p.dry_sequence_breakers == ("\n", "::")
    assert SamplingParams.from_dict({"dry_sequence_breakers": ""}).dry_sequence_breakers == ()


def test_a_constraint_over_the_size_limit_is_refused_before_it_is_compiled():
    """#43: compiling a 10 MB regex held the server for seconds; a constraint is at most 100,000 characters."""
    import time

    from webui.engine.params import MAX_STRUCTURED_CHARS

    started = time.monotonic()
    for value in ({"regex": "a" * (MAX_STRUCTURED_CHARS + 1)}, {"choice": ["x" * 1000] * 101}):
        with pytest.raises(InvalidParameter, match="at most 100,000 are taken"):
            SamplingParams(structured_outputs=value)
    assert time.monotonic() - started < 2
    assert SamplingParams(structured_outputs={"regex": "a{1,3}"}).structured_outputs
