"""The batch runner on the engine: all cells batch together, rows are stored as they finish, re-runs repeat."""

from __future__ import annotations

import json
import re
import sqlite3
import time
from dataclasses import replace

import pytest

from loaders.base import BaseLoader
from tests.conftest import TEST_THREADS
from tests.engine.scripted import ScriptedModel, loader_of
from webui.batch.run.grid import GridSpec
from webui.batch.run.prompts import parse_lines
from webui.batch.asserts.errors import BatchInputError
from webui.batch.run.results import summarize
from webui.batch.run.runner import BatchJob
from webui.services import Services
from webui.store.batch_runs import StoredRun


def job(rows_text: str, **grid) -> BatchJob:
    spec = GridSpec(grid.pop("presets", []), grid.pop("axes", {"max_new_tokens": [6]}), grid.pop("samples", 1),
                    grid.pop("base_seed", 0))
    return BatchJob("test run", parse_lines(rows_text), spec, raw=True)


def run(services, batch_job):
    handle = services.batch_runner.start(batch_job)
    assert handle.wait(120)
    return handle


def test_every_cell_runs_batched_and_is_stored(services):
    handle = run(services, job("Hello\nOnce upon a time", axes={"temperature": [0, 1.0], "max_new_tokens": [6]},
                               samples=2))
    rows = handle.rows()
    assert handle.status == "done" and len(rows) == 8
    assert {r.setting for r in rows} == {"temperature=0", "temperature=1"}
    assert [r.seed for r in rows if r.setting == "temperature=1"] == [0, 1, 0, 1]
    assert all(r.completion_tokens > 0 and r.finish_reason in ("stop", "length") for r in rows)
    stored = services.batches.results(handle.run_id)
    assert [s["output"] for s in stored] == [r.output for r in rows]
    run_row = services.batches.get(handle.run_id)
    assert run_row.status == "done" and run_row.done == 8 and run_row.model == "tiny"


def test_a_grid_reads_its_prompt_once_and_rows_record_cached_tokens(services):
    long_prompt = "The quick brown fox jumps over the lazy dog. " * 12
    handle = run(services, job(long_prompt, axes={"temperature": [0, 0.7], "max_new_tokens": [3]}, samples=2))
    rows = handle.rows()
    assert handle.status == "done" and len(rows) == 4
    cached = sorted(r.cached_tokens for r in rows)
    assert cached[0] == 0 and all(c >= rows[0].prompt_tokens - 16 for c in cached[1:]), cached
    stored = services.batches.results(handle.run_id)
    assert sorted(s["cached_tokens"] for s in stored) == cached


def test_asserts_are_checked_per_row(services):
    rows = parse_lines("Hello")
    from webui.batch.asserts.assertion import parse_assert

    batch_job = BatchJob("asserts", [rows[0].__class__(**{**rows[0].__dict__, "asserts": [
        parse_assert("max-length:100 tokens"), parse_assert("contains:zzzz-not-there")]})],
        GridSpec([], {"max_new_tokens": [4]}), raw=True)
    result = run(services, batch_job).rows()[0]
    assert [a.passed for a in result.asserts] == [True, False] and result.passed is False


def test_a_rerun_repeats_greedy_and_seeded_outputs(services):
    first = run(services, job("Hi there\nThe weather", axes={"temperature": [0, 0.9], "max_new_tokens": [8]},
                              samples=2, base_seed=5))
    spec = services.batches.get(first.run_id).spec
    again = run(services, BatchJob.from_stored("again", spec))
    assert [r.output for r in again.rows()] == [r.output for r in first.rows()]
    assert [r.seed for r in again.rows()] == [r.seed for r in first.rows()]


def test_a_rerun_uses_the_stored_settings_even_if_a_preset_changed(services):
    services.presets.save("Mine", services.presets.get("Deterministic").params.replace(max_new_tokens=5))
    first = run(services, job("Hi", presets=["Mine"], axes={}))
    services.presets.save("Mine", services.presets.get("Creative").params)
    again = run(services, BatchJob.from_stored("again", services.batches.get(first.run_id).spec))
    assert again.rows()[0].output == first.rows()[0].output and again.rows()[0].params["temperature"] == 0.0


