"""A promptfoo suite's run-wide keys (#32): evaluateOptions, outputPath, env, sharing, derivedMetrics (computed in
the export), $ref assertion templates and defaultTest's grading provider."""

from __future__ import annotations

import json
import re

import pytest

from webui.batch.run.grid import GridSpec
from webui.batch.asserts.errors import BatchInputError
from webui.batch.asserts.types import AssertResult
from webui.batch.promptfoo.reader import read_suite
from webui.batch.promptfoo.export import to_promptfoo
from webui.batch.promptfoo.options import evaluate_metric, metric_names
from webui.batch.run.results import ResultRow
from webui.batch.run.runner import BatchJob
from webui.store.batch_runs import StoredRun

SUITE = """prompts: ['{{q}}']
providers: [a]
tests:
  - vars: {q: one}
    assert:
      - {type: contains, value: x, metric: Tone}
      - {$ref: '#/assertionTemplates/pirate'}
  - vars: {q: two}
    assert: [{type: contains, value: y, metric: Tone}]
assertionTemplates:
  pirate: {type: icontains, value: arrr, metric: Pirate}
derivedMetrics:
  - {name: Double, value: 'Tone * 2'}
  - {name: Mix, value: '(Double + Pirate) / 3 - -1'}
evaluateOptions: {repeat: 3, cache: false, maxConcurrency: 4, delay: 100}
outputPath: out.json
env: {OPENAI_API_KEY: sk-1}
sharing: true
defaultTest:
  options:
    provider: workbench:judge-model
"""


def test_run_wide_keys_are_applied_or_named(tmp_path):
    suite = read_suite(SUITE, tmp_path)
    assert [(a.kind, a.value, a.metric) for a in suite.rows[0].asserts] == [
        ("contains", "x", "Tone"), ("icontains", "arrr", "Pirate")]
    o = suite.options
    assert (o.samples, o.use_cache, o.output_path, o.judge_model) == (3, False, "out.json", "judge-model")
    assert o.derived_metrics == {"Double": "Tone * 2", "Mix": "(Double + Pirate) / 3 - -1"}
    said = "\n".join(suite.notes)
    for name in ("evaluateOptions.cache: false is applied", "evaluateOptions.maxConcurrency is not applied",
                 "evaluateOptions.delay is not applied", "writes the results to out.json", "env is not applied",
                 "sharing is not applied"):
        assert name in said
    job = BatchJob("x", suite.rows, GridSpec([], {}), derived_metrics=o.derived_metrics)
    stored = StoredRun.from_json(json.loads(json.dumps(job.to_stored([]).to_json())))
    assert BatchJob.from_stored("x", stored).derived_metrics == o.derived_metrics


def test_derived_metrics_are_computed_over_each_prompts_summed_scores_in_the_export(tmp_path):
    suite = read_suite(SUITE, tmp_path)
    rows = [ResultRow(0, "one", "one", "a", {}, 0, 0, "x arrr", "stop", 1, 2, passed=True,
                      asserts=[AssertResult(True, label="contains:x"), AssertResult(True, label="icontains:arrr")]),
            ResultRow(1, "two", "two", "a", {}, 0, 0, "no", "stop", 1, 1, passed=False,
                      asserts=[AssertResult(False, label="contains:y")])]
    shaped = json.loads(to_promptfoo(rows, "s", suite.rows, {"a": "a"}, suite.options.derived_metrics))
    (column,) = shaped["results"]["prompts"]
    scores = column["metrics"]["namedScores"]
    assert scores == {"Tone": 1.0, "Pirate": 1.0, "Double": 2.0, "Mix": 2.0}  # (2 + 1) / 3 + 1
    assert (column["metrics"]["testPassCount"], column["metrics"]["testFailCount"]) == (1, 1)
    assert (column["metrics"]["assertPassCount"], column["metrics"]["assertFailCount"]) == (2, 1)
    assert column["metrics"]["tokenUsage"] == {"prompt": 2, "completion": 3, "total": 5}
    assert (column["label"], column["provider"]) == ("{{q}}", "a")


def test_the_evaluator_does_arithmetic_only():
    assert evaluate_metric("a / b", {"a": 1, "b": 4}) == 0.25 and evaluate_metric("1 / a", {"a": 0}) is None
    assert evaluate_metric("missing + 1", {}) == 1.0 and metric_names("(a+b)*a - 2.5") == ["a", "b"]
    for expression, said in (("a ^ 2", "'^' is not supported"), ("max(a, b)", "max(...) is not supported"),
                             ("a > b", "'a > b' is not supported"), ("'a'", "'a' is not supported"),
                             ("__import__('os')", "__import__(...) is not supported"), ("a +", "is not an expr"),
                             ("a.b", "'a.b' is not supported")):
        with pytest.raises(BatchInputError, match=re.escape(said)):
            metric_names(expression)


@pytest.mark.parametrize("change, said", [
    (("Tone * 2'", "Tones * 2'"), "derivedMetrics (Double): Tones: no assert's metric has that name"),
    (("'Tone * 2'", "'Tone ** 2'"), "derivedMetrics[0] (Double): '**' is not supported here"),
    (("{repeat: 3,", "{repeat: 0,"), "evaluateOptions.repeat: must be a whole number >= 1, got 0"),
    (("delay: 100}", "delay: 100, fast: 1}"), "evaluateOptions.fast: unknown key"),
    (("#/assertionTemplates/pirate", "#/assertionTemplates/parrot"), "$ref #/assertionTemplates/parrot: the "
                                                                     "config has nothing at 'parrot'"),
    (("workbench:judge-model", "openai:gpt-4o"), "defaultTest.options.provider: 'openai:gpt-4o' is no loaded model"),
    (("    assert: [{type: contains, value: y, metric: Tone}]", "    options: {provider: workbench:x}"),
     "tests[1].options.provider: not supported here (the judge is the run's: set it in defaultTest.options)"),
    (("outputPath: out.json", "outputPath: [a]"), "outputPath: must be a file path"),
])
def test_what_is_wrong_in_run_wide_keys_is_named(change, said, tmp_path):
    with pytest.raises(BatchInputError, match=re.escape(said)):
        read_suite(SUITE.replace(*change), tmp_path)


def test_the_cli_prints_the_notes_and_checks_the_output_path_before_loading_a_model(tmp_path, capsys):
    from webui.batch.run.cli import main

    config = tmp_path / "promptfooconfig.yaml"
    config.write_text(SUITE.replace("out.json", "report.html"))
    assert main([str(config)]) == 2
    said = capsys.readouterr().err
    assert "note: sharing is not applied" in said
    assert "error: outputPath must end in .jsonl, .csv or .json (promptfoo's shape), got '" in said
