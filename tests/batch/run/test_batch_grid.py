"""Batch grids: preset x axis expansion, labels, precedence, validation, seeds and the cell limit."""

from __future__ import annotations

from pathlib import Path

import pytest

from webui.batch.run.grid import Cell, GridSpec, estimate_seconds, expand, parse_axes, parse_axis, plan, plan_grid
from webui.batch.run.prompts import parse_lines
from webui.batch.asserts.errors import BatchInputError
from webui.engine.params import SamplingParams
from webui.presets import PresetStore


@pytest.fixture
def presets(tmp_path: Path) -> PresetStore:
    return PresetStore(tmp_path / "user-presets")


# -- parse_axis -----------------------------------------------------------------------

@pytest.mark.parametrize("text, expected", [
    ("temperature=0,0.7,1.2", ("temperature", [0, 0.7, 1.2])),
    (" top_k = 40 , -1 ", ("top_k", [40, -1])),
    ("top_p=.9,1e0", ("top_p", [0.9, 1.0])),
    ("ban_eos=true,False", ("ban_eos", [True, False])),
    ("stop=###,END", ("stop", ["###", "END"])),
])
def test_parse_axis_types(text, expected):
    assert parse_axis(text) == expected
    assert type(parse_axis("temperature=0")[1][0]) is int


@pytest.mark.parametrize("text, message", [
    ("temperature", r"expected name=value1,value2,\.\.\. \(e\.g\. temperature=0,0\.7,1\.2\), got 'temperature'"),
    ("=1,2", "expected name=value1"),
    ("temperature=", "temperature needs comma-separated values"),
    ("temperature=0,,1", "without empty ones"),
    ("top_q=1", r"unknown sampling parameter 'top_q'; known parameters: .*ban_eos, .*top_p"),
    ("seed=1,2", "seed cannot be an axis"),
])
def test_parse_axis_errors(text, message):
    with pytest.raises(BatchInputError, match=message):
        parse_axis(text)


def test_values_with_commas_or_structure_are_a_json_list(presets):
    name, values = parse_axis('structured_outputs=[{"regex": "[0-9]{1,3}"}, {"choice": ["yes", "no"]}, {}]')
    assert name == "structured_outputs" and values[2] == {}
    assert parse_axis('stop=["a,b", ["x", "y"]]') == ("stop", ["a,b", ["x", "y"]])
    settings = expand(GridSpec([], {name: values}), presets)
    assert [s.label for s in settings] == ['structured_outputs={"regex":"[0-9]{1,3}"}',
                                           'structured_outputs={"choice":["yes","no"]}', "structured_outputs={}"]
    assert [s.params.structured_outputs for s in settings] == [("regex", "[0-9]{1,3}"), ("choice", ("yes", "no")),
                                                               ()]


@pytest.mark.parametrize("text, message", [
    ('structured_outputs=[{"regex": ', "values starting with \\[ are read as a JSON list, and this is not valid"),
    ("structured_outputs=[]", "needs a non-empty JSON list"),
])
def test_a_json_list_axis_that_cannot_be_read_is_named(text, message):
    with pytest.raises(BatchInputError, match=message):
        parse_axis(text)


def test_a_bad_constraint_in_an_axis_names_the_value(presets):
    with pytest.raises(BatchInputError, match=r'grid: structured_outputs=\{"regex":"\[a-"\}: structured_outputs: '
                                              "invalid regex"):
        expand(GridSpec([], dict([parse_axis('structured_outputs=[{"regex": "[a-"}]')])), presets)


def test_parse_axes_lines():
    assert parse_axes("temperature=0,1\n\ntop_p=0.9\n") == {"temperature": [0, 1], "top_p": [0.9]}
    with pytest.raises(BatchInputError, match="temperature is given twice"):
        parse_axes(["temperature=0", "temperature=1"])


# -- expand ---------------------------------------------------------------------------

def test_axes_product_per_preset(presets):
    spec = GridSpec(["Precise", "Balanced"], {"temperature": [0, 0.7, 1.2], "top_p": [0.9, 1.0]})
    settings = expand(spec, presets)
    assert len(settings) == 12
    assert [s.label for s in settings[:3]] == ["Precise · temperature=0 · top_p=0.9",
                                               "Precise · temperature=0 · top_p=1",
                                               "Precise · temperature=0.7 · top_p=0.9"]
    assert len({s.label for s in settings}) == 12
    assert {s.preset for s in settings} == {"Precise", "Balanced"}
    assert settings[2].overrides == {"temperature": 0.7, "top_p": 0.9}


def test_the_newer_samplers_are_grid_axes_too(presets):
    axes = parse_axes("temperature_last=false,true\ndry_multiplier=0,0.8\nmirostat_mode=0,2\n"
                      "sampler_priority=temperature,min_p")
    settings = expand(GridSpec(["Balanced"], axes), presets)
    assert len(settings) == 16
    last = settings[-1].params
    assert (last.temperature_last, last.dry_multiplier, last.mirostat_mode) == (True, 0.8, 2)
    assert last.sampler_priority[-1] == "min_p" and settings[-2].params.sampler_priority[-1] == "temperature"


