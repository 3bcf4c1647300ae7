"""anthropic-sdk-python's OWN tests for messages and models, run against our server (as tests/api/test_openai_suite.py
runs openai-python's).

The sdist of the installed ``anthropic`` version is fetched once into ``.test-cache/anthropic-sdist/``
(tests/api/sdists.py) and these files of it run with pytest in a subprocess:

* tests/api_resources/test_messages.py
* tests/api_resources/test_models.py
* tests/api_resources/messages/test_batches.py

Upstream runs them against a prism mock of Anthropic's spec; here ``TEST_API_BASE_URL`` points at our server's
root (their client appends ``/v1/messages``). Their key is hard-coded ``"my-anthropic-api-key"`` (sent as
``x-api-key``), so our server runs with that key and checks it. The model names they send (``claude-opus-5-5``,
``model_id`` for their retrieve, and the client's DEPRECATED_MODELS, which their deprecation-warning test sends)
are served as ``--served-model-name`` aliases of the loaded model. ``--api-timeout 1`` cuts their
``max_tokens=1024`` requests after 1 s (a Message Batch's rows too: they run in the background; a cut reply is
still a whole reply, and a second is far more than a first token takes, so no request ends with nothing). Their conftest
needs inline-snapshot and http-snapshot (with asttokens and executing), and test_batches.py needs respx: our
environment lacks them, so they are installed at the versions their requirements-dev.lock pins, with
``pip install --no-deps --target`` beside the sdist, and put on the subprocess's PYTHONPATH only. Their pyproject's
``addopts`` is dropped but for ``-p tests._alias_httpx`` (respx mocks httpx; their client is built on httpx2, which
that plugin aliases as httpx); ``-n auto`` is left out. The rest of their pytest config applies
(``filterwarnings = error``, ``xfail_strict``, asyncio mode). Their sync tests run twice (loose/strict response
validation), their async tests three times (loose, strict, aiohttp).

Their Message Batches tests name the batch "message_batch_id" (and list with after_id="after_id" and
before_id="before_id"): before each test the seed plugin (tests/api/suite_plugin/workbench_seed.py) puts under
those ids copies of a real Message Batch the fixture ran to its end, with its results (for their cancel tests,
"message_batch_id" back in progress with its request not run, as a batch that can be canceled). Their three
``results`` tests mock the server with respx (their results come from the mock, not from us; with the aiohttp
client their conftest skips them).

Deselected, each for a documented reason (``DESELECTED`` below).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import anthropic
import pytest
from anthropic.resources.messages import DEPRECATED_MODELS

from tests.api.conftest import APIServer, start_api
from tests.api.sdists import client_sdist, suite_packages

pytestmark = [pytest.mark.real_model, pytest.mark.timeout(900)]

ANTHROPIC_KEY = "my-anthropic-api-key"  # hard-coded in anthropic-sdk-python's tests/conftest.py
FILES = ("tests/api_resources/test_messages.py", "tests/api_resources/test_models.py",
         "tests/api_resources/messages/test_batches.py")
MESSAGES, MODELS, BATCHES = FILES
# their conftest's imports we lack, and respx (test_batches.py's)
TEST_PACKAGES = ("inline-snapshot", "http-snapshot", "asttokens", "executing", "respx")
SEED_PLUGIN = Path(__file__).parent / "suite_plugin"


def _tests(file: str, names: list[str]) -> list[str]:
    """--deselect prefixes for these tests in the sync and async class (all their parametrizations)."""
    sync = {MESSAGES: "TestMessages", MODELS: "TestModels", BATCHES: "TestBatches"}[file]
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
    """Every model="..." and model_id="..." the test files run send (and "model": "..." in a batch's params), and
    the client's deprecated models."""
    names = set(DEPRECATED_MODELS)
    for f in FILES:
        found = re.findall(r'\bmodel(?:_id)?="([^"]+)"|"model": "([^"]+)"', (sdist / f).read_text())
        names.update(keyword or in_params for keyword, in_params in found)
    return sorted(names)


@pytest.fixture(scope="module")
def sdist() -> Path:
    return client_sdist("anthropic")


@pytest.fixture(scope="module")
def packages(sdist) -> Path:
    return suite_packages(sdist, TEST_PACKAGES)


@pytest.fixture(scope="module")
def suite_api(tmp_path_factory, default_model_dir, sdist):
    """The API with anthropic-sdk-python's test key, their model names as aliases, requests cut after 1 s, and a
    Message Batch run to its end to copy under their ids (``api.seed_batch``)."""
    ctx, base, key = start_api(tmp_path_factory, default_model_dir, "--served-model-name", *model_names(sdist),
                               "--api-timeout", "1", key=ANTHROPIC_KEY)
    with ctx as server:
        api = APIServer(base, key, server)
        with anthropic.Anthropic(base_url=api.root, api_key=key, max_retries=0, timeout=120) as client:
            # a request long enough (cut after 1 s) that a copy put back in progress is still running when canceled
            batch = client.messages.batches.create(requests=[{"custom_id": "seed", "params": {
                "model": "claude-opus-5-5", "max_tokens": 1024,
                "messages": [{"role": "user", "content": "Write a long story about a dragon who likes tea."}]}}])
            deadline = time.monotonic() + 120
            while (batch := client.messages.batches.retrieve(batch.id)).processing_status != "ended":
                assert time.monotonic() < deadline, batch
                time.sleep(0.1)
            assert batch.request_counts.succeeded == 1, batch
        api.seed_batch = batch.id  # type: ignore[attr-defined]
        yield api


def run_suite(sdist: Path, packages: Path, api: APIServer, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "ANTHROPIC_"))}
    env.update(TEST_API_BASE_URL=api.root, NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost",
               COLUMNS="200", PYTHONPATH=os.pathsep.join([str(packages), str(SEED_PLUGIN)]),
               WORKBENCH_SEED_DB=str(api.server.log.parent / "workbench.sqlite3"),
               WORKBENCH_SEED_MESSAGE_BATCH=getattr(api, "seed_batch", ""))
    cmd = [sys.executable, "-m", "pytest", "-o", "addopts=", "-p", "tests._alias_httpx", "-p", "no:cacheprovider",
           "-p", "workbench_seed", "-q", "--tb=short", "-rfEXs", *args]
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
