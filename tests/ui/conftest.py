"""A plain workbench server (the default model, a fresh user data dir) per browser test module."""

from __future__ import annotations

import pytest

from tests.e2e.server import running_server, user_data_with_default_model


@pytest.fixture(scope="module")
def server(request, tmp_path_factory, default_model_dir):
    name = request.module.__name__.rsplit(".", 1)[-1]
    user_data = user_data_with_default_model(tmp_path_factory.mktemp(name) / "data", default_model_dir)
    with running_server(user_data) as srv:
        srv.user_data = user_data
        yield srv