def test_overrides_win_over_the_preset_and_the_rest_of_the_preset_stays(presets):
    precise = presets.get("Precise").params
    (setting,) = expand(GridSpec(["Precise"], {"temperature": [0.9]}), presets)
    assert setting.params.temperature == 0.9
    assert setting.params.top_k == precise.top_k == 40
    assert setting.params.top_p == precise.top_p
    assert setting.label == "Precise · temperature=0.9"  # a one-value axis still shows when nothing varies


def test_presets_only_and_single_value_axes_stay_out_of_varying_labels(presets):
    settings = expand(GridSpec(["Precise", "Creative"], {}), presets)
    assert [s.label for s in settings] == ["Precise", "Creative"]
    assert settings[1].params == presets.get("Creative").params
    settings = expand(GridSpec(["Deterministic"], {"max_new_tokens": [64], "top_k": [10, 20]}), presets)
    assert [s.label for s in settings] == ["Deterministic · top_k=10", "Deterministic · top_k=20"]
    assert all(s.params.max_new_tokens == 64 and s.params.greedy for s in settings)


def test_no_presets_uses_base_params(presets):
    base = SamplingParams(top_k=7, max_new_tokens=32)
    settings = expand(GridSpec([], {"temperature": [0, 1]}, base=base), presets)
    assert [s.label for s in settings] == ["temperature=0", "temperature=1"]
    assert [s.preset for s in settings] == [None, None]
    assert all(s.params.top_k == 7 and s.params.max_new_tokens == 32 for s in settings)
    (only,) = expand(GridSpec([], {}, base=base), presets)
    assert only.label == "current parameters" and only.params == base
    (neutral,) = expand(GridSpec([], {}), presets)
    assert neutral.params == SamplingParams()


def test_user_preset_is_found(presets):
    presets.save("Mine", SamplingParams(temperature=0.2))
    (setting,) = expand(GridSpec(["Mine"], {}), presets)
    assert setting.params.temperature == 0.2 and setting.label == "Mine"


@pytest.mark.parametrize("spec, message", [
    (GridSpec([], {"top_p": [0.9, 1.5]}), r"^grid: top_p=1\.5: top_p must be in \(0, 1\], got 1\.5$"),
    (GridSpec([], {"temperature": ["hot"]}), r"^grid: temperature=hot: temperature must be a number"),
    (GridSpec([], {"top_q": [1]}), r"unknown sampling parameter 'top_q'; known parameters: .*temperature"),
    (GridSpec([], {"seed": [1]}), "seed cannot be an axis"),
    (GridSpec([], {"temperature": []}), "grid: temperature has no values"),
    (GridSpec([], {"temperature": [0.5, 0.50]}), "grid: temperature lists 0.5 twice"),
    (GridSpec(["Nope"], {}), r"grid: unknown preset 'Nope'; presets: Balanced, Contrastive-Min-P, Creative, "
                             r"Deterministic, Precise"),
    (GridSpec(["../etc"], {}), "grid: preset name '../etc' must be a plain name"),
    (GridSpec(["Precise", "Precise"], {}), "preset 'Precise' is chosen twice"),
    (GridSpec([], {"min_new_tokens": [600]}), r"grid: min_new_tokens=600: min_new_tokens must be <= max_new_tokens"),
])
def test_bad_grids(presets, spec, message):
    with pytest.raises(BatchInputError, match=message):
        expand(spec, presets)


def test_cross_field_error_from_the_preset_names_the_setting(presets):
    spec = GridSpec([], {"max_new_tokens": [8, 16]}, base=SamplingParams(min_new_tokens=10, max_new_tokens=20))
    with pytest.raises(BatchInputError,
                       match=r"grid: max_new_tokens=8: min_new_tokens must be <= max_new_tokens \(8\)"):
        expand(spec, presets)


def test_bad_preset_file_is_a_batch_error(presets):
    presets.user_dir.mkdir(parents=True)
    (presets.user_dir / "Broken.yaml").write_text("top_q: 1\n")
    with pytest.raises(BatchInputError, match=r"grid: .*Broken.yaml.*unknown sampling parameter 'top_q'"):
        expand(GridSpec(["Broken"], {}), presets)


# -- plan -----------------------------------------------------------------------------

def test_plan_counts_order_and_seeds(presets):
    rows = parse_lines("a\nb\nc")
    settings = expand(GridSpec(["Precise", "Creative"], {"temperature": [0.5, 1.0]}), presets)
    cells = plan(rows, settings, samples=3, base_seed=100, max_cells=100)
    assert len(cells) == 3 * 4 * 3
    assert cells[0] == Cell(rows[0], settings[0], 0, 100)
    assert [(c.row.index, c.sample) for c in cells[:6]] == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]
    for cell in cells:
        assert cell.seed == 100 + cell.sample
        assert cell.params.seed == cell.seed
        assert cell.params.replace(seed=None) == cell.setting.params.replace(seed=None)
    # the same sample number has the same seed for every prompt and setting
    assert {c.seed for c in cells if c.sample == 2} == {102}
    assert {(c.row.index, c.setting.label, c.sample) for c in cells}.__len__() == len(cells)


