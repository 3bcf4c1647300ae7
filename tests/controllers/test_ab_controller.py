"""ABController without a browser: two settings streamed together, each side's mistakes named."""

from __future__ import annotations

import pytest

from loaders.base import attached_loras
from tests.conftest import SECRET_PROMPT, SECRET_WORD, last
from webui.controllers import UserError
from webui.controllers.ab import CURRENT, IN_USE, NO_ADAPTER, ABController, Side
from webui.controllers.generation import status_text
from webui.engine import GenerationRequest, SamplingParams

GREEDY = SamplingParams(temperature=0, max_new_tokens=5, ban_eos=True)


@pytest.fixture
def controller(services, active):
    return ABController(services, active)



def test_both_sides_stream_and_side_b_starts_on_a_preset(controller):
    a, b = controller.default_sides()
    assert a == Side(CURRENT, NO_ADAPTER) and b.parameters in controller.choices()[0] and b.parameters != CURRENT
    texts, notes = last(controller.run("Hello", True, (a, Side(CURRENT, NO_ADAPTER)), GREEDY, "tab"))
    assert texts[0] == texts[1] and texts[0] and all("finish: length" in n for n in notes)
    texts, notes = last(controller.run("Hello", False, (a, b), GREEDY, "tab"))
    assert all("seed" in n for n in notes)


def test_mistakes_name_the_side(controller, services):
    with pytest.raises(UserError, match="Type a prompt"):
        list(controller.run(" ", True, controller.default_sides(), GREEDY, "tab"))
    with pytest.raises(UserError, match="side B"):
        list(controller.run("Hi", True, (Side(CURRENT, None), Side(None, None)), GREEDY, "tab"))
    with pytest.raises(UserError, match="Side A: unknown preset"):
        list(controller.run("Hi", True, (Side("Nope", None), Side(CURRENT, None)), GREEDY, "tab"))
    services.models.unload()
    with pytest.raises(UserError, match="No model is loaded"):
        list(controller.run("Hi", True, controller.default_sides(), GREEDY, "tab"))


def test_each_side_on_its_own_loaded_model(controller, services, tiny_model_dir):
    (services.config.models_dir / "tiny-copy").symlink_to(tiny_model_dir, target_is_directory=True)
    alone, _ = last(controller.run("Hello", True, (Side(CURRENT, None), Side(CURRENT, None)), GREEDY, "tab"))
    services.models.load("tiny-copy", make_current=False)
    assert controller.choices()[2] == [IN_USE, "tiny", "tiny-copy"]
    texts, notes = last(controller.run("Hello", True, (Side(CURRENT, None, "tiny"), Side(CURRENT, None, "tiny-copy")),
                                       GREEDY, "tab"))
    assert texts == alone and all("finish: length" in n for n in notes)  # same weights: the same greedy tokens
    assert services.models.slot("tiny-copy").engine.stats().model == "tiny-copy"
    with pytest.raises(UserError, match=r"Side B: the model 'nope' is not loaded; loaded: tiny, tiny-copy"):
        list(controller.run("Hi", True, (Side(CURRENT, None), Side(CURRENT, None, "nope")), GREEDY, "tab"))
    with pytest.raises(UserError, match=r"Side A: the adapter 'secret' cannot run on tiny-copy: LoRA adapter "
                                        r"'secret' does not exist in .*; choose another"):
        list(controller.run("Hi", True, (Side(CURRENT, "secret", "tiny-copy"), Side(CURRENT, None)), GREEDY, "tab"))


def test_a_side_on_a_preset_keeps_the_parameters_tabs_length_unless_the_preset_sets_one(controller, services):
    texts, notes = last(controller.run("Hello", False, (Side(CURRENT, None), Side("Creative", None)),
                                       GREEDY.replace(max_new_tokens=3), "tab"))
    assert int(notes[1].split(" tokens")[0]) <= 3  # not the neutral 512: a preset does not set the length
    assert notes[1].endswith("max_new_tokens 3 (Parameters tab)") and notes[0].endswith("(Parameters tab)")
    services.presets.save("Short", SamplingParams(temperature=0, max_new_tokens=2, ban_eos=True))
    texts, notes = last(controller.run("Hello", False, (Side(CURRENT, None), Side("Short", None)), GREEDY, "tab"))
    assert notes[1].startswith("2 tokens") and notes[1].endswith("max_new_tokens 2 (preset Short)")
    assert notes[0].startswith("5 tokens") and notes[0].endswith("max_new_tokens 5 (Parameters tab)")


def test_a_sides_adapter_runs_with_its_request_alone_and_leaves_the_models_adapters_as_they_were(
        controller, services, tiny_lora_dir):
    (services.config.loras_dir / "secret").symlink_to(tiny_lora_dir, target_is_directory=True)
    assert "secret" in controller.choices()[1]  # offered from the loras dir: it fits the model, nothing attached
    assert attached_loras(services.loaded) == {} and services.active_loras == ()
    texts, notes = last(controller.run(SECRET_PROMPT, False, (Side(CURRENT, NO_ADAPTER), Side(CURRENT, "secret")),
                                       GREEDY, "tab"))
    assert texts[1].startswith(SECRET_WORD) and not texts[0].startswith(SECRET_WORD)  # only B runs with it
    assert "· LoRA: secret ×1 ·" in notes[1] and "· LoRA: none ·" in notes[0]  # the stats name each side's adapter
    assert services.active_loras == () and "LoRA" not in status_text(services)  # the model is as it was
    assert "secret" in attached_loras(services.loaded)  # loaded for the requests that name it
    chat = services.engine.generate(GenerationRequest(SECRET_PROMPT, GREEDY, loras=services.active_loras))
    assert chat.text == texts[0]  # a request that names no adapter (Chat's) runs without it
    again, _ = last(controller.run(SECRET_PROMPT, False, (Side(CURRENT, "secret"), Side(CURRENT, None)), GREEDY,
                                   "tab"))
    assert again == [texts[1], texts[0]] and services.active_loras == ()
