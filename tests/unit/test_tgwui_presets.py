"""Real preset files from text-generation-webui (tests/data/tgwui_presets, sources in SOURCE.md) load with every
sampler they set applied; the keys that are not sampling settings here are named with the reason."""

from __future__ import annotations

import pytest

from tests.conftest import ROOT
from webui.engine.params import SAMPLER_ORDER, SamplingParams
from webui.engine.sampling import active_samplers
from webui.presets import PresetError, PresetStore, load_preset_file

PRESETS = ROOT / "tests" / "data" / "tgwui_presets"

# file -> (what it changes from neutral, the steps that then run, the keys not applied)
EXPECTED = {
    "Creative": ({"min_p": 0.02, "xtc_probability": 0.5}, ["min_p", "xtc"], set()),
    "Deterministic": ({"temperature": 0.0, "top_k": 1}, [], set()),
    "Top-P": ({"top_p": 0.95}, ["top_p"], set()),
    "min_p": ({"min_p": 0.05}, ["min_p"], set()),
    "Mirostat": ({"mirostat_mode": 2, "mirostat_tau": 8.0}, ["mirostat"], set()),
    "Dynamic Temperature": (
        {"dynamic_temperature": True, "dynatemp_low": 0.01, "dynatemp_high": 2.0, "temperature_last": True,
         "min_p": 0.07}, ["min_p", "dynamic_temperature"], set()),
    # the 2024-01 format: dynamic temperature from dynamic_temperature_low up to temperature
    "Dynamic Temperature (2024-01)": (
        {"dynamic_temperature": True, "dynatemp_low": 0.1, "dynatemp_high": 3.0, "temperature": 3.0,
         "temperature_last": True, "min_p": 0.05}, ["min_p", "dynamic_temperature"], set()),
    "Big O": ({"temperature": 0.87, "top_p": 0.99, "typical_p": 0.68, "tfs": 0.68, "repetition_penalty": 1.01,
               "top_k": 85}, ["repetition_penalty", "temperature", "top_k", "top_p", "typical_p", "tfs"], set()),
    "Special-Eta Sampling": ({"eta_cutoff": 3.0, "temperature": 0.7, "repetition_penalty": 1.18},
                             ["repetition_penalty", "temperature", "eta_cutoff"], set()),
    "tfs-with-top-a": ({"temperature": 0.7, "tfs": 0.95, "top_a": 0.2, "repetition_penalty": 1.15},
                       ["repetition_penalty", "temperature", "tfs", "top_a"], set()),
    "Verbose (Beam Search)": (
        {"min_new_tokens": 200, "no_repeat_ngram_size": 2, "temperature": 0.7, "top_k": 150, "top_p": 0.92,
         "repetition_penalty": 4.5},
        ["eos_ban", "repetition_penalty", "temperature", "top_k", "top_p", "no_repeat_ngram"],
        {"num_beams", "length_penalty", "early_stopping"}),
    "Contrastive Search": ({"temperature": 0.0, "top_k": 4}, [], {"penalty_alpha"}),
    # every key at text-generation-webui's defaults: nothing runs, nothing is left out
    "Every key": ({"repetition_penalty_range": 1024}, [], set()),
}


def test_every_copied_file_is_checked():
    assert {p.stem for p in PRESETS.glob("*.yaml")} == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_preset_loads_with_its_samplers(name):
    changes, running, not_applied = EXPECTED[name]
    params, ignored = load_preset_file(PRESETS / f"{name}.yaml")
    assert params.changed() == SamplingParams.from_dict(changes).changed()
    assert active_samplers(params) == running
    assert set(ignored) == not_applied
    for reason in ignored.values():
        assert "decoding method" in reason


def test_every_key_preset_reads_the_order_and_the_breakers_as_text_generation_webui_writes_them():
    params, _ = load_preset_file(PRESETS / "Every key.yaml")
    assert params.sampler_priority == SAMPLER_ORDER
    assert params.dry_sequence_breakers == ("\n", ":", '"', "*")


def test_the_parameters_tab_says_what_was_not_applied_and_why(tmp_path):
    store = PresetStore(tmp_path / "user", builtin_dir=PRESETS)
    text = store.get("Verbose (Beam Search)").ignored_text()
    assert text.startswith("num_beams, length_penalty, early_stopping: beam search is another decoding method")
    assert store.get("Top-P").ignored_text() == ""


def test_a_saved_preset_with_new_samplers_round_trips(tmp_path):
    store = PresetStore(tmp_path / "user", builtin_dir=PRESETS)
    params = SamplingParams(dry_multiplier=0.8, xtc_probability=0.5, mirostat_mode=2, custom_token_bans=(5, 9),
                            sampler_priority=("min_p", "temperature"), dry_sequence_breakers=("\n", "##"))
    store.save("mine", params)
    assert store.get("mine").params == params


def test_a_grammar_string_is_applied_as_structured_output(tmp_path):
    preset = tmp_path / "grammar.yaml"
    preset.write_text('temperature: 0.5\ngrammar_string: |\n  root ::= "yes" | "no"\n')
    params, ignored = load_preset_file(preset)
    assert params.structured_outputs[0] == "grammar" and "::=" in params.structured_outputs[1] and not ignored
    preset.write_text('grammar_string: "root ::= ("\n')
    with pytest.raises(PresetError, match="structured_outputs: invalid grammar"):
        load_preset_file(preset)
