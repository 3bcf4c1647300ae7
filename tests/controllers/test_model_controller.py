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
    assert controller.unload().text == "No model loaded." and services.loaded is None
    info = controller.load("tiny", AUTO_LOADER, "cpu", "float32", 1)
    assert "**tiny** · loader `transformers`" in info.text and info.template
    assert services.settings.get().last_model == "tiny" and controller.selected_model() == "tiny"
    assert {"tiny", "broken"} <= set(controller.model_names())
    assert [value for _, value in controller.loader_choices()][0] == AUTO_LOADER


def test_a_failed_load_keeps_the_model_and_says_so(controller, services):
    with pytest.raises(UserError, match=r"Still loaded: tiny\."):
        controller.load("broken", AUTO_LOADER, "cpu", "float32", 1)
    assert services.loaded.name == "tiny"
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
    assert services.active_loras == (("secret", 0.5),)
    assert "No adapter attached" in controller.detach("secret")
    with pytest.raises(UserError, match="Choose an adapter first"):
        controller.attach(None, 1.0)
    with pytest.raises(UserError, match="not attached"):
        controller.detach("secret")


def test_capabilities_and_the_prefix_cache_line(controller):
    table = controller.capability_table()
    assert "| transformers | yes |" in table and "| remote |" in table
    assert ("| embedding | yes | sentence-transformers | cpu, cuda, mps | no | no | no | no | no | "
            "none: embeddings only |") in table
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


def set_budget(services, mb: float) -> None:
    """Give the model manager a memory budget of ``mb`` MiB (--memory-budget)."""
    from dataclasses import replace

    services.models.config = replace(services.models.config, memory_budget_mb=mb)


def free_mib(text: str) -> int:
    """The budget's free MiB the estimate line states."""
    import re

    return int(re.search(r"budget has ([\d,]+) MiB free", text).group(1).replace(",", ""))


def test_the_memory_line_follows_every_load_unload_and_switch(controller, services, tiny_model_dir):
    (services.config.models_dir / "tiny-copy").symlink_to(tiny_model_dir, target_is_directory=True)
    set_budget(services, 1000)
    line = lambda: controller.estimate_text("tiny-copy", AUTO_LOADER, "cpu", "float32", 1, {})  # noqa: E731
    size = round(services.loaded.memory_bytes() / 2**20)
    assert free_mib(line()) == 1000 - size
    controller.load("tiny-copy", AUTO_LOADER, "cpu", "float32", 1)
    assert free_mib(line()) == 1000 - 2 * size
    controller.use("tiny")
    assert free_mib(line()) == 1000 - 2 * size
    controller.unload()
    assert free_mib(line()) == 1000 - size
    controller.unload()
    assert free_mib(line()) == 1000 and "⚠" not in line()


def test_a_load_that_can_never_fit_says_so_and_what_helps_not_unloading(controller, services, tiny_model_dir):
    (services.config.models_dir / "tiny-copy").symlink_to(tiny_model_dir, target_is_directory=True)
    size = services.loaded.memory_bytes() / 2**20
    set_budget(services, size * 0.9)  # less than one model: no unloading can help
    warning = controller.estimate_text("tiny-copy", AUTO_LOADER, "cpu", "float32", 1, {})
    assert "⚠ **More than the whole memory budget**" in warning and "smaller dtype" in warning
    assert "--memory-budget" in warning and "unload" not in warning.replace("every other model unloaded", "")
    with pytest.raises(UserError) as refused:
        controller.load("tiny-copy", AUTO_LOADER, "cpu", "float32", 1)
    message = str(refused.value)
    assert "more than the whole" in message and "cannot load even with every other model unloaded" in message
    assert "smaller dtype (bfloat16 or float16" in message and "larger --memory-budget" in message
    assert "unload one" not in message and "without keeping" not in message


def test_a_load_that_fits_once_another_is_unloaded_says_which(controller, services, tiny_model_dir):
    (services.config.models_dir / "tiny-copy").symlink_to(tiny_model_dir, target_is_directory=True)
    size = services.loaded.memory_bytes() / 2**20
    set_budget(services, size * 1.5)  # one fits, not two
    warning = controller.estimate_text("tiny-copy", AUTO_LOADER, "cpu", "float32", 1, {})
    assert "⚠ **It does not fit beside the loaded models**: unload one in the Model tab (tiny frees enough)" \
        in warning
    assert "⚠" not in controller.estimate_text("tiny-copy", AUTO_LOADER, "cpu", "float32", 1, {}, keep_others=False)
    assert "⚠" not in controller.estimate_text("tiny", AUTO_LOADER, "cpu", "float32", 1, {})  # it replaces itself
    with pytest.raises(UserError, match=r"unload one in the Model tab \(tiny frees enough\), or load without "
                                        r"keeping the others"):
        controller.load("tiny-copy", AUTO_LOADER, "cpu", "float32", 1)
    assert controller.loaded_names() == ["tiny"]


def test_the_dtype_applies_only_to_loaders_that_take_one(controller):
    assert controller.takes_dtype("tiny", AUTO_LOADER) and controller.takes_dtype("tiny", "transformers")
    assert not controller.takes_dtype("tiny", "llamacpp") and not controller.takes_dtype("tiny", "exllamav2")
    assert controller.takes_dtype(None, None)


def test_the_tab_says_whether_the_model_takes_images(controller, services, tiny_llava_dir):
    """A vision-language folder in the models dir loads like any model, and the tab says it takes images."""
    assert "images: no (text only)" in controller.info().text
    (services.config.models_dir / "tiny-llava").symlink_to(tiny_llava_dir, target_is_directory=True)
    info = controller.load("tiny-llava", AUTO_LOADER, "cpu", "float32", 1)
    assert "**tiny-llava** · loader `transformers`" in info.text and "images: yes" in info.text
    assert "| images |" in controller.capability_table()


def test_an_unavailable_loader_gets_no_estimate_but_why_and_how_to_install(controller, services):
    """#46 item 11: a loader whose backend is missing says so where the estimate would be (it cannot load)."""
    status = {s.name: s for s in services.registry.status()}
    if status["exllamav2"].available:
        pytest.skip("exllamav2 is installed and usable on this machine")
    said = controller.estimate_text("tiny", "exllamav2", "auto", "auto", None, {})
    assert said.startswith("⚠ **The exllamav2 loader is unavailable** (") and "needs about" not in said
    assert f"Install: {status['exllamav2'].install_hint}." in said
    assert "needs about" in controller.estimate_text("tiny", "transformers", "cpu", "float32", 1, {})
