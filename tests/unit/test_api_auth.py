"""Who may call what: API keys for every route, the admin key for management, none at all on 127.0.0.1."""

from __future__ import annotations

from types import SimpleNamespace

import httpx
import pytest
from fastapi import Depends, FastAPI

from tests.conftest import run_async
from webui.api.auth import require_admin, require_key
from webui.api.errors import install_error_handlers
from webui.api.serving import APIConfig


def app_with(config: APIConfig) -> FastAPI:
    app = FastAPI()
    install_error_handlers(app)
    app.state.serving = SimpleNamespace(config=config)

    @app.get("/use", dependencies=[Depends(require_key)])
    def use():
        return {"ok": True}

    @app.get("/manage", dependencies=[Depends(require_key), Depends(require_admin)])
    def manage():
        return {"ok": True}

    return app


def status(app: FastAPI, path: str, key: str | None) -> int:
    async def go():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            return (await client.get(path, headers={"Authorization": f"Bearer {key}"} if key else {})).status_code
    return run_async(go())


@pytest.mark.parametrize("config,key,use,manage", [
    (APIConfig(), None, 200, 200),  # no key at all: open (the API then listens on 127.0.0.1 only)
    (APIConfig(api_keys=("u",)), "u", 200, 403),  # API keys, no admin key: management is off
    (APIConfig(api_keys=("u",)), None, 401, 401),
    (APIConfig(api_keys=("u", "v"), admin_keys=("a",)), "v", 200, 403),
    (APIConfig(api_keys=("u",), admin_keys=("a",)), "a", 200, 200),  # an admin key is an API key too
    (APIConfig(api_keys=("u",), admin_keys=("a",)), "x", 401, 401),
    (APIConfig(admin_keys=("a",)), None, 401, 401),  # an admin key alone closes the API too
])
def test_keys(config, key, use, manage):
    app = app_with(config)
    assert (status(app, "/use", key), status(app, "/manage", key)) == (use, manage)


def test_keys_stay_out_of_reprs():
    assert "secret" not in repr(APIConfig(api_keys=("secret",), admin_keys=("secret",)))


def test_keys_from_the_command_line_and_files(tmp_path):
    from webui.config import config_from_args

    keys = tmp_path / "keys"
    keys.write_text("# comment\nc\n\n  d  \nb\n")
    config = config_from_args(["--api-key", "a", "--api-key", "b", "--api-key-file", str(keys), "--admin-key", "z"])
    assert config.api_keys == ("a", "b", "c", "d") and config.admin_keys == ("z",)
    with pytest.raises(SystemExit, match="--api-key-file|--api-key: cannot read"):
        config_from_args(["--api-key-file", str(tmp_path / "missing")])
    with pytest.raises(SystemExit, match="may not be empty"):
        config_from_args(["--admin-key", " "])
    assert config_from_args(["--api-key", "My API Key"]).api_keys == ("My API Key",)  # openai-python's tests' key


def test_nowebui_serves_the_api_alone_and_its_exposure_report_names_no_ui():
    from webui.config import config_from_args
    from webui.exposure import exposure_report

    config = config_from_args(["--nowebui", "--listen", "--api-key", "k"])
    assert config.api and config.nowebui
    lines = exposure_report(config)
    assert lines[0].startswith("--listen with --nowebui: no UI is served")
    assert not any("chat" in line or "login" in line for line in lines)
    assert any("with 1 key(s)" in line for line in lines)
    with pytest.raises(SystemExit, match="which --nowebui turns off"):
        config_from_args(["--nowebui", "--ui-auth", "ann:pw"])
