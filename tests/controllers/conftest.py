"""Services over a fresh user data dir with the tiny random model loaded, for the controllers' tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import TEST_THREADS
from webui.config import AppConfig
from webui.controllers.generation import ActiveRequests
from webui.services import Services


@pytest.fixture
def services(tmp_path: Path, tiny_model_dir: Path):
    config = AppConfig(user_data_dir=tmp_path / "data", threads=TEST_THREADS, device="cpu", max_running=8)
    config.make_dirs()
    (config.models_dir / "tiny").symlink_to(tiny_model_dir, target_is_directory=True)
    made = Services.create(config)
    made.models.load("tiny")
    yield made
    made.close()


@pytest.fixture
def active():
    return ActiveRequests()