def test_bad_input_fails_before_anything_runs(services):
    runs_before = len(services.batches.list())
    with pytest.raises(BatchInputError, match="no prompts"):
        services.batch_runner.start(BatchJob("x", [], GridSpec([], {})))
    with pytest.raises(BatchInputError, match="top_p"):
        services.batch_runner.start(job("Hi", axes={"top_p": [1.5]}))
    with pytest.raises(BatchInputError, match="NoSuchPreset"):
        services.batch_runner.start(job("Hi", presets=["NoSuchPreset"]))
    with pytest.raises(BatchInputError, match="cells"):
        services.batch_runner.start(BatchJob("x", parse_lines("a\nb\nc"), GridSpec([], {"temperature": [0, 1]}, 5),
                                             max_cells=10))
    assert len(services.batches.list()) == runs_before


def test_no_model_loaded(services):
    services.models.unload()
    with pytest.raises(BatchInputError, match="no model is loaded"):
        services.batch_runner.start(job("Hi"))


@pytest.fixture
def slow_services(services):
    tok = services.loaded.tokenizer
    services.engine.set_model(ScriptedModel(tok, [100] * 300, step_delay=0.03))
    return services


def test_cancel_keeps_what_finished_and_rows_are_stored_as_they_finish(slow_services):
    services = slow_services
    lines = "\n".join(f"prompt {i}" for i in range(30))
    handle = services.batch_runner.start(job(lines, axes={"max_new_tokens": [2, 40]}))
    db_path = services.config.db_path
    deadline = time.monotonic() + 60
    while handle.done < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    with sqlite3.connect(db_path) as db:  # another process would see them too: they are committed
        assert db.execute("SELECT count(*) FROM batch_results WHERE run_id = ?", (handle.run_id,)).fetchone()[0] >= 3
    handle.cancel()
    assert handle.wait(30)
    kept = handle.rows()
    assert handle.status == "cancelled" and 3 <= len(kept) < 60
    assert all(r.finish_reason != "cancelled" for r in kept)
    stored = services.batches.results(handle.run_id)
    assert len(stored) == len(kept) and services.batches.get(handle.run_id).status == "cancelled"


def test_a_run_left_running_by_a_dead_process_is_marked_failed_and_keeps_its_rows(services, tmp_path):
    run_row = services.batches.create("orphan", StoredRun(), "tiny", 3)
    services.batches.add_result(run_row.id, 0, {"output": "kept"})
    again = Services.create(services.config)
    try:
        got = again.batches.get(run_row.id)
        assert got.status == "failed" and again.batches.results(run_row.id) == [{"output": "kept"}]
    finally:
        again.engine.close()
        again.db.close()


def test_store_rename_delete_and_json_spec(services):
    handle = run(services, job("Hi"))
    assert services.batches.rename(handle.run_id, "renamed").name == "renamed"
    spec = services.batches.get(handle.run_id).spec.to_json()
    assert json.loads(json.dumps(spec)) == spec and spec["settings"][0]["params"]["max_new_tokens"] == 6
    services.batches.delete(handle.run_id)
    assert handle.run_id not in [r.id for r in services.batches.list()]


def test_a_run_keeps_its_loader_for_each_rows_record(services):
    from webui.reproduce import record_for_batch_row

    handle = run(services, job("Hello"))
    stored = services.batches.get(handle.run_id)
    assert stored.spec.loader == "transformers"
    row = handle.rows()[0]
    assert stored.spec.loaders == {row.model: "transformers"} and row.model == stored.model
    assert row.loader == "transformers" and row.load_options == services.in_use().model.load_options
    assert record_for_batch_row(stored.model, stored.spec, row).load_options == row.load_options
    row = replace(row, loader=None, load_options=None)  # a row stored before rows kept their loader
    spec = stored.spec.to_json()
    spec["loaders"] = {row.model: "gptq"}  # each model of a run names its own loader
    assert record_for_batch_row(stored.model, StoredRun.from_json(spec), row, loader="transformers").loader == "gptq"
    del spec["loaders"]  # runs stored before runs had several models
    spec["loader"] = "llamacpp"  # what a run made with llama.cpp stores; the fallback is not used
    assert record_for_batch_row(stored.model, StoredRun.from_json(spec), row,
                                loader="transformers").loader == "llamacpp"


