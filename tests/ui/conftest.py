"""The workbench server the browser test modules share (the default model, a fresh user data dir), and a module's
own for one whose tests change what others would see (it sets OWN_SERVER = True)."""

from __future__ import annotations

import contextlib

import pytest

from tests.e2e.server import running_server, user_data_with_default_model


@contextlib.contextmanager
def _server(tmp_path_factory, default_model_dir, name: str):
    user_data = user_data_with_default_model(tmp_path_factory.mktemp(name) / "data", default_model_dir)
    with running_server(user_data) as srv:
        srv.user_data = user_data
        yield srv


@pytest.fixture(scope="session")
def shared_server(tmp_path_factory, default_model_dir):
    """One server for the modules that only add chats, batches and requests of their own (each start costs about
    ten seconds)."""
    with _server(tmp_path_factory, default_model_dir, "ui-shared") as srv:
        yield srv


@pytest.fixture(scope="module")
def server(request, tmp_path_factory, default_model_dir):
    if not getattr(request.module, "OWN_SERVER", False):
        yield request.getfixturevalue("shared_server")
        return
    with _server(tmp_path_factory, default_model_dir, request.module.__name__.rsplit(".", 1)[-1]) as srv:
        yield srv


@pytest.fixture(autouse=True)
def _close_pages_left_open(request):
    """Close the pages a test left open (a failed one never reaches its page.close()), once the failure's
    screenshots are taken: an idle open page and its server use about a fifth of a core (the status line's
    request each second), which slowed every later test."""
    yield
    if "browser" in request.fixturenames:
        for context in request.getfixturevalue("browser").contexts:
            for page in context.pages:
                page.close()

