"""BatchController without a browser: plan, run, cancel, re-run, rename, delete, export, a row's record."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import replace
from pathlib import Path

import pytest

from tests.conftest import last
from webui.controllers import UserError
from webui.controllers.batch import BatchController, BatchForm
from webui.engine import SamplingParams
from webui.store.batch_runs import StoredRun

BASE = SamplingParams(temperature=0, max_new_tokens=4, ban_eos=True)


@pytest.fixture
def controller(services):
    return BatchController(services)



def test_plan_run_rows_and_export(controller, tmp_path):
    form = BatchForm(prompts="Hello\nOnce upon a time", asserts="max-length:500", axes="temperature=0,0.7",
                     samples=2, name="mine")
    job = controller.job(form, BASE)
    assert "2 prompts × 2 settings × 2 samples = 8 cells" in controller.plan(job)
    done = last(controller.run(job))
    assert done.finished and done.status.startswith("Finished: 8/8 rows") and "tok/s for the whole run" in done.status
    rows = controller.rows(done.run_id)
    assert len(rows) == 8 and all(r.passed for r in rows) and all(r.completion_tokens == 4 for r in rows)
    assert controller.run_choices()[0] == (f"#{done.run_id} mine · 8/8 · done", done.run_id)
    exported = list(csv.DictReader(io.StringIO(controller.export(done.run_id, "csv").read_text())))
    assert len(exported) == 8
    lines = controller.export(done.run_id, "jsonl").read_text().splitlines()
    assert len(lines) == 8 and json.loads(lines[0])["setting"]


def test_rerun_repeats_and_rename_delete(controller):
    first = last(controller.run(controller.job(BatchForm(prompts="Hello"), BASE)))
    again = last(controller.rerun(first.run_id))
    assert again.status.startswith("Re-run Finished: 1/1")
    assert [r.output for r in controller.rows(again.run_id)] == [r.output for r in controller.rows(first.run_id)]
    controller.rename(first.run_id, "renamed")
    assert "renamed" in controller.run_choices()[-1][0]
    controller.delete(first.run_id)
    assert controller.rows(first.run_id) == [] and len(controller.run_choices()) == 1
    for action in (lambda: controller.delete(None), lambda: controller.export(None, "csv"),
                   lambda: list(controller.rerun(None))):
        with pytest.raises(UserError, match="Choose a stored run first"):
            action()
    with pytest.raises(UserError, match="deleted"):
        list(controller.rerun(first.run_id))


def test_cancel_keeps_finished_rows(controller):
    job = controller.job(BatchForm(prompts="\n".join(f"Story {i}" for i in range(12))),
                         BASE.replace(max_new_tokens=200))
    steps = controller.run(job)
    first = next(steps)
    assert controller.cancel(first.run_id).startswith("Cancelling")
    done = last(steps)
    assert done.status.startswith("Cancelled") and controller.cancel(done.run_id) == "Nothing is running."


def test_bad_input_is_refused_before_anything_runs(controller, tmp_path):
    for form, said in ((BatchForm(prompts="Hi", axes="top_p=1.5"), r"top_p must be in \(0, 1\]"),
                       (BatchForm(prompts="Hi", asserts="regex:([unclosed"), "regex"),
                       (BatchForm(prompts="  "), "prompt"),
                       (BatchForm(prompts="Hi", presets=("Nope",)), "Nope")):
        with pytest.raises(UserError, match=said):
            controller.plan(controller.job(form, BASE))
    bad = tmp_path / "p.jsonl"
    bad.write_text("{not json\n")
    with pytest.raises(UserError, match="p.jsonl"):
        controller.upload(bad)
    good = tmp_path / "p.csv"
    good.write_text("prompt\nOne\nTwo\n")
    (name, content), note = controller.upload(good)
    assert name == "p.csv" and "2 prompts" in note
    assert len(controller.job(BatchForm(upload=(name, content)), BASE).rows) == 2
    assert controller.run_choices() == []


def test_a_row_shows_what_the_model_read_and_its_record(controller, services):
    done = last(controller.run(controller.job(BatchForm(prompts="Name a fruit.", system="Be brief."), BASE)))
    row = controller.rows(done.run_id)[0]
    seen = controller.inspect_row(done.run_id, row)
    assert "Name a fruit." in seen.seen.text and "Be brief." in seen.seen.text
    assert seen.record.loader == "transformers" and seen.record.params.seed == row.seed
    assert services.engine.generate(seen.record.request(services.loaded.tokenizer)).text == row.output


def test_a_run_uses_the_chosen_chat_template_and_its_records_keep_it(controller, services):
    services.settings.update(chat_template="User/Assistant")
    job = controller.job(BatchForm(prompts="Name a fruit.", system="Be brief."), BASE)
    assert "chat template: User/Assistant" in controller.plan(job)
    done = last(controller.run(job))
    row = controller.rows(done.run_id)[0]
    seen = controller.inspect_row(done.run_id, row)
    assert seen.seen.text == "Be brief.\n\nUser: Name a fruit.\nAssistant:" and "\nUser:" in row.params["stop"]
    assert seen.record.chat_template["name"] == "User/Assistant"
    assert services.engine.generate(seen.record.request(services.loaded.tokenizer)).text == row.output


def test_scored_asserts_weights_and_the_summarys_interval(controller, tmp_path):
    from webui.batch.run.results import summarize

    checker = tmp_path / "check.py"
    checker.write_text("def get_assert(output, context):\n    return {'pass': True, 'score': 0.5, 'reason': 'half'}\n")
    form = BatchForm(prompts="Hello", samples=3, asserts=f"max-length:4 tokens\npython:{checker}\nnot-is-json\n"
                                                          "similar:completely different words here\nttft:60000")
    done = last(controller.run(controller.job(form, BASE.replace(temperature=1.0))))
    rows = controller.rows(done.run_id)
    assert len(rows) == 3 and all(len(r.asserts) == 5 for r in rows)
    for r in rows:
        similar = r.asserts[3]
        assert similar.score is not None and r.passed is (similar.score >= 0.75)
        assert r.score == pytest.approx((1 + 0.5 + 1 + similar.score + 1) / 5)
    (summary,) = summarize(rows)
    assert summary.pass_interval is not None and summary.mean_score == pytest.approx(sum(r.score for r in rows) / 3)


def test_an_uploaded_promptfoo_suite_runs_its_providers_as_settings(controller, tmp_path):
    suite = tmp_path / "promptfooconfig.yaml"
    suite.write_text("prompts: ['Say {{word}}']\nproviders:\n  - id: a\n    config: {max_tokens: 3}\n"
                     "  - id: b\n    config: {max_tokens: 2, temperature: 0.5, seed: 1}\n"
                     "tests:\n  - vars: {word: hi}\n    assert:\n      - type: not-regex\n        value: '^$'\n")
    upload, note = controller.upload(suite)
    assert "promptfoo suite" in note and "1 prompts × 2 providers" in note
    done = last(controller.run(controller.job(BatchForm(upload=upload), BASE)))
    rows = controller.rows(done.run_id)
    assert [(r.setting, r.completion_tokens) for r in rows] == [("a", 3), ("b", 2)] and all(r.passed for r in rows)
    shaped = json.loads(controller.export(done.run_id, "json").read_text())
    assert [r["provider"]["label"] for r in shaped["results"]["results"]] == ["a", "b"]
    bad = tmp_path / "bad.yaml"
    bad.write_text("prompts: ['x']\ntests:\n  - assert:\n      - type: moderation\n        value: fair\n")
    with pytest.raises(UserError, match="the assert type 'moderation' is not supported here"):
        controller.upload(bad)


def test_a_refused_upload_is_said_in_its_note_and_the_text_box_is_used(controller, tmp_path):
    """#46 item 9: a refusal is the upload note (it stays on the page), not only a toast; nothing is uploaded."""
    suite = tmp_path / "promptfooconfig.yaml"
    suite.write_text("prompts: ['Say {{word}}']\nproviders:\n  - id: workbench\ntests:\n  - vars: {word: hi}\n")
    upload, note = controller.take_upload([str(suite)])
    assert upload is None and note.startswith("⚠ **Not used**: promptfoo config: providers\\[0\\]: workbench: "
                                              "needs a model name")
    assert note.endswith("The prompts in the text box are used until an upload is accepted.")
    suite.write_text("prompts: ['Say {{word}}']\ntests:\n  - vars: {word: hi}\n")
    upload, note = controller.take_upload([str(suite)])
    assert upload is not None and "1 prompts × 1 providers" in note