def test_the_cache_serves_a_cell_only_to_the_model_loaded_the_same_way(services):
    """A model loaded in another dtype answers otherwise: its cells are run, not taken from the first load's."""
    from loaders.base import LoadOptions

    first = run(services, job("Hello\nOnce upon a time"))
    assert not any(r.from_cache for r in first.rows())
    services.models.load("tiny", options=LoadOptions("cpu", "bfloat16", TEST_THREADS))
    assert services.loaded.dtype == "bfloat16"
    other = run(services, job("Hello\nOnce upon a time"))
    assert not any(r.from_cache for r in other.rows())
    services.models.load("tiny", options=LoadOptions("cpu", "float32", TEST_THREADS))
    again = run(services, job("Hello\nOnce upon a time"))
    assert all(r.from_cache for r in again.rows()) and [r.output for r in again.rows()] == [
        r.output for r in first.rows()]


@pytest.fixture
def two_models(services, other_tiny_model_dir):
    """The services with a second tiny model ("other": other weights) loaded beside "tiny" (still in use)."""
    (services.config.models_dir / "other").symlink_to(other_tiny_model_dir, target_is_directory=True)
    services.models.load("other", make_current=False)
    return services


def test_a_model_axis_runs_each_model_as_it_runs_alone(two_models):
    services = two_models
    prompts = "Hello\nOnce upon a time\nThe capital of France is"
    both = run(services, job(prompts, axes={"model": ["tiny", "other"], "max_new_tokens": [6]}))
    rows = both.rows()
    assert both.status == "done" and len(rows) == 6 and services.batches.get(both.run_id).model == "tiny, other"
    assert {r.setting for r in rows} == {"model=tiny", "model=other"}
    by_model = {m: [r.output for r in rows if r.model == m] for m in ("tiny", "other")}
    assert by_model["tiny"] != by_model["other"]  # other weights, other words
    for name in ("tiny", "other"):  # each model alone, with the cache off so it really generates
        services.models.use(name, services.owner)
        alone = run(services, replace(job(prompts), use_cache=False))
        assert [r.output for r in alone.rows()] == by_model[name] and {r.model for r in alone.rows()} == {name}
    summaries = {s.label: s for s in summarize(rows)}
    assert {"model=tiny (all settings)", "model=other (all settings)"} <= set(summaries)
    again = run(services, job(prompts, axes={"model": ["tiny", "other"], "max_new_tokens": [6]}))
    assert all(r.from_cache for r in again.rows())  # the cache keys name the model


def test_a_model_axis_naming_a_model_not_loaded_is_refused(two_models):
    with pytest.raises(BatchInputError, match=r"grid: the model 'nope' is not loaded; loaded: tiny, other"):
        two_models.batch_runner.start(job("Hello", axes={"model": ["tiny", "nope"]}))


def scripted_loader(tok, text: str, model_name: str, about: str = "a scripted model") -> BaseLoader:
    """A loader named "scripted" whose model, named ``model_name``, always answers ``text``."""
    return loader_of(lambda: ScriptedModel(tok, tok.encode(text, add_special_tokens=False), name=model_name),
                     about=about)


