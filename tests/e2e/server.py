"""Start `python launch.py` as a real server on a free 127.0.0.1 port, and stop it (by its pid)."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from tests.conftest import ROOT, TEST_THREADS

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def user_data_with_default_model(user_data: Path, default_model_dir: Path) -> Path:
    """A fresh user data dir whose converted default model is the test cache's (no re-conversion)."""
    converted = user_data / "converted"
    converted.mkdir(parents=True, exist_ok=True)
    link = converted / default_model_dir.name
    if not link.exists():
        link.symlink_to(default_model_dir, target_is_directory=True)
    return user_data


@dataclass
class Server:
    url: str
    log: Path
    proc: subprocess.Popen


@contextlib.contextmanager
def running_server(user_data: Path, *args: str, timeout: float = 180) -> Iterator[Server]:
    """Yield a launched workbench (url, log file, process); stop it afterwards. With --nowebui (the API alone) the
    url is the API's root."""
    port = free_port()
    log_path = user_data / f"server-{port}.log"
    env = dict(os.environ, GRADIO_ANALYTICS_ENABLED="False", PYTHONUNBUFFERED="1")
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [sys.executable, str(ROOT / "launch.py"), "--user-data-dir", str(user_data), "--port", str(port),
             "--threads", str(TEST_THREADS), *args], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{args[args.index('--api-port') + 1] if '--nowebui' in args else port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited with {proc.returncode}:\n{log_path.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(url + "/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"server not ready in {timeout}s:\n{log_path.read_text()[-3000:]}")
            time.sleep(0.5)
        yield Server(url, log_path, proc)
    finally:
        if proc.poll() is None:
            proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