def test_a_suite_uploaded_with_the_files_it_reads_finds_them(controller, tmp_path):
    """#32: a promptfoo config is uploaded unchanged with its file:// files; they are read from beside it."""
    (tmp_path / "chat.json").write_text('[{"role": "user", "content": "Say {{word}}"}]')
    (tmp_path / "promptfooconfig.yaml").write_text("prompts: [file://chat.json]\ntests:\n  - vars: {word: hi}\n")
    upload, note = controller.upload_files([str(tmp_path / "promptfooconfig.yaml"), str(tmp_path / "chat.json")])
    assert "**promptfooconfig.yaml**: 1 prompts × 1 providers" in note and Path(upload[0]).parent != tmp_path
    job = controller.job(BatchForm(upload=upload), BASE)
    assert job.rows[0].messages == ({"role": "user", "content": "Say hi"},)
    with pytest.raises(UserError, match="choose one promptfooconfig.yaml and the files it reads"):
        controller.upload_files([str(tmp_path / "chat.json"), str(tmp_path / "chat.json")])
    alone = "cannot read .*chat.json.*choose the config and those files together"  # uploaded alone: not found
    with pytest.raises(UserError, match=alone):
        controller.upload(tmp_path / "promptfooconfig.yaml")


def test_a_completion_provider_is_planned_raw(controller, tmp_path):
    suite = tmp_path / "promptfooconfig.yaml"
    suite.write_text("prompts: ['Q: hi\\nA:']\nproviders: ['openai:completion:x', 'openai:chat:y']\n")
    upload, _ = controller.upload(suite)
    said = controller.plan(controller.job(BatchForm(upload=upload), BASE))
    assert "chat template: " in said and "; raw prompts for openai:completion:x" in said