def test_another_loaded_model_judges_llm_rubric(services, tmp_path):
    """A scripted model loaded beside the tested one answers every judge request with the same verdict."""
    from webui.batch.asserts.assertion import parse_assert

    verdict = '{"reason":"short and kind","pass":true,"score":0.9}'
    services.registry.register(scripted_loader(services.loaded.tokenizer, verdict, "judge", "a scripted judge"))
    services.models.load(services.models.catalog.entry_for_path(tmp_path), loader="scripted", make_current=False)
    row = parse_lines("Hello")[0]
    rubric = BatchJob("judged", [replace(row, asserts=[parse_assert("llm-rubric:The reply is kind")])],
                      GridSpec([], {"max_new_tokens": [4]}), raw=True, judge_model=tmp_path.name)
    (judged,) = run(services, rubric).rows()
    (result,) = judged.asserts
    assert result.passed and result.score == 0.9 and result.detail == "judge: short and kind"
    assert judged.model == "tiny"  # the tested model wrote the output; the judge only judged it
    with pytest.raises(BatchInputError, match=r"judge: the model 'nope' is not loaded"):
        services.batch_runner.start(replace(rubric, judge_model="nope"))


def test_perplexity_asserts_get_the_chosen_tokens_logprobs_and_skip_the_cache(services):
    from webui.batch.asserts.assertion import parse_assert
    from webui.batch.asserts.text_metrics import perplexity

    rows = [replace(parse_lines("Hello")[0], asserts=[
        parse_assert("perplexity-score"), parse_assert({"type": "perplexity", "threshold": 1.0}),
        parse_assert("finish-reason:length")])]
    first = run(services, BatchJob("logprobs", rows, GridSpec([], {"max_new_tokens": [4]}), raw=True)).rows()[0]
    score, capped, finish = first.asserts
    assert first.completion_tokens == 4 and finish.passed  # 4 tokens allowed, 4 made: stopped by length
    assert 0 < score.score < 0.5 and score.passed  # a random model: perplexity well above 1; default threshold 0
    assert not capped.passed and capped.detail.startswith("perplexity ")
    assert abs(1 / score.score - 1 - float(capped.detail.split()[1].rstrip(","))) < 0.01
    again = run(services, BatchJob("again", rows, GridSpec([], {"max_new_tokens": [4]}), raw=True)).rows()[0]
    assert not again.from_cache and again.asserts[0].score == pytest.approx(score.score)  # greedy: same tokens
    assert perplexity([-1.0, -1.0]) == pytest.approx(2.718281828)


def test_graded_kinds_run_end_to_end_on_the_tiny_model(services):
    """The tiny random model judges factuality and model-graded-closedqa on each output, and select-best once the
    test's two settings have answered: its verdicts are arbitrary, the plumbing is not (each verdict is stored
    with a reason, the structured answer is always read)."""
    from webui.batch.asserts.assertion import parse_assert

    short = {"factuality": "{{completion}} vs {{ideal}}", "model-graded-closedqa": "{{completion}}: {{criteria}}?",
             "select-best": "{{criteria}}: {{outputs}}"}  # the tiny model reads 256 tokens: short grading prompts
    row = replace(parse_lines("Hello")[0], variables={"context": "Hello is a greeting."}, asserts=[
        parse_assert({"type": kind, "value": value, "rubricPrompt": short[kind]}) for kind, value in (
            ("factuality", "Hello to you"), ("model-graded-closedqa", "is a greeting"),
            ("select-best", "the friendliest"))])
    graded = BatchJob("graded", [row], GridSpec([], {"max_new_tokens": [3], "temperature": [0, 1.0]}), raw=True)
    handle = run(services, graded)
    rows = handle.rows()
    assert handle.status == "done" and len(rows) == 2
    for result in rows:
        factuality, closedqa, best = result.asserts
        assert factuality.detail.startswith("judge: (") and factuality.score in (0.0, 1.0)  # a category, read
        assert closedqa.detail.startswith("judge: The submission ") and closedqa.score in (0.0, 1.0)
        assert best.detail.startswith("judge: ") and "could not" not in best.detail
    assert sorted(r.asserts[2].score for r in rows) == [0.0, 1.0]  # the judge picked exactly one
    stored = services.batches.results(handle.run_id)
    assert [[a["detail"] for a in s["asserts"]] for s in stored] == [[a.detail for a in r.asserts] for r in rows]
    with pytest.raises(BatchInputError, match=r"prompt 1: select-best compares the outputs of several prompts or "
                                              r"settings"):
        services.batch_runner.start(replace(graded, grid=GridSpec([], {"max_new_tokens": [3]})))
    recall = replace(row, asserts=[parse_assert("context-faithfulness")])
    with pytest.raises(BatchInputError, match=r"prompt 1: context-faithfulness reads the test's `query` var, which "
                                              r"it does not have"):
        services.batch_runner.start(replace(graded, rows=[recall]))


