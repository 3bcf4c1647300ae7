"""TemplatesController without a browser: choosing, saving, deleting and previewing instruction templates."""

from __future__ import annotations

import pytest

from webui.controllers import UserError
from webui.controllers.templates import MODEL_OWN_LABEL, TemplatesController

MINE = "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}<assistant>"


@pytest.fixture
def controller(services):
    return TemplatesController(services)


def test_the_model_own_template_is_the_default_and_shown(controller, services):
    view = controller.current()
    assert view.choice == MODEL_OWN_LABEL and "<|im_start|>" in view.source and "own template" in view.note
    assert controller.choices()[:2] == [MODEL_OWN_LABEL, "ChatML"]
    chosen = controller.choose("Alpaca")
    assert services.settings.get().chat_template == "Alpaca" and "### Instruction" in chosen.source
    assert controller.choose(MODEL_OWN_LABEL).choice == MODEL_OWN_LABEL and services.settings.get().chat_template == ""


def test_save_preview_and_delete_your_own(controller, services):
    with pytest.raises(UserError, match="The template was not saved: the template does not write the messages"):
        controller.save("Mine", "{% for m in messages %}x{% endfor %}")
    assert "Mine" not in controller.choices() and services.settings.get().chat_template == ""
    view = controller.save("Mine", MINE)
    assert view.choice == "Mine" and view.editable and services.settings.get().chat_template == "Mine"
    assert (services.config.templates_dir / "Mine.jinja").read_text() == MINE
    assert controller.preview(None, "Hello", "Be kind.", MINE) == "<system>Be kind.\n<user>Hello\n<assistant>"
    with pytest.raises(UserError, match="Preview: the chat template could not be rendered"):
        controller.preview(None, "Hello", "", "{% for %}")
    assert controller.delete("Mine").choice == MODEL_OWN_LABEL and "Mine" not in controller.choices()
    with pytest.raises(UserError, match="built in and cannot be deleted"):
        controller.delete("ChatML")


def test_a_model_without_a_template_shows_the_guess(controller, services, untemplated_model_dir):
    (services.config.models_dir / "bare").symlink_to(untemplated_model_dir, target_is_directory=True)
    services.models.load("bare")
    view = controller.current()
    assert view.note.startswith("⚠ this model has no chat template; using the built-in 'ChatML'")
    assert view.source.startswith("{% for m in messages %}<|im_start|>")