def test_a_tool_loop_is_planned_with_a_budget_for_each_of_its_turns(controller, tmp_path):
    """#44: a provider with canned tool results runs up to max_tool_steps turns that call and one that answers."""
    suite = tmp_path / "promptfooconfig.yaml"
    suite.write_text("prompts: ['hi']\nproviders:\n  - id: openai:chat:y\n    config: {max_tokens: 10, tools: "
                     "[{type: function, function: {name: f}}], tool_results: {f: done}, max_tool_steps: 2}\n"
                     "  - id: openai:chat:z\n    config: {max_tokens: 10}\n")
    upload, _ = controller.upload(suite)
    assert "at most 40 tokens" in controller.plan(controller.job(BatchForm(upload=upload), BASE))  # 3 x 10 + 10


def test_an_uploaded_suite_names_what_it_does_not_apply(controller, tmp_path):
    suite = tmp_path / "promptfooconfig.yaml"
    suite.write_text("prompts: ['x']\nproviders:\n  - id: openai:chat:gpt-4o\n    config: {apiKey: sk-1}\n")
    _, note = controller.upload(suite)
    assert "Note: providers\\[0\\] \\(openai:chat:gpt\\-4o\\)\\.config\\.apiKey is not applied" in note


def test_a_person_reviews_rows_and_the_review_is_stored_counted_and_exported(controller):
    from webui.batch.run.results import summarize

    done = last(controller.run(controller.job(BatchForm(prompts="Hello\nBye", samples=1), BASE)))
    first, second = controller.rows(done.run_id)
    assert controller.review(done.run_id, (first.prompt_index, first.setting, first.sample), "good", " fine ") \
        == "Marked good."
    controller.review(done.run_id, (second.prompt_index, second.setting, second.sample), "bad", "rambles")
    rows = controller.rows(done.run_id)
    assert [r.review for r in rows] == [{"verdict": "good", "note": "fine"}, {"verdict": "bad", "note": "rambles"}]
    (summary,) = summarize(rows)
    assert (summary.good, summary.bad) == (1, 1)
    exported = list(csv.DictReader(io.StringIO(controller.export(done.run_id, "csv").read_text())))
    assert [(e["review"], e["review_note"]) for e in exported] == [("good", "fine"), ("bad", "rambles")]
    assert json.loads(controller.export(done.run_id, "jsonl").read_text().splitlines()[1])["review"]["verdict"] == "bad"
    controller.review(done.run_id, (first.prompt_index, first.setting, first.sample), None, "")
    assert controller.rows(done.run_id)[0].review is None
    with pytest.raises(UserError, match="Click the row to review first"):
        controller.review(done.run_id, None, "good", "")
    with pytest.raises(UserError, match="not in this run"):
        controller.review(done.run_id, (9, "x", 0), "good", "")


