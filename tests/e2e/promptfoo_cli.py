"""promptfoo itself (the version :data:`webui.bootstrap.PROMPTFOO_VERSION`, installed by npm into
.test-cache/promptfoo), run offline, for the tests that hold our promptfoo reader and asserts against it.

Nothing it does may reach the internet: telemetry, the update check and sharing are turned off, its config
folder and database live in a temp folder, and the eval runs without its disk cache.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from webui import bootstrap

OFFLINE_ENV = {
    "PROMPTFOO_DISABLE_TELEMETRY": "1",
    "PROMPTFOO_DISABLE_UPDATE": "1",
    "PROMPTFOO_DISABLE_SHARING": "1",
    "PROMPTFOO_DISABLE_SHARE_WARNING": "1",
    "PROMPTFOO_DISABLE_REDTEAM_REMOTE_GENERATION": "1",
    "PROMPTFOO_DISABLE_ERROR_LOG": "1",
    "PROMPTFOO_CACHE_ENABLED": "false",
    "PROMPTFOO_SELF_HOSTED": "1",
    "PROMPTFOO_PASS_RATE_THRESHOLD": "0",
    "PROMPTFOO_FAILED_TEST_EXIT_CODE": "0",
    "NO_COLOR": "1",
}
"""promptfoo's switches (its envars.ts) that keep it from calling home, writing outside its temp folders, or
exiting non-zero because some test failed (failing is what half the compared asserts should do)."""


def promptfoo_env(home: Path) -> dict[str, str]:
    """The environment promptfoo runs in: offline, its config folder (and database, logs) under ``home``,
    python asserts run by this Python."""
    home.mkdir(parents=True, exist_ok=True)
    return {**os.environ, **OFFLINE_ENV, "PROMPTFOO_CONFIG_DIR": str(home), "PROMPTFOO_LOG_DIR": str(home / "logs"),
            "PROMPTFOO_PYTHON": sys.executable}


def promptfoo(*args: str, home: Path, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run ``promptfoo ARGS`` (installing it first if this machine has not yet)."""
    command = [str(bootstrap.ensure_promptfoo()), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=cwd,
                          env=promptfoo_env(home))


def promptfoo_eval(config: Path, home: Path, concurrency: int = 8) -> dict[str, Any]:
    """``promptfoo eval`` of ``config`` without cache, table, progress bar, sharing or its database; the
    results file it writes (``results.results[]`` one per test and prompt)."""
    out = config.parent / "promptfoo-results.json"
    done = promptfoo("eval", "-c", str(config), "-o", str(out), "-j", str(concurrency), "--no-cache", "--no-table",
                     "--no-progress-bar", home=home, cwd=config.parent)
    if done.returncode != 0 or not out.exists():
        raise AssertionError(f"promptfoo eval failed (exit code {done.returncode}):\n{done.stdout[-3000:]}\n"
                             f"{done.stderr[-3000:]}")
    return json.loads(out.read_text(encoding="utf-8"))
