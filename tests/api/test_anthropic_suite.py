"""anthropic-sdk-python's OWN tests for messages and models, run against our server (as tests/api/test_openai_suite.py
runs openai-python's).

The sdist of the installed ``anthropic`` version is fetched once into ``.test-cache/anthropic-sdist/``
(tests/api/sdists.py) and these files of it run with pytest in a subprocess:

* tests/api_resources/test_messages.py
* tests/api_resources/test_models.py

and not tests/api_resources/messages/test_batches.py: Message Batches are not served yet (``NOT_RUN``).

Upstream runs them against a prism mock of Anthropic's spec; here ``TEST_API_BASE_URL`` points at our server's
root (their client appends ``/v1/messages``). Their key is hard-coded ``"my-anthropic-api-key"`` (sent as
``x-api-key``), so our server runs with that key and checks it. The model names they send (``claude-opus-5-5``,
``model_id`` for their retrieve, and the client's DEPRECATED_MODELS, which their deprecation-warning test sends)
are served as ``--served-model-name`` aliases of the loaded model. ``--api-timeout 3`` cuts their
``max_tokens=1024`` requests after 3 s. Their conftest needs inline-snapshot and http-snapshot (with asttokens
and executing), which our environment lacks: they are installed at the versions their requirements-dev.lock pins,
with ``pip install --no-deps --target`` beside the sdist, and put on the subprocess's PYTHONPATH only. Their
pyproject's ``addopts`` (``-n auto``, and ``-p tests._alias_httpx`` for respx, which these files do not use) is
dropped; the rest of their pytest config applies (``filterwarnings = error``, ``xfail_strict``, asyncio mode).
Their sync tests run twice (loose/strict response validation), their async tests three times (loose, strict,
aiohttp).

Deselected, each for a documented reason (``DESELECTED`` below).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from anthropic.resources.messages import DEPRECATED_MODELS

from tests.api.conftest import APIServer, start_api
from tests.api.sdists import client_sdist, suite_packages

pytestmark = [pytest.mark.real_model, pytest.mark.timeout(900)]

ANTHROPIC_KEY = "my-anthropic-api-key"  # hard-coded in anthropic-sdk-python's tests/conftest.py
FILES = ("tests/api_resources/test_messages.py", "tests/api_resources/test_models.py")
MESSAGES, MODELS = FILES
# their test files for what this server does not serve yet -> why (not run: collecting them needs respx too)
NOT_RUN = {"tests/api_resources/messages/test_batches.py": "Message Batches (/v1/messages/batches) are not served "
                                                           "yet: they come with the Files and Batches APIs"}
TEST_PACKAGES = ("inline-snapshot", "http-snapshot", "asttokens", "executing")  # their conftest's imports we lack


def _tests(file: str, names: list[str]) -> list[str]:
    """--deselect prefixes for these tests in the sync and async class (all their parametrizations)."""
    sync = {MESSAGES: "TestMessages", MODELS: "TestModels"}[file]
    return [f"{file}::{cls}::{name}[" for cls in (sync, sync.replace("Test", "TestAsync", 1)) for name in names]


# reason -> --deselect prefixes
DESELECTED: dict[str, list[str]] = {
    "create with all params: container (a code-execution container and the skills in it) runs on Anthropic's "
    "servers only, so it is refused by name (400 naming container); and their tool's input_schema is not a JSON "
    "schema (its properties' schemas are the string 'bar'), which the real API refuses too (its tools' schemas "
    "must be valid JSON Schema); every other field of these requests is taken":
        _tests(MESSAGES, ["test_method_create_with_all_params_overload_1",
                          "test_method_create_with_all_params_overload_2"]),
    "count_tokens with all params: the same tool input_schema that is not a JSON schema (400 naming "
    "tools.0.input_schema), which the real API refuses too":
        _tests(MESSAGES, ["test_method_count_tokens_with_all_params"]),
    "models list with all params: after_id='after_id' and before_id='before_id' name no model; a cursor that "
    "names no listed model is refused here (400 naming after_id), not read as an empty page":
        _tests(MODELS, ["test_method_list_with_all_params"]),
}


def model_names(sdist: Path) -> list[str]:
    """Every model="..." and model_id="..." the test files run send, and the client's deprecated models."""
    names = set(DEPRECATED_MODELS)
    for f in FILES:
        names.update(re.findall(r'\bmodel(?:_id)?="([^"]+)"', (sdist / f).read_text()))
    return sorted(names)


@pytest.fixture(scope="module")
def sdist() -> Path:
    return client_sdist("anthropic")


@pytest.fixture(scope="module")
def packages(sdist) -> Path:
    return suite_packages(sdist, TEST_PACKAGES)


@pytest.fixture(scope="module")
def suite_api(tmp_path_factory, default_model_dir, sdist):
    """The API with anthropic-sdk-python's test key, their model names as aliases, and requests cut after 3 s."""
    ctx, base, key = start_api(tmp_path_factory, default_model_dir, "--served-model-name", *model_names(sdist),
                               "--api-timeout", "3", key=ANTHROPIC_KEY)
    with ctx as server:
        with urllib.request.urlopen(base.removesuffix("/v1") + "/health", timeout=10):
            pass
        yield APIServer(base, key, server)


def run_suite(sdist: Path, packages: Path, api: APIServer, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "ANTHROPIC_"))}
    env.update(TEST_API_BASE_URL=api.root, NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost",
               COLUMNS="200", PYTHONPATH=str(packages))
    cmd = [sys.executable, "-m", "pytest", "-o", "addopts=", "-p", "no:cacheprovider", "-q", "--tb=short", "-rfEX",
           *args]
    return subprocess.run(cmd, cwd=sdist, env=env, capture_output=True, text=True, timeout=800)


def _count(word: str, summary: str) -> int:
    found = re.search(rf"(\d+) {word}\b", summary)
    return int(found.group(1)) if found else 0


def test_anthropic_sdk_suite(sdist, packages, suite_api):
    """Their tests pass, but for the documented deselections."""
    deselect = [a for prefixes in DESELECTED.values() for p in prefixes for a in ("--deselect", p)]
    done = run_suite(sdist, packages, suite_api, *FILES, *deselect)
    tail = (done.stdout + done.stderr)[-8000:]
    print(done.stdout.strip().splitlines()[-1] if done.stdout.strip() else tail)  # "N passed, M deselected in T"
    assert done.returncode == 0, f"anthropic-sdk-python's tests failed against our server:\n{tail}"
    assert _count("passed", done.stdout) > 0, tail