def test_cells_already_run_come_from_the_cache_and_only_new_cells_are_generated(controller):
    sampled = BASE.replace(temperature=1.0)
    first = last(controller.run(controller.job(BatchForm(prompts="Hello\nBye", axes="top_k=5", samples=2), sampled)))
    before = controller.rows(first.run_id)
    assert not any(r.from_cache for r in before)
    widened = last(controller.run(controller.job(BatchForm(prompts="Hello\nBye", axes="top_k=5,40", samples=2),
                                                 sampled)))
    rows = controller.rows(widened.run_id)
    cached = [r for r in rows if r.from_cache]
    assert len(rows) == 8 and {r.setting for r in cached} == {"top_k=5"} and len(cached) == 4
    assert [r.output for r in cached] == [r.output for r in before]  # the same requests, the same responses
    assert not any(r.from_cache for r in rows if r.setting == "top_k=40")
    fresh = last(controller.rerun(widened.run_id, use_cache=False))
    assert not any(r.from_cache for r in controller.rows(fresh.run_id))
    again = last(controller.run(controller.job(BatchForm(prompts="Hello\nBye", axes="top_k=5", samples=2,
                                                         use_cache=False), sampled)))
    assert not any(r.from_cache for r in controller.rows(again.run_id))


def test_llm_rubric_is_judged_by_the_loaded_model_and_its_verdict_is_kept(controller):
    from webui.batch.run.judge import JUDGE_PROMPT

    form = BatchForm(prompts="Hello", asserts="llm-rubric:The reply is a greeting")
    done = last(controller.run(controller.job(form, BASE)))
    (row,) = controller.rows(done.run_id)
    (result,) = row.asserts
    assert result.detail.startswith("judge: ") and 0 <= result.score <= 1  # the tiny model always answers JSON
    assert row.passed is result.passed
    stored = controller.store.get(done.run_id).spec
    assert stored.judge_prompt == JUDGE_PROMPT
    bad = controller.job(form, BASE)
    with pytest.raises(UserError, match=r"the judge prompt must hold \{\{output\}\} and \{\{rubric\}\}"):
        last(controller.run(replace(bad, judge_prompt="Grade {{output}}")))


@pytest.fixture
def other_loader(services):
    """The services with a second loader for the tiny model ("other": transformers under another name), as
    llama.cpp is a second loader for the default model's GGUF."""
    from loaders.transformers_loader import TransformersLoader

    class Other(TransformersLoader):
        name = "other"

        def load(self, path, options, progress=None):
            model = super().load(path, options, progress)
            model.loader = "other"  # the loaded model names its loader, as each real one does
            return model

    services.registry.register(Other())
    return services


def test_a_rerun_runs_on_the_loader_it_ran_on_loading_it_again_and_hits_the_cache(controller, other_loader):
    services = other_loader
    services.models.load("tiny", loader="other", make_current=False)
    assert services.models.names() == ["tiny", "tiny@other"]
    first = last(controller.run(controller.job(BatchForm(prompts="Hello\nBye"), BASE)))
    rows = controller.rows(first.run_id)
    assert {(r.model, r.loader) for r in rows} == {("tiny", "transformers")}
    assert rows[0].load_options == services.models.slot("tiny").model.load_options
    services.models.unload()  # a restart that loads only the other loader
    services.models.load("tiny", loader="other")
    assert services.models.names() == ["tiny@other"]  # not the bare name: that means the default loader
    steps = list(controller.rerun(first.run_id))
    assert steps[0].status.startswith("Loading tiny (loader transformers") and not steps[0].finished
    assert steps[-1].status.startswith("Re-run Finished: 2/2")
    again = controller.rows(steps[-1].run_id)
    assert {(r.model, r.loader) for r in again} == {("tiny", "transformers")}
    assert all(r.from_cache for r in again) and [r.output for r in again] == [r.output for r in rows]
    assert services.in_use().name == "tiny@other"  # loaded beside it: the model in use stays


