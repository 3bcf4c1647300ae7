"""Training settings: one table read by the CLI and the record; bad values named with what they take."""

from __future__ import annotations

import pytest

from webui.training.cli import build_parser
from webui.training.settings import SETTINGS, TrainingError, TrainingSettings, parse_settings


def test_defaults_and_text_values_are_read_through_the_table():
    assert parse_settings({}) == TrainingSettings()
    s = parse_settings({"rank": "16", "alpha": "32", "learning_rate": "1e-3", "scheduler": "cosine",
                        "train_on_all_turns": "yes", "target_modules": "q_proj, v_proj"})
    assert (s.rank, s.alpha, s.learning_rate, s.scheduler, s.train_on_all_turns) == (16, 32, 1e-3, "cosine", True)
    assert s.modules() == ["q_proj", "v_proj"]
    assert parse_settings({"target_modules": "attention"}).modules() == ["q_proj", "k_proj", "v_proj", "o_proj"]
    assert parse_settings({"target_modules": "all-linear"}).modules() == "all-linear"
    assert parse_settings({"hard_cut": "\\n\\n"}).separator == "\n\n"


@pytest.mark.parametrize("values, message", [
    ({"rank": 0}, "training setting 'rank' takes an integer from 1 to 1024; got 0"),
    ({"alpha": 0}, "training setting 'alpha' takes an integer > 0; got 0"),
    ({"alpha": "-2"}, "'alpha' takes an integer > 0"),
    ({"learning_rate": "fast"}, "'learning_rate' takes a number above 0, at most 1; got 'fast'"),
    ({"scheduler": "step"}, "'scheduler' takes one of constant, linear, cosine; got 'step'"),
    ({"micro_batch_size": 2.5}, "'micro_batch_size' takes an integer"),
    ({"dropout": 1.5}, "'dropout' takes a number from 0 to 0.9"),
    ({"overlap": 64, "cutoff_len": 64}, "overlap (64) must be below cutoff_len (64)"),
    ({"eval_percent": 10, "eval_file": "x.jsonl"}, "eval_percent or eval_file, not both"),
    ({"target_modules": " , "}, "target_modules is empty"),
    ({"target_modules": "q_proj;rm -rf"}, "is not a module name"),
    ({"ranks": 4}, "unknown training setting 'ranks'"),
])
def test_bad_values_are_named(values, message):
    with pytest.raises(TrainingError) as caught:
        parse_settings(values)
    assert message in str(caught.value)


def test_every_setting_is_a_cli_option_with_its_default_in_the_help():
    parser = build_parser()
    text = parser.format_help()
    for spec in SETTINGS:
        assert f"--{spec.name.replace('_', '-')}" in text
        assert f"{spec.name} (" in text and f"default {spec.default!r}" in text
    args = parser.parse_args(["--data", "d.txt", "--name", "n", "--rank", "4", "--train-on-all-turns"])
    assert (args.rank, args.train_on_all_turns, args.alpha) == ("4", "true", None)
