"""One record through the engine (as the UI runs it), the API and the batch runner: identical tokens."""

from __future__ import annotations

import httpx
import pytest

from tests.api.conftest import API_KEY
from tests.conftest import TEST_THREADS
from webui.batch import GridSpec, parse_lines
from webui.batch.runner import BatchJob
from webui.config import AppConfig
from webui.engine import SamplingParams
from webui.reproduce import ReproduceRecord, parse_record
from webui.services import Services

pytestmark = pytest.mark.real_model
QUESTION = "Tell me a short fact about the moon."


@pytest.fixture(scope="module")
def local(tmp_path_factory, default_model_dir):
    config = AppConfig(user_data_dir=tmp_path_factory.mktemp("reproduce") / "data", threads=TEST_THREADS,
                       device="cpu")
    config.make_dirs()
    services = Services.create(config)
    services.models.load(services.models.entry_for_path(default_model_dir))
    yield services
    services.close()


@pytest.mark.parametrize("params", [
    SamplingParams(temperature=0, max_new_tokens=14, ban_eos=True),
    SamplingParams(temperature=0.9, top_p=0.95, top_k=50, max_new_tokens=14, seed=4242, ban_eos=True),
], ids=["greedy", "seeded"])
def test_same_record_same_tokens_everywhere(api, local, params):
    model = local.models.loaded
    record = parse_record(ReproduceRecord(model.name, params.to_dict(),
                                          [{"role": "user", "content": QUESTION}]).to_json())
    engine_text = local.engine.generate(record.request(model.tokenizer)).text  # what the Chat tab runs

    route, body = record.api_body()
    r = httpx.post(api.base_url + route, json=body, headers={"Authorization": f"Bearer {API_KEY}"}, timeout=120)
    assert r.status_code == 200, r.text
    api_text = r.json()["choices"][0]["message"]["content"]

    grid = GridSpec([], {k: [v] for k, v in params.changed().items() if k != "seed"}, 1,
                    base_seed=params.seed or 0)
    handle = local.batch_runner.start(BatchJob("reproduce", parse_lines(QUESTION), grid))
    assert handle.wait(120)
    batch_text = handle.rows()[0].output

    assert engine_text == api_text == batch_text and engine_text