def test_a_rerun_says_what_it_cannot_have_and_never_takes_another_loader(controller, other_loader):
    from loaders.base import LoadOptions

    services = other_loader
    first = last(controller.run(controller.job(BatchForm(prompts="Hello"), BASE)))
    services.models.load("tiny", options=LoadOptions(device="cpu", extra={"attn_implementation": "eager"}))
    with pytest.raises(UserError, match=r"re-run: the run ran on tiny loaded with attn_implementation=\w+, but it "
                                        r"is loaded now with attn_implementation=eager; load it again with"):
        list(controller.rerun(first.run_id))
    services.models.load("tiny", loader="other")
    services.models.unload("tiny")
    (services.config.models_dir / "tiny").unlink()  # gone from the models dir; only tiny@other is loaded
    with pytest.raises(UserError, match=r"re-run: the run ran on tiny \(loader transformers.*\), which is not loaded "
                                        r"and could not be loaded: unknown model 'tiny'"):
        list(controller.rerun(first.run_id))


def test_a_run_stored_without_its_loader_still_opens_and_reruns_with_a_note(controller, other_loader):
    services = other_loader
    first = last(controller.run(controller.job(BatchForm(prompts="Hello"), BASE)))
    stored = services.batches.get(first.run_id)
    old_spec = {k: v for k, v in stored.spec.to_json().items()
                if k not in ("version", "loader", "loaders", "load_options")}
    old_spec["settings"] = [{k: v for k, v in s.items() if k != "ran_on"} for s in old_spec["settings"]]
    old_rows = [{k: v for k, v in r.items() if k not in ("loader", "load_options")}
                for r in services.batches.results(first.run_id)]

    def stored_before(spec):
        run = services.batches.create("old run", StoredRun.from_json(spec), "tiny", len(old_rows))
        for i, row in enumerate(old_rows):
            services.batches.add_result(run.id, i, row)
        services.batches.finish(run.id, "done")
        return run.id

    old = stored_before(old_spec)
    assert [r.loader for r in controller.rows(old)] == [None]  # it opens
    done = last(controller.rerun(old))
    assert done.status.startswith("Re-run Finished: 1/1") and (
        f"Run #{old} was stored without its loader, so tiny re-runs on the loader it loads with by default "
        "(transformers).") in done.status
    assert [(r.model, r.loader, r.from_cache) for r in controller.rows(done.run_id)] == [("tiny", "transformers", True)]
    on_other = stored_before({**old_spec, "loader": "other"})  # then the model that loaded first had the bare name
    done = last(controller.rerun(on_other))
    assert [(r.model, r.loader) for r in controller.rows(done.run_id)] == [("tiny@other", "other")]


def test_progress_moves_as_tokens_stream_not_only_when_cells_end(controller, monkeypatch):
    import webui.controllers.batch as batch

    monkeypatch.setattr(batch, "REFRESH_SECONDS", 0.05)
    job = controller.job(BatchForm(prompts="One\nTwo\nThree"), BASE.replace(max_new_tokens=200))
    steps = list(controller.run(job))
    running = [s.status for s in steps if not s.finished and s.status.startswith("Running: 0/3 done")]
    moving = [s for s in running if "tokens so far" in s]
    assert any("3 generating" in s for s in moving)  # the cells run at once: none ends before the others
    counts = [int(s.split(" tokens so far")[0].rsplit("· ", 1)[1].replace(",", "")) for s in moving]
    assert counts == sorted(counts) and counts[-1] > 0
    made = sum(r.completion_tokens for r in controller.rows(steps[-1].run_id))
    assert steps[-1].status.startswith("Finished: 3/3 rows") and f"{made:,} tokens generated" in steps[-1].status


def test_cells_from_the_cache_are_counted_as_such_and_add_no_speed(controller):
    first = last(controller.run(controller.job(BatchForm(prompts="Hello\nBye"), BASE)))
    assert "from cache" not in first.status and "8 tokens generated" in first.status
    again = last(controller.rerun(first.run_id))
    assert "2 from cache" in again.status and "no tokens generated, so no tok/s" in again.status
    assert "tok/s for the whole run" not in again.status
    wider = last(controller.run(controller.job(BatchForm(prompts="Hello\nBye\nThird"), BASE)))
    assert "2 from cache" in wider.status and "4 tokens generated" in wider.status  # only the new prompt's


