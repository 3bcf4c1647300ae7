"""sampler_table.SAMPLERS is the one source of the pipeline's steps: their order, flags, factories and docs."""

from __future__ import annotations

import re

import pytest

from tests.conftest import ROOT
from tests.unit.test_sampling import EVERY_SAMPLER
from webui.engine import params
from webui.engine.params import InvalidParameter, SamplingParams, field_names
from webui.engine.sampler_table import CONSTRAINTS, SAMPLER_ORDER, SAMPLER_SPECS, SAMPLERS
from webui.engine.sampling import FACTORIES, _factories, active_samplers, sampler_order

NAMES = [s.name for s in SAMPLERS]


def test_the_table_order_is_the_default_order_and_every_list_is_a_view_of_it():
    assert len(set(NAMES)) == len(NAMES) and list(SAMPLER_SPECS) == NAMES
    assert NAMES == [*CONSTRAINTS, *SAMPLER_ORDER]  # the constraints come first
    assert params.SAMPLER_ORDER is SAMPLER_ORDER
    assert SamplingParams().sampler_priority == SAMPLER_ORDER
    assert sampler_order(SamplingParams()) == NAMES
    assert all(name in field_names() for s in SAMPLERS for name in s.reads)


def test_every_step_has_exactly_one_factory_in_table_order():
    assert list(FACTORIES) == NAMES
    given = {name: FACTORIES[name] for name in NAMES if name != "top_k"} | {"top_q": FACTORIES["top_p"]}
    with pytest.raises(RuntimeError, match=re.escape("missing ['top_k'], extra ['top_q']")):
        _factories(**given)


@pytest.mark.parametrize("spec", SAMPLERS, ids=NAMES)
def test_each_step_is_turned_on_by_its_first_field_alone(spec):
    first = spec.reads[0]
    assert active_samplers(SamplingParams(**{first: EVERY_SAMPLER[first]})) == [spec.name]
    assert not spec.active(SamplingParams())


def test_greedy_decoding_leaves_out_exactly_the_draw_only_steps():
    every = SamplingParams(**EVERY_SAMPLER)
    left_out = set(active_samplers(every)) - set(active_samplers(every.replace(temperature=0)))
    # dynamic temperature replaces the fixed temperature, so "temperature" is not built either way
    assert left_out == {s.name for s in SAMPLERS if s.draw_only} - {"temperature"}


def test_temperature_last_moves_the_temperature_steps_to_the_end():
    moved = [s.name for s in SAMPLERS if s.temperature]
    assert moved == ["temperature", "dynamic_temperature", "quadratic_sampling"]
    assert sampler_order(SamplingParams(temperature_last=True)) == [n for n in NAMES if n not in moved] + moved


def test_an_unknown_sampler_is_named_with_the_table_order():
    with pytest.raises(InvalidParameter) as caught:
        SamplingParams(sampler_priority=["top_k", "top_q"])
    assert str(caught.value) == f"sampler_priority: unknown sampler 'top_q'; samplers: {', '.join(SAMPLER_ORDER)}"


def test_the_user_guide_lists_the_default_order():
    guide = (ROOT / "docs" / "user-guide.md").read_text()
    sentence = guide.split("which by\ndefault is text-generation-webui's:")[1].split(". Reorder")[0]
    assert re.findall(r"[a-z_]+", re.sub(r"\(.*?\)", "", sentence)) == list(SAMPLER_ORDER)


def test_each_step_is_built_by_the_one_class_that_names_it():
    """#47: a sampler's factory is its class's ``build``; defining the class registers it (no list to extend)."""
    from webui.engine.samplers import STEPS, Processor

    assert sorted(STEPS) == sorted(NAMES)
    assert all(FACTORIES[name] == cls.build for name, cls in STEPS.items())
    with pytest.raises(RuntimeError, match="'top_k' is built by both TopK and Another"):
        type("Another", (Processor,), {"step": "top_k"})
    assert STEPS["top_k"].__name__ == "TopK"
