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
                       (constraint_json("JSON schema", '{"type": "objectx"}'), "structured_outputs: not a valid JSON "
                                                                               "schema: Invalid type: objectx"),
                       (constraint_json("regex", "[a-"), "structured_outputs: invalid regex")):
        edited = controller.edit(values(controller.saved()[0], structured_outputs=held), "structured_outputs")
        message = edited.messages["structured_outputs"]
        assert not edited.changed and said in message and message.endswith("; using none (the last good value)."), \
            message
    assert services.settings.get() == before


# #46 (7): one rule for every field: the box keeps what was typed, the value is not used, the last good value
# (what was used before it was typed) is, and the message beside the field says all three.
@pytest.mark.parametrize("name, typed, said", [
    ("temperature", "-1", "⚠ -1 is not used: temperature must be in [0, 5]; using 0.7 (the last good value)."),
    ("temperature", "9", "⚠ 9 is not used: temperature must be in [0, 5]; using 0.7 (the last good value)."),
    ("temperature", "abc", "⚠ abc is not used: temperature must be a number in [0, 5]; using 0.7 (the last good "
                           "value)."),
    ("temperature", "", "⚠ An empty box is not used: temperature must be a number in [0, 5]; using 0.7 (the last "
                        "good value)."),
    ("top_p", 1.5, "⚠ 1.5 is not used: top_p must be in (0, 1]; using 0.9 (the last good value)."),
    ("max_new_tokens", "0", "⚠ 0 is not used: max_new_tokens must be in [1, 32768]; using 200 (the last good "
                            "value)."),
    ("max_new_tokens", 99999999, "⚠ 99999999 is not used: max_new_tokens must be in [1, 32768]; using 200"),
    ("max_new_tokens", None, "⚠ An empty box is not used: max_new_tokens must be a number in [1, 32768]; using 200"),
    ("seed", "1.5", "⚠ 1.5 is not used: seed must be an integer in [0, 9223372036854775807]; using 7 (the last good "
                    "value)."),
    ("logit_bias", "{2: -100", "⚠ {2: -100 is not used: logit_bias must be a JSON object like {\"2\": -100}; using "
                               "none (the last good value)."),
    ("stop", "a\n" + "x" * 1001, f"⚠ a · {'x' * 35}… is not used: stop strings are at most 1000 characters long, "
                                 "got one of 1001; using END (the last good value)."),
])
def test_a_wrong_value_is_not_used_the_last_good_one_is_and_its_message_says_so(controller, services, name, typed,
                                                                                said):
    good = controller.use(SamplingParams(temperature=0.7, top_p=0.9, max_new_tokens=200, seed=7, stop=("END",)))
    before = services.settings.get()
    edited = controller.edit(values(good, **{name: typed}), name)
    assert edited.messages[name].startswith(said), edited.messages[name]
    assert list(edited.messages) == [name] and edited.params == good and not edited.changed
    assert services.settings.get() == before  # the last good values stay saved
    assert controller.current(values(good, **{name: typed})) == good  # and generation uses them


def test_a_right_value_typed_beside_a_wrong_one_is_used_and_the_wrong_one_still_is_not(controller, services):
    controller.use(SamplingParams(temperature=0.7, seed=7))
    edited = controller.edit(values(controller.saved()[0], temperature="0.5", seed="1.5"), "temperature")
    assert edited.params.temperature == 0.5 and edited.params.seed == 7 and edited.changed
    assert list(edited.messages) == ["seed"] and services.settings.get().params["temperature"] == 0.5
    assert controller.current(values(edited.params, top_k="40", seed="x")).top_k == 40


def test_numbers_typed_as_text_are_read(controller):
    used = controller.current(values(temperature=" 0.45", max_new_tokens="64", seed="-1", top_k="1e1"))
    assert (used.temperature, used.max_new_tokens, used.seed, used.top_k) == (0.45, 64, None, 10)
    assert controller.current(values(seed="")).seed is None  # an empty seed box: random


def test_a_rule_between_fields_blames_the_value_just_typed(controller, services):
    controller.use(SamplingParams(min_new_tokens=10, max_new_tokens=100))
    edited = controller.edit(values(controller.saved()[0], max_new_tokens="5"), "max_new_tokens")
    assert edited.params.max_new_tokens == 100 and list(edited.messages) == ["max_new_tokens"]
    assert edited.messages["max_new_tokens"] == ("⚠ 5 is not used: min_new_tokens must be <= max_new_tokens (5); "
                                                 "using 100 (the last good value).")
    edited = controller.edit(values(controller.saved()[0], max_new_tokens="5", min_new_tokens="2"), "min_new_tokens")
    assert (edited.params.min_new_tokens, edited.params.max_new_tokens) == (2, 5) and edited.messages == {}


def test_values_changed_from_a_preset_say_which_and_typed_back_are_the_preset_again(controller, services):
    """#46 (12): the preset's name went blank on a change, without a word that the values were custom."""
    precise = controller.apply("Precise")
    assert controller.preset_line("Precise").startswith("'Precise' is built in: it cannot be deleted.")
    edited = controller.edit(values(precise.params, temperature="1.3"), "temperature")
    assert edited.changed and services.settings.get().last_preset is None
    assert controller.preset_line(None).startswith("Custom values: changed from 'Precise': temperature.")
    controller.edit(values(edited.params, top_k="3"), "top_k")
    assert controller.preset_line(None).startswith("Custom values: changed from 'Precise': temperature, top_k.")
    controller.edit(values(precise.params), "top_k")  # every value typed back
    assert services.settings.get().last_preset == "Precise" and services.settings.get().changed_from is None
    controller.neutral()
    assert controller.preset_line(None).startswith("Custom values (no preset).")
    controller.save("mine", SamplingParams(top_k=3))
    assert controller.preset_line("mine") == ""  # the user's own: Delete is offered


def test_an_edit_is_remembered_and_the_preset_no_longer_claims_it(controller, services):
    controller.apply("Precise")
    assert services.settings.get().last_preset == "Precise"
    edited = controller.edit(values(controller.saved()[0], stop="END\nSTOP"), "stop")
    params, preset, note = controller.saved()
    assert edited.changed and edited.messages == {} and params.stop == ("END", "STOP") and preset is None
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
    assert not controller.presets.is_own("Precise") and not controller.presets.is_own("../x")
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
