"""The remote loader against our own API server: chat, raw text, stops, cancel, batch runs and clear errors."""

from __future__ import annotations

import time
import urllib.request
import json

import httpx
import pytest

from loaders.base import ModelLoadError
from tests.api.conftest import API_KEY
from tests.e2e.server import free_port
from webui.batch.run.grid import GridSpec
from webui.batch.run.prompts import parse_lines
from webui.batch.run.runner import BatchJob
from webui.config import AppConfig
from webui.engine import GenerationRequest, SamplingParams
from webui.services import Services

pytestmark = pytest.mark.real_model
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def client_services(api, tmp_path_factory):
    """A second workbench (no local model) using the API server as its remote model."""
    config = AppConfig(user_data_dir=tmp_path_factory.mktemp("remote-client") / "data", no_model=True)
    config.make_dirs()
    services = Services.create(config)
    services.models.load_remote(api.base_url, API_KEY)
    yield services
    services.close()


def direct(api, route: str, body: dict) -> dict:
    r = httpx.post(api.base_url + route, json=body, headers={"Authorization": f"Bearer {API_KEY}"}, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def test_connects_and_describes_the_remote_model(client_services):
    model = client_services.loaded
    assert model.name == "SmolLM2-135M-Instruct" and model.loader == "remote" and model.capabilities.text_only


def test_chat_and_raw_text_match_the_server_itself(api, client_services):
    params = SamplingParams(temperature=0, max_new_tokens=12)
    ours = client_services.engine.generate(GenerationRequest("(rendered)", params, messages=QUESTION))
    theirs = direct(api, "/chat/completions", {"messages": QUESTION, "temperature": 0, "max_tokens": 12})
    assert ours.text == theirs["choices"][0]["message"]["content"] and "Paris" in ours.text
    assert ours.usage.completion_tokens == theirs["usage"]["completion_tokens"] and ours.finish_reason == "stop"
    raw = client_services.engine.generate(GenerationRequest("The capital of France is", params.replace(
        max_new_tokens=5)))
    assert raw.text == direct(api, "/completions", {"prompt": "The capital of France is", "temperature": 0,
                                                     "max_tokens": 5})["choices"][0]["text"]


def test_stop_strings_seed_and_logprobs_pass_through(client_services):
    params = SamplingParams(temperature=0, max_new_tokens=12, stop=[" is"])
    cut = client_services.engine.generate(GenerationRequest("", params, messages=QUESTION, logprobs=2))
    assert cut.text == "The capital of France" and cut.finish_reason == "stop"
    assert cut.logprobs and len(cut.logprobs[0].top) == 2
    seeded = SamplingParams(temperature=1.0, max_new_tokens=10, seed=11)
    a = client_services.engine.generate(GenerationRequest("", seeded, messages=QUESTION)).text
    b = client_services.engine.generate(GenerationRequest("", seeded, messages=QUESTION)).text
    assert a == b


def test_cancel_stops_the_remote_generation(api, client_services):
    stream = client_services.engine.submit(GenerationRequest("", SamplingParams(max_new_tokens=300, ban_eos=True),
                                                             messages=QUESTION))
    events = iter(stream)
    next(events)
    stream.cancel()
    assert list(events)[-1].finish_reason == "cancelled"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with urllib.request.urlopen(api.root + "/health", timeout=5) as r:
            health = json.loads(r.read())
        if health["running"] == 0:
            break
        time.sleep(0.2)
    assert health["running"] == 0 and client_services.engine.stats().running == 0


def test_the_batch_runner_runs_against_the_remote(client_services):
    job = BatchJob("remote batch", parse_lines("What is the capital of France?\nSay hello."),
                   GridSpec([], {"temperature": [0], "max_new_tokens": [10]}))
    handle = client_services.batch_runner.start(job)
    assert handle.wait(120) and handle.status == "done"
    rows = handle.rows()
    assert len(rows) == 2 and "Paris" in rows[0].output and all(r.completion_tokens > 0 for r in rows)


def test_connection_errors_are_clear(api, tmp_path):
    config = AppConfig(user_data_dir=tmp_path / "data", no_model=True)
    config.make_dirs()
    services = Services.create(config)
    try:
        with pytest.raises(ModelLoadError, match="could not reach the remote server"):
            services.models.load_remote(f"http://127.0.0.1:{free_port()}/v1", API_KEY)
        with pytest.raises(ModelLoadError, match="refused the API key"):
            services.models.load_remote(api.base_url, "wrong-key")
        with pytest.raises(ModelLoadError, match="has no model 'nope'"):
            services.models.load_remote(api.base_url, API_KEY, "nope")
        with pytest.raises(ModelLoadError, match="must start with http"):
            services.models.load_remote("localhost:5000", API_KEY)
        assert services.loaded is None
    finally:
        services.close()


def test_a_remote_server_judges_llm_rubric_and_its_key_is_not_stored(api, services):
    from tests.conftest import last
    from webui.controllers.batch import BatchController, BatchForm

    controller = BatchController(services)
    form = BatchForm(prompts="Say hello.", asserts="llm-rubric:The output is a greeting",
                     judge_url=api.base_url, judge_key=API_KEY)
    done = last(controller.run(controller.job(form, SamplingParams(temperature=0, max_new_tokens=4))))
    (row,) = controller.rows(done.run_id)
    (result,) = row.asserts
    assert result.detail.startswith("judge: ") and 0 <= result.score <= 1, result  # the server's verdict, read
    spec = controller.store.get(done.run_id).spec.to_json()
    assert spec["remote_judge"] == {"url": api.base_url, "model": ""} and API_KEY not in json.dumps(spec)
    unreachable = BatchForm(prompts="Say hello.", asserts="llm-rubric:polite",
                            judge_url=f"http://127.0.0.1:{free_port()}/v1")
    done = last(controller.run(controller.job(unreachable, SamplingParams(temperature=0, max_new_tokens=2))))
    (row,) = controller.rows(done.run_id)
    assert not row.passed and "could not be reached" in row.asserts[0].detail


def test_a_local_model_beside_a_remote_server_in_one_batch_run(api, services):
    """The tiny local model and the default model behind the API server, loaded together, compared by a
    model axis; each gives what it gives alone."""
    remote = services.models.load_remote(api.base_url, API_KEY, make_current=False)
    assert services.models.names() == ["tiny", remote.name] and services.loaded.name == "tiny"
    prompts = parse_lines("What is the capital of France?\nSay hello.")
    both = BatchJob("local and remote", prompts, GridSpec([], {"model": ["tiny", remote.name], "temperature": [0],
                                                               "max_new_tokens": [6]}))
    handle = services.batch_runner.start(both)
    assert handle.wait(120) and handle.status == "done"
    rows = handle.rows()
    outputs = {m: [r.output for r in rows if r.model == m] for m in ("tiny", remote.name)}
    assert "Paris" in outputs[remote.name][0] and outputs["tiny"] != outputs[remote.name]
    for name in ("tiny", remote.name):
        services.models.use(name, services.owner)
        alone = services.batch_runner.start(BatchJob("alone", prompts, GridSpec([], {"temperature": [0],
                                                                                     "max_new_tokens": [6]}),
                                                     use_cache=False))
        assert alone.wait(120) and [r.output for r in alone.rows()] == outputs[name]
