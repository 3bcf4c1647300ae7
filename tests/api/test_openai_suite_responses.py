"""openai-python's OWN tests for the Responses API, run against our server (as tests/api/test_openai_suite.py runs
their chat completions tests, with its helpers):

* tests/api_resources/test_responses.py
* tests/api_resources/responses/test_input_items.py
* tests/api_resources/responses/test_input_tokens.py

Their stored-response tests name fixed ids ("resp_677efb5139a88190b512bc3fef8e535d", and "response_id" for the input
items); before each of their tests the seed plugin (tests/api/suite_plugin/workbench_seed.py) puts a real stored
response of this server under those ids: a background response the fixture made and waited for, so their cancel
tests cancel a background response that has ended (answered as it is, as OpenAI does; a foreground response cannot
be cancelled). Every test whose request the real API would take passes; the others are deselected, each for the
reason in ``DESELECTED``.
"""

from __future__ import annotations

import time
import urllib.request
from pathlib import Path

import openai
import pytest

from tests.api.conftest import APIServer, start_api
from tests.api.test_openai_suite import OPENAI_KEY, _count, _flat, model_names, openai_sdist, run_suite

pytestmark = [pytest.mark.real_model, pytest.mark.timeout(900)]

FILES = ("tests/api_resources/test_responses.py", "tests/api_resources/responses/test_input_items.py",
         "tests/api_resources/responses/test_input_tokens.py")
RESPONSES, INPUT_ITEMS, INPUT_TOKENS = FILES
SEEDED = ("resp_677efb5139a88190b512bc3fef8e535d", "response_id")  # the ids their stored-response tests name
CLASSES = {RESPONSES: "TestResponses", INPUT_ITEMS: "TestInputItems", INPUT_TOKENS: "TestInputTokens"}


def _tests(file: str, names: list[str]) -> list[str]:
    """--deselect prefixes for these tests in the sync and async class (all their parametrizations)."""
    sync = CLASSES[file]
    return [f"{file}::{cls}::{name}[" for cls in (sync, sync.replace("Test", "TestAsync", 1)) for name in names]


CALLS = ("method", "raw_response", "streaming_response")

# reason -> --deselect prefixes
DESELECTED: dict[str, list[str]] = {
    "create() with neither model nor input: a request of nothing, which the real API refuses too (model is "
    "required there); here it is a 400 naming input":
        _tests(RESPONSES, [f"test_{call}_create_overload_{n}" for call in CALLS for n in (1, 2)]),
    "input_tokens.count() with no input: nothing to count, refused naming input as create() is":
        _tests(INPUT_TOKENS, [f"test_{call}_count" for call in CALLS]),
    "all-params placeholders the real API rejects too: previous_response_id 'previous_response_id' / 'resp_123' "
    "and conversation 'string' name nothing that exists, prompt id 'id' no stored prompt, limit=0 (at least 1)":
        _tests(RESPONSES, ["test_method_create_with_all_params_overload_1",
                           "test_method_create_with_all_params_overload_2", "test_method_compact_with_all_params"])
        + _tests(INPUT_TOKENS, ["test_method_count_with_all_params"])
        + _tests(INPUT_ITEMS, ["test_method_list_with_all_params"]),
    "include=['file_search_call.results'] names a hosted tool's output (file_search), refused by name here":
        _tests(RESPONSES, ["test_method_retrieve_with_all_params_overload_1",
                           "test_method_retrieve_with_all_params_overload_2"]),
    "responses.compact (compaction into OpenAI's encrypted items, which only its models read) is refused by name":
        _tests(RESPONSES, [f"test_{call}_compact" for call in CALLS]),
}


@pytest.fixture(scope="module")
def sdist() -> Path:
    return openai_sdist()


@pytest.fixture(scope="module")
def suite_api(tmp_path_factory, default_model_dir, sdist):
    """The API with openai-python's test key and their model names as aliases, and a stored background response
    for their fixed ids."""
    ctx, base, key = start_api(tmp_path_factory, default_model_dir, "--served-model-name",
                               *model_names(sdist, FILES), key=OPENAI_KEY)
    with ctx as server:
        with urllib.request.urlopen(base.removesuffix("/v1") + "/health", timeout=10):
            pass
        api = APIServer(base, key, server)
        with openai.OpenAI(base_url=base, api_key=key, max_retries=0, timeout=120) as client:
            made = client.responses.create(model="SmolLM2-135M-Instruct", input="Hi", max_output_tokens=4,
                                           background=True, metadata={"foo": "string"})
            deadline = time.monotonic() + 120
            while made.status in ("queued", "in_progress") and time.monotonic() < deadline:
                time.sleep(0.2)
                made = client.responses.retrieve(made.id)
            assert made.status in ("completed", "incomplete"), made
        api.seed = made.id
        yield api


def test_openai_python_responses_suite(sdist, suite_api):
    """Their tests pass, but for the documented deselections."""
    deselect = [a for p in _flat(DESELECTED) for a in ("--deselect", p)]
    done = run_suite(sdist, suite_api, *FILES, *deselect, seeds={
        "WORKBENCH_SEED_RESPONSE": suite_api.seed, "WORKBENCH_SEED_RESPONSE_IDS": ",".join(SEEDED)})
    tail = (done.stdout + done.stderr)[-8000:]
    print(done.stdout.strip().splitlines()[-1] if done.stdout.strip() else tail)  # "N passed, M deselected in T"
    assert done.returncode == 0, f"openai-python's tests failed against our server:\n{tail}"
    assert _count("passed", done.stdout) > 0, tail