def test_a_reruns_name_says_how_it_differs_and_names_stay_unique(controller):
    first = last(controller.run(controller.job(BatchForm(prompts="Hello", name="mine"), BASE)))
    names = [controller.store.get(last(controller.rerun(rid, use_cache)).run_id).name
             for rid, use_cache in ((first.run_id, True), (first.run_id, False), (first.run_id, True))]
    assert names == ["mine (re-run)", "mine (re-run, no cache)", "mine (re-run 2)"]
    of_rerun = last(controller.rerun(controller.run_choices()[0][1], False))  # a re-run of the last re-run
    assert controller.store.get(of_rerun.run_id).name == "mine (re-run, no cache 2)"


def test_opening_a_stored_run_gives_back_the_form_that_made_it(controller, tmp_path):
    form = BatchForm(prompts="Hello\nA back\\\\slash and a\\nnewline", asserts="max-length:500\nnot-contains:zzz",
                     axes="temperature=0,0.7\nstop=[[\"a,b\"], []]", samples=2, base_seed=3, system="Be brief.",
                     name="mine", use_cache=False)
    done = last(controller.run(controller.job(form, BASE)))
    again, note = controller.form_of(done.run_id)
    assert (again.prompts, again.asserts, again.axes, again.samples, again.base_seed, again.system, again.name,
            again.use_cache, again.upload) == (form.prompts, form.asserts, form.axes, 2, 3, "Be brief.", "mine",
                                               False, None)
    assert "Parameters tab's values of then (temperature=0, max_new_tokens=4, ban_eos=true)" in note
    first_job, second_job = controller.job(form, BASE), controller.job(again, BASE)
    assert controller.runner.plan(first_job)[1] == controller.runner.plan(second_job)[1]  # the very same cells
    prompts = tmp_path / "own.jsonl"  # prompts with asserts of their own go back as a file
    prompts.write_text('{"id": "a", "prompt": "Hi", "asserts": ["contains:x"]}\n'
                       '{"id": "b", "prompt": "Bye", "asserts": [{"type": "max-length", "value": 9, "weight": 2}]}\n')
    upload, _ = controller.upload(prompts)
    own = last(controller.run(controller.job(BatchForm(upload=upload, presets=("Deterministic",)), BASE)))
    again, note = controller.form_of(own.run_id)
    assert again.upload[0] == f"run-{own.run_id}-prompts.jsonl" and again.prompts == "Hi\nBye"
    assert again.presets == ("Deterministic",) and again.asserts == "" and "each one's own asserts" in note
    assert controller.job(again, BASE).rows == controller.job(BatchForm(upload=upload), BASE).rows
    with pytest.raises(UserError, match="Choose a stored run first"):
        controller.form_of(None)


def test_the_review_panel_names_the_row_it_reviews(controller):
    from webui.controllers.batch import NO_ROW

    done = last(controller.run(controller.job(BatchForm(prompts="Hello\nBye", asserts="not-contains:zzz",
                                                        axes="temperature=0,0.5"), BASE)))
    rows = controller.rows(done.run_id)
    row = rows[2]
    said = controller.reviewed(done.run_id, (row.prompt_index, row.setting, row.sample))
    assert (row.prompt_id, row.prompt, row.setting) == ("1", "Hello", "temperature=0.5")
    assert said.startswith("**Reviewing row #3 of 4**: prompt 1 “Hello” · setting **temperature=0\\.5** · "
                           f"sample 0 · seed {row.seed} · model tiny") and "✓ not\\-contains:zzz" in said
    assert controller.reviewed(done.run_id, None) == NO_ROW == controller.reviewed(done.run_id, (9, "x", 0))


