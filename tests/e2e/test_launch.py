"""`python launch.py` for real: flags, bad start-up input, a second start without conversion."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import ROOT
from tests.e2e.server import free_port, running_server, user_data_with_default_model

pytestmark = pytest.mark.real_model


def test_help_lists_every_flag():
    out = subprocess.run([sys.executable, str(ROOT / "launch.py"), "--help"], capture_output=True, text=True,
                         check=True).stdout
    for flag in ("--model", "--loader", "--models-dir", "--user-data-dir", "--listen", "--port", "--api",
                 "--api-port", "--api-key", "--lora", "--device", "--dtype", "--threads"):
        assert flag in out, flag


@pytest.mark.parametrize("args,message", [
    (["--model", "nope"], "unknown model 'nope'"),
    (["--model", "/nonexistent/model"], "does not exist"),
    (["--dtype", "float64"], "invalid choice"),
    (["--loader", "nope"], "unknown loader 'nope'"),
    (["--lora", "nope"], "LoRA adapter 'nope' does not exist"),
    (["--nowebui", "--ui-auth", "ann:pw"], "which --nowebui turns off"),
])
def test_bad_startup_input_exits_with_a_clear_message(tmp_path, default_model_dir, args, message):
    user_data = user_data_with_default_model(tmp_path / "data", default_model_dir)
    proc = subprocess.run([sys.executable, str(ROOT / "launch.py"), "--user-data-dir", str(user_data),
                           "--port", "1", *args], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode != 0
    assert message in proc.stderr


def test_second_start_skips_conversion_and_sigterm_ends_it_cleanly(tmp_path, default_model_dir):
    """A start with the converted model there converts nothing; SIGTERM (what stops it here, and a service
    manager's stop) ends it as Ctrl+C does, its services closed: exit status 0, not killed by the signal."""
    user_data = user_data_with_default_model(tmp_path / "data", default_model_dir)
    with running_server(user_data) as server:
        pass
    text = server.log.read_text()
    assert "converting" not in text and "Workbench ready" in text
    assert server.proc.returncode == 0, text[-2000:]


def test_nowebui_serves_the_api_alone(tmp_path, default_model_dir):
    """--nowebui: the API answers (it implies --api) and nothing listens on the UI's port."""
    import json
    import urllib.error
    import urllib.request

    user_data = user_data_with_default_model(tmp_path / "data", default_model_dir)
    ui_port = free_port()
    with running_server(user_data, "--nowebui", "--api-port", str(free_port()), "--port", str(ui_port)) as server:
        with urllib.request.urlopen(server.url + "/v1/models", timeout=30) as r:
            assert [m["id"] for m in json.load(r)["data"]] == ["SmolLM2-135M-Instruct"]
        with pytest.raises(urllib.error.URLError):
            urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/health", timeout=5)
    text = server.log.read_text()
    assert "OpenAI-compatible API ready" in text and "Workbench ready" not in text
