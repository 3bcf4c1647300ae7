"""ModelController without a browser: load, unload, a failed load that keeps the model, adapters."""

from __future__ import annotations

import pytest

from webui.controllers import UserError
from webui.controllers.model import AUTO_LOADER, ModelController


@pytest.fixture
def controller(services, tiny_lora_dir):
    (services.config.loras_dir / "secret").symlink_to(tiny_lora_dir, target_is_directory=True)
    broken = services.config.models_dir / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{}")
    return ModelController(services)


def test_load_unload_and_what_the_tab_says(controller, services):
    assert "**tiny**" in controller.info().text and "context length" in controller.info().text
    assert controller.unload().text == "No model loaded." and services.models.loaded is None
    info = controller.load("tiny", AUTO_LOADER, "cpu", "float32", 1)
    assert "**tiny** · loader `transformers`" in info.text and info.template
    assert services.settings.get().last_model == "tiny" and controller.selected_model() == "tiny"
    assert {"tiny", "broken"} <= set(controller.model_names())
    assert [value for _, value in controller.loader_choices()][0] == AUTO_LOADER


def test_a_failed_load_keeps_the_model_and_says_so(controller, services):
    with pytest.raises(UserError, match=r"Still loaded: tiny\."):
        controller.load("broken", AUTO_LOADER, "cpu", "float32", 1)
    assert services.models.loaded.name == "tiny"
    with pytest.raises(UserError, match="Choose a model first"):
        controller.load(None, AUTO_LOADER, "cpu", "float32", 1)
    with pytest.raises(UserError, match="unknown model 'nope'"):
        controller.load("nope", AUTO_LOADER, "cpu", "float32", 1)
    with pytest.raises(UserError, match="base URL"):
        controller.connect("  ", "", "")


def test_attach_and_detach_an_adapter(controller, services):
    assert controller.lora_choices() == ["secret"]
    assert "No adapter attached" in controller.active_text()
    assert controller.attach("secret", 0.5) == "Attached: **secret** ×0.5"
    assert services.models.active_loras == (("secret", 0.5),)
    assert "No adapter attached" in controller.detach("secret")
    with pytest.raises(UserError, match="Choose an adapter first"):
        controller.attach(None, 1.0)
    with pytest.raises(UserError, match="not attached"):
        controller.detach("secret")


def test_capabilities_and_the_prefix_cache_line(controller):
    table = controller.capability_table()
    assert "| transformers | yes |" in table and "| remote |" in table
    assert "Prefix cache" in controller.clear_prefix_cache()


def test_two_models_loaded_the_table_use_and_unload(controller, services, tiny_model_dir):
    (services.config.models_dir / "tiny-copy").symlink_to(tiny_model_dir, target_is_directory=True)
    info = controller.load("tiny-copy", AUTO_LOADER, "cpu", "float32", 1)
    assert "**tiny-copy**" in info.text and controller.loaded_names() == ["tiny", "tiny-copy"]
    table = controller.loaded_table()
    assert "| ● in use | tiny-copy | transformers | cpu/float32 |" in table and "|  | tiny | transformers |" in table
    assert "MiB budget (`--memory-budget`)" in table and "generate side by side" in table
    assert "**tiny**" in controller.use("tiny").text and controller.current_name() == "tiny"
    with pytest.raises(UserError, match=r"the model 'nope' is not loaded; loaded: tiny, tiny-copy"):
        controller.use("nope")
    assert "**tiny-copy**" in controller.unload().text  # the one in use goes; the other is used next
    assert controller.loaded_names() == ["tiny-copy"]
    controller.load("tiny", AUTO_LOADER, "cpu", "float32", 1, keep_others=False)
    assert controller.loaded_names() == ["tiny"]


def test_the_loaders_options_form_values_estimate_and_what_the_model_was_loaded_with(controller, services):
    assert controller.effective_loader("tiny", AUTO_LOADER) == "transformers"  # the loader that reads it
    assert controller.effective_loader("tiny", "llamacpp") == "llamacpp" and controller.effective_loader(None, None) \
        is None
    assert controller.option_values("tiny", "transformers")["attn_implementation"] == "auto"  # never loaded so
    assert "needs about" in controller.estimate_text("tiny", AUTO_LOADER, "cpu", "float32", 1, {})
    assert controller.estimate_text("tiny", AUTO_LOADER, "cpu", "float32", 1, {"n_ctx": 5}).startswith(
        "⚠ the transformers loader has no load option 'n_ctx'")
    info = controller.load("tiny", AUTO_LOADER, "cpu", "float32", 1,
                           extra={"attn_implementation": "eager", "trust_remote_code": True})
    assert "`attn_implementation=eager`" in info.text and "⚠ trust_remote_code is on" in info.text
    assert controller.option_values("tiny", "transformers")["attn_implementation"] == "eager"  # remembered
    with pytest.raises(UserError, match=r"load_in=8bit needs a CUDA device.*Still loaded: tiny\."):
        controller.load("tiny", AUTO_LOADER, "cpu", "float32", 1, extra={"load_in": "8bit"})