def test_max_score_picks_a_tests_best_output_by_its_other_asserts_once_all_are_made(services):
    """max-score (promptfoo's, #49) on the tiny model: no judge, the other asserts' weighted scores pick one output
    of the test's two settings, and the rows are stored with the pick."""
    from webui.batch.asserts.assertion import parse_assert

    best = parse_assert({"type": "max-score", "value": {"weights": {"max-length": 2}}})
    row = replace(parse_lines("Hello")[0], asserts=[parse_assert("max-length:2 tokens"), best])
    job = BatchJob("max", [row], GridSpec([], {"max_new_tokens": [1, 3], "temperature": [0]}), raw=True)
    handle = run(services, job)
    rows = handle.rows()
    assert handle.status == "done" and [r.asserts[0].passed for r in rows] == [True, False]
    assert [r.asserts[1].passed for r in rows] == [True, False]
    assert rows[0].asserts[1].detail.startswith("judge: selected as the highest scoring output (score 1.000)")
    stored = services.batches.results(handle.run_id)
    assert [s["asserts"][1]["passed"] for s in stored] == [True, False]


def test_a_raw_setting_reads_the_prompt_as_it_is_beside_one_through_the_chat_template(services):
    from webui.batch.run.grid import Setting
    from webui.engine import SamplingParams

    params = SamplingParams(temperature=0.0, max_new_tokens=2)
    settings = [Setting("completion", params, raw=True), Setting("chat", params)]
    handle = run(services, BatchJob("raw and chat", parse_lines("Hello"), GridSpec([], {}), settings=settings))
    completion, chat = sorted(handle.rows(), key=lambda r: r.setting != "completion")
    assert completion.prompt_tokens < chat.prompt_tokens  # the template's turn markers, for the chat setting only
    assert handle.keys[0] != handle.keys[1]
    stored = services.batches.get(handle.run_id).spec.settings
    assert [s.raw for s in stored] == [True, False]


def test_similar_asserts_score_by_the_run_models_embeddings_and_say_so(services):
    """The runner embeds the output, its transformed form and the references between engine steps; the check
    takes the cosine (the trigram score only without an embedding model)."""
    from webui.batch.asserts.assertion import parse_assert
    from webui.batch.asserts.kinds import similarity
    from webui.embeddings import embed_texts

    reference = "The capital of France is Paris"
    rows = [replace(parse_lines("Hello")[0], asserts=[
        parse_assert(f"similar:{reference}"),
        parse_assert({"type": "similar", "value": reference, "transform": "output.toUpperCase()", "threshold": 0})])]
    batch_job = BatchJob("similar", rows, GridSpec([], {"max_new_tokens": [6]}), raw=True)
    row = run(services, batch_job).rows()[0]
    slot = services.models.slot("tiny")
    upper = row.output.upper()
    found = embed_texts(slot.engine, slot.model, [row.output, upper, reference])
    plain, transformed = row.asserts
    assert plain.detail.startswith("cosine of embeddings from tiny (mean-pooled hidden states) (score ")
    assert plain.score == pytest.approx(max(0.0, found.cosine(row.output, reference)), abs=1e-5)
    assert plain.passed is (plain.score >= 0.75)
    assert transformed.score == pytest.approx(max(0.0, found.cosine(upper, reference)), abs=1e-5)
    assert transformed.passed and plain.score != pytest.approx(similarity(row.output, reference))
    cached = run(services, batch_job).rows()[0]  # a cell from the response cache is embedded as well
    assert cached.from_cache and cached.asserts == row.asserts