def test_plan_grid_uses_spec_samples_and_seed(presets):
    rows = parse_lines("x\ny")
    cells = plan_grid(rows, GridSpec([], {"top_k": [1, 2]}, samples=2, base_seed=7), presets)
    assert len(cells) == 8 and {c.seed for c in cells} == {7, 8}


def test_max_cells_limit_message(presets):
    rows = parse_lines("\n".join(f"p{i}" for i in range(40)))
    settings = expand(GridSpec([], {"temperature": [0, 0.5, 1], "top_p": [0.5, 1]}), presets)
    assert len(plan(rows, settings, 5, 0, max_cells=1200)) == 1200
    with pytest.raises(BatchInputError) as info:
        plan(rows, settings, 5, 0, max_cells=1000, raise_hint="pass --max-cells 1200")
    assert str(info.value) == ("this batch has 1,200 generations (40 prompts x 6 settings x 5 samples), more than "
                               "the limit of 1,000; use fewer prompts, settings or samples, or pass --max-cells 1200")


@pytest.mark.parametrize("samples, base_seed, message", [
    (0, 0, "samples must be a whole number >= 1, got 0"),
    (1.5, 0, "samples must be a whole number"),
    (1, -1, r"base seed must be a whole number in \[0, "),
    (2, 2**63 - 1, "base seed must be a whole number"),
])
def test_plan_bad_samples_and_seed(presets, samples, base_seed, message):
    rows = parse_lines("a")
    settings = expand(GridSpec([], {}), presets)
    with pytest.raises(BatchInputError, match=message):
        plan(rows, settings, samples, base_seed, 10)


def test_plan_needs_rows_and_settings(presets):
    settings = expand(GridSpec([], {}), presets)
    with pytest.raises(BatchInputError, match="no prompts"):
        plan([], settings, 1, 0, 10)
    with pytest.raises(BatchInputError, match="no settings"):
        plan(parse_lines("a"), [], 1, 0, 10)


def test_estimate_seconds(presets):
    rows = parse_lines("a\nb")
    settings = expand(GridSpec([], {"max_new_tokens": [100, 300]}), presets)
    cells = plan(rows, settings, 1, 0, 10)
    assert estimate_seconds(cells, 100.0) == pytest.approx((100 + 300) * 2 / 100)
    assert estimate_seconds(cells, 50.0, max_new_tokens=10) == pytest.approx(4 * 10 / 50)
    with pytest.raises(ValueError, match="tokens_per_second must be > 0"):
        estimate_seconds(cells, 0)


def test_grid_spec_round_trips_through_json(presets):
    import json

    spec = GridSpec(["Precise"], {"temperature": [0, 0.7], "stop": [["###"]]}, samples=3, base_seed=9,
                    base=SamplingParams(top_k=5, stop=("END",)))
    again = GridSpec.from_dict(json.loads(json.dumps(spec.to_dict())))
    assert again == spec
    assert [s.params for s in expand(again, presets)] == [s.params for s in expand(spec, presets)]
    assert GridSpec.from_dict({"presets": [], "axes": {}}) == GridSpec([], {})
    with pytest.raises(BatchInputError, match="grid: unknown sampling parameter 'top_q' in grid base"):
        GridSpec.from_dict({"presets": [], "axes": {}, "base": {"top_q": 1}})


def test_the_time_left_is_bounded_before_the_first_cell_finishes_and_estimated_after(presets):
    """Cells run batched, so the first one can finish near the end: before it does, the time left is bounded from
    the tokens the cells may still make at the speed so far; after, estimated from the cells generated."""
    import time

    from webui.batch.run.results import Generated, result_for
    from webui.batch.run.handle import RunHandle

    settings = expand(GridSpec([], {"max_new_tokens": [10]}), presets)
    cells = plan(parse_lines("a\nb\nc\nd"), settings)
    handle = RunHandle(1, cells, started=time.monotonic() - 10)
    assert handle.eta_text() == ""  # nothing made yet: nothing known
    handle.streaming.update({0: 5, 1: 5, 2: 5, 3: 5})  # 20 tokens in 10 s; 20 more allowed at most
    assert handle.eta_text() == "at most 10s left"
    handle.results[0] = result_for(cells[0], Generated("x", "stop", 1, 5), from_cache=True)
    handle.streaming.pop(0)
    assert handle.eta_text() == "at most 10s left"  # a cell from the cache took no time: still the bound
    handle.results[1] = result_for(cells[1], Generated("x", "stop", 1, 5))
    assert handle.eta_text() == "about 20s left"  # one generated cell in 10 s, two to go
    auto = expand(GridSpec([], {"auto_max_new_tokens": [True]}), presets)
    handle = RunHandle(2, plan(parse_lines("a"), auto), started=time.monotonic() - 10, streaming={0: 5})
    assert handle.eta_text() == ""  # no bound on how many tokens it makes
