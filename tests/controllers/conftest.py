"""The controllers' tests use tests/conftest.py's ``services`` (the tiny model loaded) and a fresh ActiveRequests."""

from __future__ import annotations

import pytest

from webui.controllers.generation import ActiveRequests


@pytest.fixture
def active():
    return ActiveRequests()