def test_answer_relevance_is_the_mean_cosine_of_the_run_models_embeddings_of_the_judges_questions(services, tmp_path):
    """The judge (a scripted model beside the tested one) is asked three times for a question, in free text, each
    reply read to its line's end (promptfoo's matchesAnswerRelevance, #49), and the run's embedder (the tiny
    model) embeds it and the query var: the score is the mean cosine of those vectors."""
    from webui.batch.asserts.assertion import parse_assert
    from webui.embeddings import embed_texts

    question = "How do people say hello?"
    services.registry.register(scripted_loader(services.loaded.tokenizer, f"{question}\nAnd more.", "judge"))
    services.models.load(services.models.catalog.entry_for_path(tmp_path), loader="scripted", make_current=False)
    query = "How do people greet?"
    row = replace(parse_lines("Hello")[0], variables={"query": query}, asserts=[parse_assert("answer-relevance")])
    handle = run(services, BatchJob("relevance", [row], GridSpec([], {"max_new_tokens": [3]}), raw=True,
                                    judge_model=tmp_path.name))
    (result,) = handle.rows()[0].asserts
    assert result.detail.startswith("judge: relevance "), result.detail
    assert "embeddings from tiny (mean-pooled hidden states)" in result.detail
    said = re.findall(r'("(?:[^"\\]|\\.)*") \((-?\d+\.\d\d)\)', result.detail)
    assert [json.loads(q) for q, _ in said] == [question]  # the same reply on each of the three calls, to its line's end
    slot = services.models.slot("tiny")
    cosine = embed_texts(slot.engine, slot.model, [query, question]).cosine(query, question)
    assert said[0][1] == f"{cosine:.2f}"
    assert result.score == pytest.approx(min(1.0, max(0.0, cosine)), abs=1e-5)
    assert result.passed is (result.score >= 0)  # promptfoo's default threshold, 0


def test_similar_asserts_score_by_trigrams_when_no_model_gives_embeddings(services, tmp_path):
    from webui.batch.asserts.assertion import parse_assert
    from webui.batch.asserts.kinds import similarity

    services.registry.register(scripted_loader(services.loaded.tokenizer, " Paris is the capital", "plain"))
    services.models.load(services.models.catalog.entry_for_path(tmp_path), loader="scripted")
    services.models.unload("tiny")
    rows = [replace(parse_lines("Hello")[0], asserts=[parse_assert("similar:Paris is the capital of France")])]
    row = run(services, BatchJob("trigrams", rows, GridSpec([], {"max_new_tokens": [4]}), raw=True)).rows()[0]
    (result,) = row.asserts
    assert result.detail.startswith("trigram overlap, no embedding model (score ")
    assert result.score == pytest.approx(similarity(row.output, "Paris is the capital of France"))


def test_a_loaded_sentence_embedding_model_embeds_for_similar_asserts(services, tiny_model_dir, tmp_path):
    from tests.engine.test_embeddings import sentence_folder
    from webui.batch.asserts.assertion import parse_assert

    sentence_folder(tiny_model_dir, services.config.models_dir / "mini-embed")
    services.models.load("mini-embed", make_current=False)
    assert services.models.slot("mini-embed").model.loader == "embedding"
    rows = [replace(parse_lines("Hello")[0], asserts=[parse_assert("similar:Hello there")])]
    row = run(services, BatchJob("dedicated", rows, GridSpec([], {"max_new_tokens": [4]}), raw=True)).rows()[0]
    assert row.model == "tiny" and row.asserts[0].detail.startswith("cosine of embeddings from mini-embed (score ")
    with pytest.raises(BatchInputError, match="is an embedding model and writes no text"):
        run(services, job("Hello", axes={"model": ["mini-embed"], "max_new_tokens": [4]}))