def test_a_listening_server_runs_no_python_from_the_batch_tab_unless_allowed(services, tmp_path):
    """Python asserts and transforms run with the server's rights: with --listen the Batch tab refuses them (and
    says what to do) unless --allow-python-asserts; javascript (sandboxed) still runs."""
    (tmp_path / "t.py").write_text("def get_transform(output, context):\n    return output\n")
    form = BatchForm(prompts="Hello", asserts="python:len(output) < 9999\njavascript:output.length >= 0")
    listening = BatchController(replace(services, config=replace(services.config, listen=True)))
    with pytest.raises(UserError, match=r"does not run Python \(python:len\(output\) < 9999\).*"
                                        "--allow-python-asserts"):
        listening.job(form, BASE)
    upload = tmp_path / "promptfooconfig.yaml"
    upload.write_text("prompts: ['x']\ntests:\n  - assert:\n      - type: contains\n        value: x\n"
                      "        transform: file://t.py\n")
    with pytest.raises(UserError, match="transform file://.*t.py"):  # uploaded with the config, read from there
        listening.job(BatchForm(upload=listening.upload_files([str(upload), str(tmp_path / "t.py")])[0]), BASE)
    with pytest.raises(UserError, match="batch-suite-.*/t.py: there is no file"):  # alone: a folder of its own
        listening.upload_files([str(upload)])
    assert listening.job(BatchForm(prompts="Hello", asserts="javascript:output.length >= 0"), BASE).rows
    allowed = BatchController(replace(services, config=replace(services.config, listen=True,
                                                                allow_python_asserts=True)))
    assert allowed.job(form, BASE).rows and BatchController(services).job(form, BASE).rows


def test_a_suite_written_for_a_hosted_grader_is_graded_by_the_forms_judge_model(controller, tmp_path):
    """#49 item 6: the Batch tab's judge model is promptfoo's --grader: it grades instead of the suite's hosted
    grader; the upload says so, and a run without one is refused saying what to set."""
    suite = tmp_path / "promptfooconfig.yaml"
    suite.write_text("prompts: ['Say {{word}}']\ndefaultTest:\n  options:\n    provider: openai:gpt-4.1-mini\n"
                     "tests:\n  - vars: {word: hi}\n    assert:\n      - {type: llm-rubric, value: is short}\n")
    upload, note = controller.upload(suite)
    assert r"defaultTest\.options\.provider is replaced by the grader \(the judge model of this form\)" in note
    with pytest.raises(UserError, match=r"override every grader of the suite with launch.py batch --grader "
                                        r"workbench:NAME \(promptfoo's eval --grader; in the Batch tab: the judge"):
        controller.job(BatchForm(upload=upload), BASE)
    assert controller.job(BatchForm(upload=upload, judge_model="tiny"), BASE).judge_model == "tiny"


@pytest.mark.parametrize("typed, used", [("96", 96), (" 12 ", 12), ("", None), ("0", None), ("-1", None),
                                         ("abc", None), ("2.5", None)])
def test_the_forms_grader_budget_is_used_over_the_suites_and_a_wrong_one_is_not(controller, tmp_path, typed, used):
    """#49: the Batch tab's grader budget is launch.py batch --grader-max-tokens: over every budget a suite gives;
    a wrong value (the Parameters tab's rule) is not used, and its message says so and what is."""
    from webui.controllers.batch import grader_budget

    suite = tmp_path / "promptfooconfig.yaml"
    suite.write_text("prompts: ['Say {{word}}']\ndefaultTest:\n  options:\n    provider:\n      id: workbench:tiny\n"
                     "      config: {max_tokens: 30}\ntests:\n  - vars: {word: hi}\n    assert:\n"
                     "      - {type: llm-rubric, value: is short}\n")
    job = controller.job(BatchForm(upload=controller.upload(suite)[0], judge_tokens=typed), BASE)
    assert job.judge_tokens == used and job.rows[0].asserts[0].options["max_tokens"] == 30  # the suite's, kept
    message = grader_budget(typed)[1]
    if used is None and typed:
        assert message == (f"⚠ {typed} is not used: the grader budget must be a whole number of tokens, 1 or more; "
                           "using a promptfoo suite's budgets (an assert's provider config.max_tokens, else "
                           "defaultTest.options.provider config.max_tokens), else each grading step's own (256-768 "
                           "tokens).")
    else:
        assert message == ""
    assert controller.job(BatchForm(prompts="Hi", asserts="llm-rubric:is short", judge_tokens=typed),
                          BASE).judge_tokens == used
