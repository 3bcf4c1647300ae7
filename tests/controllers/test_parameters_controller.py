"""ParametersController without a browser: values typed in the controls, presets saved, deleted, applied."""

from __future__ import annotations

import pytest

from webui.controllers import UserError
from webui.controllers.parameters import (CONSTRAINT_FORMS, ParametersController, constraint_fields, constraint_json,
                                          params_from_values, same_constraint, values_from_params)
from webui.engine.params import SamplingParams, param_fields

NAMES = [name for name, *_ in param_fields()]


@pytest.fixture
def controller(services):
    return ParametersController(services)


def values(params: SamplingParams = SamplingParams(), **changes):
    out = dict(zip(NAMES, values_from_params(params)))
    out.update(changes)
    return out


def test_control_values_round_trip():
    params = SamplingParams(temperature=0.7, stop=("\n", "END"), seed=5, logit_bias={2: -100}, ban_eos=True)
    assert params_from_values(values(params)) == params
    assert params_from_values(values(seed=-1)).seed is None and params_from_values(values(seed=42.0)).seed == 42


@pytest.mark.parametrize("label, text, value", [
    ("none", "ignored", {}),
    ("JSON (any object)", "", {"json_object": True}),
    ("JSON schema", '{"type": "object", "properties": {"b": {"type": "integer"}, "a": {}}}',
     {"json": {"type": "object", "properties": {"b": {"type": "integer"}, "a": {}}}}),
    ("regex", "[0-9]{3} ", {"regex": "[0-9]{3} "}),  # spaces are part of a regex
    ("choice (one a line)", "yes\n\nno\n", {"choice": ["yes", "no"]}),
    ("grammar (GBNF or Lark)", 'root ::= "a" | "b"', {"grammar": 'root ::= "a" | "b"'}),
])
def test_the_constrain_output_control_gives_structured_outputs_and_shows_it_back(label, text, value):
    held = constraint_json(label, text)
    params = params_from_values(values(structured_outputs=held))
    assert params.to_dict()["structured_outputs"] == value
    shown = dict(zip(NAMES, values_from_params(params)))["structured_outputs"]
    assert same_constraint(shown, held)
    back_label, back_text = constraint_fields(shown)
    assert back_label == label
    if CONSTRAINT_FORMS[label] not in (None, "json_object"):
        assert same_constraint(constraint_json(back_label, back_text), held)


def test_a_form_without_text_is_no_constraint_and_a_bad_one_is_named(controller, services):
    assert constraint_json("regex", "") == "" and constraint_json("choice (one a line)", "\n \n") == ""
    before = services.settings.get()
    for held, said in ((constraint_json("JSON schema", '{"type": '), "structured_outputs: the JSON schema is not "
                                                                     "valid JSON"),
                       (constraint_json("regex", "[a-"), "structured_outputs: invalid regex")):
        edited = controller.edit(values(structured_outputs=held), "structured_outputs")
        assert edited.params is None and edited.message.startswith(f"⚠ {said}"), edited
    assert services.settings.get() == before


@pytest.mark.parametrize("name, bad, said", [
    ("max_new_tokens", 99999999, "⚠ max_new_tokens must be in [1, 32768], got 99999999. Not used; 512 stays saved: "
                                 "correct it (Send asks for that first)."),
    ("max_new_tokens", None, "⚠ type a number in [1, 32768] (the box is empty or holds no number). Not used; 512 "
                             "stays saved"),
    ("seed", 1.5, "⚠ seed must be an integer in [0, 9223372036854775807], got 1.5. Not used; -1 stays saved"),
    ("logit_bias", "{2: -100", "⚠ logit_bias must be a JSON object"),
])
def test_a_wrong_value_is_named_with_what_it_takes_and_kept_out(controller, services, name, bad, said):
    """#30 (3): never silently changed: the message (shown beside the control) names it, and what is saved stays."""
    before = services.settings.get()
    edited = controller.edit(values(**{name: bad}), name)
    assert edited.params is None and not edited.changed and edited.message.startswith(said), edited.message
    assert services.settings.get() == before  # the last good values are kept
    with pytest.raises(UserError, match="Parameters tab: " + name):  # and Send refuses them
        controller.current(values(**{name: bad}))


@pytest.mark.parametrize("typed, used, said", [
    (9, 5.0, "⚠ 9 is outside [0, 5]: the slider goes to 5, and 5 is used."),
    (-1, 0.0, "⚠ -1 is outside [0, 5]: the slider goes to 0, and 0 is used."),
    (None, 0.0, "⚠ The box is empty: the slider goes to 0, and 0 is used."),
])
def test_a_slider_left_out_of_range_is_used_where_it_goes_and_says_so(controller, services, typed, used, said):
    edited = controller.edit(values(SamplingParams(temperature=0.7), temperature=typed), "temperature")
    assert edited.message == said and edited.params.temperature == used and edited.changed
    assert services.settings.get().params["temperature"] == used


def test_another_wrong_value_keeps_a_good_edit_from_being_saved_and_says_which(controller, services):
    edited = controller.edit(values(temperature=0.5, seed=1.5), "temperature")
    assert edited.params is None and edited.message == "⚠ Not saved yet: seed is wrong (its message is beside it)."


def test_an_edit_is_remembered_and_the_preset_no_longer_claims_it(controller, services):
    controller.apply("Precise")
    assert services.settings.get().last_preset == "Precise"
    edited = controller.edit(values(controller.saved()[0], stop="END\nSTOP"), "stop")
    params, preset, note = controller.saved()
    assert edited.changed and edited.message == "" and params.stop == ("END", "STOP") and preset is None
    assert note == "" and not controller.edit(values(params), "stop").changed  # the same values again


def test_save_apply_and_delete_a_preset(controller, services):
    mine = SamplingParams(temperature=0.3, top_k=7)
    assert controller.save(" mine ", mine) == "mine"
    assert "mine" in controller.presets.names() and controller.apply("mine").params == mine
    assert controller.saved()[:2] == (mine, "mine")
    controller.delete("mine")
    assert "mine" not in controller.presets.names() and services.settings.get().last_preset is None
    with pytest.raises(UserError, match="built-in preset"):
        controller.delete("Precise")
    with pytest.raises(UserError, match="Choose a preset"):
        controller.delete(None)
    with pytest.raises(UserError, match="plain name"):
        controller.save("../x", mine)


def test_neutral_resets_every_sampler(controller, services):
    controller.apply("Precise")
    assert controller.neutral() == SamplingParams()
    assert controller.saved() == (SamplingParams(), None, "")


def test_a_preset_that_cannot_be_applied_says_so(controller, services):
    (services.config.presets_dir / "Broken.yaml").write_text("temperature: 0.5\ntop_q: 0.9\n")
    with pytest.raises(UserError, match="unknown sampling parameter 'top_q'"):
        controller.apply("Broken")
    services.settings.update(last_preset="Broken", params=None)
    params, preset, note = controller.saved()
    assert params == SamplingParams() and preset is None
    assert "Preset 'Broken' could not be applied" in note and "top_q" in note
    services.settings.update(params={"temperature": 99})
    assert "saved parameters could not be used" in controller.saved()[2]
