"""One record through the engine (as the UI runs it), the API and the batch runner: identical tokens."""

from __future__ import annotations

import httpx
import pytest

from tests.api.conftest import API_KEY
from tests.conftest import TEST_THREADS
from webui.batch.run.grid import GridSpec
from webui.batch.run.prompts import parse_lines
from webui.batch.run.runner import BatchJob
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
    services.models.load(services.models.catalog.entry_for_path(default_model_dir))
    yield services
    services.close()


@pytest.mark.parametrize("params", [
    SamplingParams(temperature=0, max_new_tokens=14, ban_eos=True),
    SamplingParams(temperature=0.9, top_p=0.95, top_k=50, max_new_tokens=14, seed=4242, ban_eos=True),
], ids=["greedy", "seeded"])
def test_same_record_same_tokens_everywhere(api, local, params):
    model = local.loaded
    record = parse_record(ReproduceRecord(model.name, params,
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


def test_each_batch_row_carries_a_record_that_gives_its_output_again(local):
    """Rows of a run with a system prompt, two settings (greedy, seeded) and two samples: each row's record,
    re-run through the engine, makes that row's output."""
    from webui.reproduce import record_for_batch_row

    grid = GridSpec([], {"temperature": [0, 0.9], "max_new_tokens": [10]}, samples=2, base_seed=7)
    job = BatchJob("records", parse_lines("Name a fruit.\nName a planet."), grid, system_prompt="Be brief.")
    handle = local.batch_runner.start(job)
    assert handle.wait(300)
    rows = handle.rows()
    assert len(rows) == 8
    run = local.batches.get(handle.run_id)
    model = local.loaded
    for row in rows:
        record = parse_record(record_for_batch_row(run.model, run.spec, row, model.loader).to_json())
        assert record.messages[0] == {"role": "system", "content": "Be brief."}
        assert record.params.seed == row.seed
        assert local.engine.generate(record.request(model.tokenizer)).text == row.output, row.setting
