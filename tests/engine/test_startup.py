"""What the app loads at start, and settings that survive restarts (or a broken settings file)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import TEST_THREADS
from tests.e2e.server import user_data_with_default_model
from webui.startup import load_startup_model
from webui.config import AppConfig
from webui.services import Services
from webui.settings import SettingsStore


@pytest.fixture
def make_services(tmp_path: Path, tiny_model_dir: Path, default_model_dir: Path):
    made = []

    def make(**config) -> Services:
        user_data = user_data_with_default_model(tmp_path / "data", default_model_dir)
        models = user_data / "models"
        models.mkdir(exist_ok=True)
        if not (models / "tiny").exists():
            (models / "tiny").symlink_to(tiny_model_dir, target_is_directory=True)
        cfg = AppConfig(user_data_dir=user_data, threads=TEST_THREADS, device="cpu", **config)
        cfg.make_dirs()
        services = Services.create(cfg)
        made.append(services)
        return services

    yield make
    for services in made:
        services.close()


def test_the_last_model_used_is_loaded_at_start(make_services):
    first = make_services()
    first.settings.update(last_model="tiny", load_options={"device": "cpu", "dtype": "float32", "threads": 1})
    first.close()
    again = make_services()
    load_startup_model(again)
    assert again.loaded.name == "tiny"


@pytest.mark.real_model
def test_a_remembered_model_that_fails_falls_back_to_the_default(make_services):
    services = make_services()
    services.settings.update(last_model="gone-missing")
    load_startup_model(services)
    assert services.loaded.name == "SmolLM2-135M-Instruct"


def test_explicit_model_wins_over_settings(make_services):
    services = make_services(model="tiny")
    services.settings.update(last_model="gone-missing")
    load_startup_model(services)
    assert services.loaded.name == "tiny"


def test_no_model_flag(make_services):
    services = make_services(no_model=True)
    load_startup_model(services)
    assert services.loaded is None


def test_unreadable_settings_are_set_aside_not_lost(tmp_path):
    path = tmp_path / "settings.json"
    path.write_text("{this is not json")
    store = SettingsStore(path)
    assert store.get().last_preset == "Balanced"
    kept = [p for p in tmp_path.iterdir() if p.name.startswith("settings.json.unreadable-")]
    assert len(kept) == 1 and kept[0].read_text() == "{this is not json"
    store.update(last_model="x")
    assert json.loads(path.read_text())["last_model"] == "x"


def test_loader_list_shows_missing_backends_with_install_hint(make_services):
    from tests.engine.test_loaders import FakeLoader
    from webui.controllers.model import ModelController

    services = make_services()
    services.registry.register(FakeLoader("ghost", requires=("definitely_not_installed_pkg",)))
    labels = dict((value, label) for label, value in ModelController(services).loader_choices())
    assert labels["transformers"] == "transformers"
    assert "unavailable: missing package 'definitely_not_installed_pkg'" in labels["ghost"]
    assert "install: pip install fake-backend" in labels["ghost"]


def test_load_options_from_the_command_line_apply_at_start_and_are_remembered(make_services):
    from loaders.base import ModelLoadError

    first = make_services(model="tiny", load_options=(("attn_implementation", "eager"),))
    load_startup_model(first)
    assert first.loaded.model.config._attn_implementation == "eager"
    first.close()
    again = make_services(model="tiny")  # no --load-option: as the model was last loaded
    load_startup_model(again)
    assert again.loaded.name == "tiny" and again.loaded.load_options["attn_implementation"] == "eager"
    wrong = make_services(model="tiny", load_options=(("n_ctx", "4096"),))
    with pytest.raises(ModelLoadError, match="the transformers loader has no load option 'n_ctx'"):
        load_startup_model(wrong)
