"""A batch run's stored spec: one type (StoredRun) and one reader, which also reads the specs stored before it."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import replace
from pathlib import Path

import pytest

from webui.batch.run.grid import DEFAULT_MAX_CELLS
from webui.batch.run.judge import JUDGE_PROMPT
from webui.batch.run.results import ResultRow
from webui.batch.run.runner import BatchJob
from webui.controllers.batch_refill import form_values
from webui.reproduce import record_for_batch_row
from webui.store.batch_runs import SPEC_VERSION, BatchStore, RanOn, StoredRun
from webui.store.db import Database
from webui.store.errors import StoreError

# A spec as the workbench wrote it before specs had a version: BatchJob.to_spec plus the five keys BatchRunner.start
# merged in and each setting's ran_on (the sampling parameters cut to the ones this test reads).
OLD = {
    "rows": [{"index": 0, "id": "1", "text": "Hello", "variables": {"prompt": "Hello"},
              "asserts": [{"type": "contains", "value": "Hi"}]}],
    "grid": {"presets": [], "axes": {"temperature": [0.0]}, "samples": 1, "base_seed": 0,
             "base": {"temperature": 0.0, "max_new_tokens": 4}},
    "settings": [{"label": "temperature=0", "params": {"temperature": 0.0, "max_new_tokens": 4}, "preset": None,
                  "overrides": {"temperature": 0.0}, "loras": [["style", 0.5]], "model": None,
                  "ran_on": {"model": "tiny", "loader": "transformers", "load_options": {"dtype": "float32"}}}],
    "system_prompt": "Be brief.", "raw": False, "max_cells": 50, "chat_template_name": "", "use_cache": True,
    "judge_prompt": "Grade {{output}} by {{rubric}}", "judge_model": "", "remote_judge": None,
    "loader": "transformers", "loaders": {"tiny": "transformers"}, "load_options": {"tiny": {"dtype": "float32"}},
    "chat_template": None, "chat_templates": {},
}

# Older still: before runs kept their loaders, load options, templates and what each setting ran on.
OLDEST = {k: v for k, v in OLD.items()
          if k not in ("loader", "loaders", "load_options", "chat_template", "chat_templates", "max_cells",
                       "judge_prompt")}
OLDEST["settings"] = [{k: v for k, v in s.items() if k != "ran_on"} for s in OLD["settings"]]


@pytest.fixture
def store(tmp_path: Path):
    with Database(tmp_path / "workbench.sqlite3") as database:
        yield BatchStore(database)


def row(**fields) -> ResultRow:
    return ResultRow(**{"prompt_index": 0, "prompt_id": "1", "prompt": "Hello", "setting": "temperature=0",
                        "sample": 0, "seed": 7, "params": {"temperature": 0.0, "max_new_tokens": 4}, "output": "Hi",
                        "finish_reason": "stop", "prompt_tokens": 1, "completion_tokens": 1, "cached_tokens": 0,
                        "ttft": 0.1, "tokens_per_second": 1.0, "model": "tiny", **fields})


def test_a_spec_stored_before_versions_reads_and_writes_back_the_same_keys():
    stored = StoredRun.from_json(OLD)
    assert stored.version == 0 and stored.loader == "transformers" and stored.max_cells == 50
    (setting,) = stored.settings
    assert setting.loras == (("style", 0.5),) and setting.ran_on == RanOn("tiny", "transformers", {"dtype": "float32"})
    assert stored.to_json() == {"version": SPEC_VERSION, **OLD}
    assert StoredRun.from_json(json.loads(json.dumps(stored.to_json()))) == \
        StoredRun.from_json({**OLD, "version": SPEC_VERSION})
    job = BatchJob.from_stored("again", stored)
    assert job.max_cells == 50 and job.judge_prompt == "Grade {{output}} by {{rubric}}"
    assert job.settings is not None and job.settings[0].loras == (("style", 0.5),)
    assert job.rows[0].text == "Hello" and job.system_prompt == "Be brief." and job.grid.axes == {"temperature": [0.0]}


def test_a_spec_stored_before_runs_kept_their_loader_reads_with_the_defaults():
    stored = StoredRun.from_json(OLDEST)
    assert stored.loader is None and stored.loaders == {} and stored.settings[0].ran_on is None
    job = BatchJob.from_stored("again", stored)
    assert job.max_cells == DEFAULT_MAX_CELLS and job.judge_prompt == JUDGE_PROMPT
    record = record_for_batch_row("tiny", stored, row(), loader="llamacpp")  # the caller's fallback loader
    assert record.loader == "llamacpp" and record.loras == (("style", 0.5),) and record.load_options == {}
    assert record_for_batch_row("tiny", StoredRun.from_json(OLD), row()).load_options == {"dtype": "float32"}


def test_the_store_writes_the_current_version_and_reads_old_rows(store):
    run = store.create("new", StoredRun.from_json(OLD), "tiny", 1)
    assert run.spec.version == SPEC_VERSION and store.get(run.id).spec == run.spec
    old = store.create("old", StoredRun(), "tiny", 1)  # then written as the old code wrote it
    with store._db.transaction() as conn:
        conn.execute("UPDATE batch_runs SET spec = ? WHERE id = ?", (json.dumps(OLDEST), old.id))
    read = store.get(old.id)
    assert read.spec.version == 0 and read.spec.rows == OLDEST["rows"] and read.spec.system_prompt == "Be brief."
    values, _ = form_values(read)  # it opens in the form
    assert values["system"] == "Be brief." and values["prompts"] == "Hello" and values["asserts"] == "contains:Hi"


def test_a_spec_from_a_newer_workbench_or_a_broken_one_says_what_to_do():
    with pytest.raises(StoreError, match="stored by a newer version of the workbench .* update the workbench"):
        StoredRun.from_json({**OLD, "version": SPEC_VERSION + 1})
    with pytest.raises(StoreError, match="stored spec cannot be read .* run its prompts again from the form"):
        StoredRun.from_json({**OLD, "settings": [{"label": "no params"}]})


def test_a_run_whose_spec_cannot_be_read_still_lists_and_says_why_when_opened(store):
    good = store.create("good", StoredRun.from_json(OLD), "tiny", 1)
    for name, stored in (("broken", json.dumps({**OLD, "settings": [{"label": "no params"}]})), ("cut", "{\"rows\": [")):
        bad = store.create(name, StoredRun(), "tiny", 1)
        with store._db.transaction() as conn:
            conn.execute("UPDATE batch_runs SET spec = ? WHERE id = ?", (stored, bad.id))
        assert {r.name for r in store.list()} >= {"good", name}  # the other runs (and this one) still list
        with pytest.raises(StoreError, match="run its prompts again from the form"):
            store.get(bad.id).spec
    assert store.get(good.id).spec.rows == OLD["rows"]


def test_a_result_row_keeps_the_typed_reply_and_what_it_ran_on(tmp_path):
    from webui.batch.asserts.assertion import parse_assert
    from webui.batch.run.grid import Setting, plan
    from webui.batch.run.prompts import parse_lines
    from webui.batch.run.results import Generated, result_for
    from webui.engine import SamplingParams

    rows = [dataclasses.replace(r, asserts=(parse_assert("contains: Hi"),)) for r in parse_lines("Hello")]
    (cell,) = plan(rows, [Setting("base", SamplingParams(max_new_tokens=4))])
    made = Generated("Hi there", "stop", 3, 2, cached_tokens=1, ttft=0.5, tokens_per_second=4.0)
    row = result_for(cell, made, RanOn("tiny", "transformers", {"dtype": "float32"}), from_cache=True)
    assert (row.output, row.prompt_tokens, row.completion_tokens, row.cached_tokens, row.ttft) == ("Hi there", 3, 2,
                                                                                                    1, 0.5)
    assert (row.model, row.loader, row.load_options, row.from_cache, row.passed) == (
        "tiny", "transformers", {"dtype": "float32"}, True, True)
    assert result_for(cell, made).model is None and result_for(cell, replace(made, error="boom")).asserts == []


def test_the_response_cache_keeps_its_json_and_reads_entries_from_before_cached_tokens(tmp_path):
    from webui.batch.run.cache import ResponseCache
    from webui.batch.run.results import Generated

    with Database(tmp_path / "workbench.sqlite3") as db:
        cache = ResponseCache(db)
        made = Generated("Hi", "stop", 3, 2, 1, 0.5, 4.0, error=None, tool_steps=None, logprobs=(-0.1,))
        cache.put("a" * 64, made)
        (stored,) = db.query("SELECT response FROM response_cache")
        assert json.loads(stored["response"]) == {"output": "Hi", "finish_reason": "stop", "prompt_tokens": 3,
                                                  "completion_tokens": 2, "cached_tokens": 1, "ttft": 0.5,
                                                  "tokens_per_second": 4.0}
        assert cache.get("a" * 64) == replace(made, logprobs=())  # logprobs are not kept
        with db.transaction() as conn:  # an entry written before the cache kept cached_tokens
            conn.execute("INSERT INTO response_cache (key, response, created) VALUES (?, ?, 0)", ("b" * 64, json.dumps(
                {"output": "Old", "finish_reason": "length", "prompt_tokens": 1, "completion_tokens": 4, "ttft": None,
                 "tokens_per_second": None})))
        assert cache.get("b" * 64) == Generated("Old", "length", 1, 4)


def test_the_judges_token_budget_is_kept_and_a_wrong_one_says_what_to_do():
    kept = StoredRun.from_json(StoredRun(judge_tokens=96).to_json())
    assert kept.judge_tokens == 96 and "judge_tokens" not in StoredRun().to_json()
    with pytest.raises(StoreError, match="judge_tokens must be a whole number of tokens"):
        StoredRun.from_json({**OLD, "judge_tokens": "many"})
