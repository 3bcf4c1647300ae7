"""A bounded schemathesis run against the API's own OpenAPI schema: no request may get a 5xx.

schemathesis (4.x) loads ``{root}/openapi.json`` from a real server (the default
model, started by this module with ``--api-timeout 2`` so a generated body with a
huge ``max_tokens`` or ``n`` is cut after 2 s instead of generating for minutes,
and ``--max-waiting 64``: a generated completion may carry 20 prompts, and on a busy machine the sequences of
the request before it may not have left yet; a full queue (503) is tested on its own in tests/engine/test_engine.py,
not here). For POST /v1/chat/completions and POST /v1/completions
it sends ``MAX_EXAMPLES`` schema-valid bodies and ``MAX_EXAMPLES`` schema-invalid
ones; GET /v1/models and GET /health take no input, so they get one request each.
The API key is sent on every request. One check only: ``not_a_server_error``.
Our error contract is "nothing a client sends produces a 5xx"
(webui/api/errors.py), so any 5xx found here is a server bug, not a test
problem. The other checks (status code / response schema conformance) are off:
FastAPI's generated schema documents 422 while we answer 400 on purpose.
Valid chat bodies get a content for every message and a user message last
(``reaching_the_engine``): the schema lets both be missing, but the
server answers 400 without them, and most bodies would never reach sampling.

The cases come from ``operation.as_strategy(...)`` under a plain hypothesis
``@given`` instead of ``@schema.parametrize()``: schemathesis 4.32's pytest
plugin (``schemathesis.pytest.from_fixture``) fails on pytest 9.2 with
"'Function' object has no attribute '_nodeid'". Examples are derandomized (the
same requests every run) and not shrunk (each can take seconds); a failure
prints the exact request as a curl command.

It takes about 40 s on 2 slow cores (of which ~10 s is the server start).
"""

from __future__ import annotations

import urllib.request
from datetime import timedelta

import pytest

import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error

from tests.api.conftest import APIServer, start_api

pytestmark = [pytest.mark.real_model, pytest.mark.timeout(300)]

MAX_EXAMPLES = 25
OPERATIONS = ("/v1/chat/completions", "/v1/completions", "/v1/models", "/health", "/tokenize", "/detokenize",
              "/v1/internal/logits", "/v1/internal/model/load", "/v1/embeddings", "/v1/batches", "/v1/files", "/v1/responses",
              "/v1/responses/input_tokens")


@pytest.fixture(scope="module")
def fuzz_api(tmp_path_factory, default_model_dir):
    """The API with a key, the alias 'gpt-test', requests cut after 2 s."""
    ctx, base, key = start_api(tmp_path_factory, default_model_dir, "--served-model-name", "gpt-test",
                               "--api-timeout", "2", "--max-waiting", "64")
    with ctx as server:
        with urllib.request.urlopen(base.removesuffix("/v1") + "/health", timeout=10):
            pass
        yield APIServer(base, key, server)


@pytest.fixture(scope="module")
def api_schema(fuzz_api):
    config = schemathesis.Config.from_dict({"headers": {"Authorization": f"Bearer {fuzz_api.key}"},
                                            "request-timeout": 30})
    schema = schemathesis.openapi.from_url(fuzz_api.root + "/openapi.json", config=config, timeout=10)
    return schema.include(path=list(OPERATIONS))


def reaching_the_engine(case):
    """A valid chat body the server will also generate for: a content for every message, a user message last.

    The schema lets ``content`` be omitted (it is optional for assistant messages) and lets the chat end with any
    role, so most generated "valid" bodies would stop at a 400 before sampling and the engine; with this, the
    other fields (sampling parameters, n, stream, logprobs, ...) are fuzzed on requests that really generate.
    """
    body = case.body
    if isinstance(body, dict) and isinstance(body.get("messages"), list):
        for m in body["messages"]:
            if isinstance(m, dict) and m.get("content") is None:
                m["content"] = "Hello"
        if not body["messages"] or body["messages"][-1].get("role") != "user":
            body["messages"].append({"role": "user", "content": "Hello"})
    return case


# (method, path, generation mode): valid and invalid bodies for the POST routes; the GET routes take no input.
CASES = [("POST", "/v1/chat/completions", "positive"), ("POST", "/v1/chat/completions", "negative"),
         ("POST", "/v1/completions", "positive"), ("POST", "/v1/completions", "negative"),
         ("GET", "/v1/models", "positive"), ("GET", "/health", "positive"),
         ("POST", "/tokenize", "positive"), ("POST", "/tokenize", "negative"),
         ("POST", "/detokenize", "positive"), ("POST", "/detokenize", "negative"),
         ("POST", "/v1/internal/logits", "positive"), ("POST", "/v1/internal/logits", "negative"),
         ("POST", "/v1/embeddings", "positive"), ("POST", "/v1/embeddings", "negative"),
         ("POST", "/v1/internal/model/load", "positive"),  # no admin key here: always a 403
         ("POST", "/v1/batches", "positive"), ("POST", "/v1/batches", "negative"),  # (unknown files: 404s, 400s)
         ("GET", "/v1/batches", "negative"), ("GET", "/v1/files", "positive"), ("GET", "/v1/files", "negative"),
         ("POST", "/v1/responses", "positive"), ("POST", "/v1/responses", "negative"),
         ("POST", "/v1/responses/input_tokens", "positive")]


@pytest.mark.parametrize(("method", "path", "mode"), CASES, ids=[f"{m} {p} {g}" for m, p, g in CASES])
def test_no_server_errors(api_schema, fuzz_api, method, path, mode):
    """Every generated request, valid or not, gets an answer below 500."""
    operation = api_schema[path][method]
    headers = {"Authorization": f"Bearer {fuzz_api.key}"}

    strategy = operation.as_strategy(generation_mode=GenerationMode(mode))
    if mode == "positive" and path == "/v1/chat/completions":
        strategy = strategy.map(reaching_the_engine)

    # No shrinking: each request may take seconds, and schemathesis's failure report already carries the
    # exact request (as a curl command) that got the 5xx.
    @settings(max_examples=MAX_EXAMPLES, deadline=timedelta(seconds=20), database=None, derandomize=True,
              phases=[Phase.explicit, Phase.reuse, Phase.generate], suppress_health_check=list(HealthCheck))
    @given(case=strategy)
    def run(case):
        case.call_and_validate(headers=headers, checks=[not_a_server_error], timeout=30)

    run()
