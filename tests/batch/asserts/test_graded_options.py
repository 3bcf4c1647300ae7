"""promptfoo's options on model-graded asserts (#32): a test's ``options.factuality`` scores for the factuality
categories, and g-eval with a list of criteria (each judged, the scores averaged), with a scripted judge."""

from __future__ import annotations

import json

import pytest

from tests.batch.asserts.test_graded import judged
from webui.batch.asserts.errors import BatchInputError
from webui.batch.asserts.assertion import parse_assert
from webui.batch.promptfoo.reader import read_config
from webui.batch.promptfoo.export import to_promptfoo
from webui.batch.run.results import ResultRow

SCORES = {"subset": 0.4, "superset": 0, "agree": 1, "disagree": 0.2, "differButFactual": 0}


@pytest.mark.parametrize("choice, passed, score", [("A", True, 0.4), ("B", False, 0.0), ("C", True, 1.0),
                                                   ("D", True, 0.2), ("E", False, 0.0)])
def test_factuality_scores_each_category_as_the_tests_options_say(choice, passed, score):
    spec = {"type": "factuality", "value": "Paris is the capital", "factuality": SCORES}
    result, _, verdict = judged(spec, "It is Paris.", {"reason": "r", "choice": choice})
    assert (result.passed, result.score, verdict.score) == (passed, score, score)  # passes when above 0


def test_a_category_left_out_keeps_promptfoos_default_score():
    result, _, _ = judged({"type": "factuality", "value": "x", "factuality": {"subset": 0}}, "y",
                          {"reason": "", "choice": "C"})
    assert result.passed and result.score == 1.0
    failed, _, _ = judged({"type": "factuality", "value": "x", "factuality": {"subset": 0}}, "y",
                          {"reason": "", "choice": "A"})
    assert not failed.passed and failed.score == 0.0


def test_a_suites_factuality_options_reach_its_factuality_asserts_and_round_trip(tmp_path):
    config = ("prompts: ['{{q}}']\ndefaultTest:\n  options:\n    factuality: {superset: 0.5, disagree: 0}\n"
              "tests:\n  - vars: {q: hi}\n    assert:\n      - {type: factuality, value: Paris}\n"
              "      - {type: llm-rubric, value: kind}\n"
              "  - vars: {q: ho}\n    options: {factuality: {superset: 0}}\n    assert:\n"
              "      - {type: factuality, value: Paris}\n")
    _, rows, _ = read_config(config, tmp_path)
    first, rubric = rows[0].asserts
    assert first.options["factuality"] == {"superset": 0.5, "disagree": 0.0} and "factuality" not in rubric.options
    assert rows[1].asserts[0].options["factuality"] == {"superset": 0.0}  # the test's own replaces the default
    assert parse_assert(first.to_dict()) == first
    result, _, _ = judged(first, "Paris and more", {"reason": "", "choice": "B"})
    assert result.passed and result.score == 0.5
    exported = json.loads(to_promptfoo([result_row(rows[0], "Paris and more")], prompts=rows))
    case = exported["results"]["results"][0]["testCase"]  # promptfoo keeps the scores in the test's options
    assert case["options"] == {"factuality": {"superset": 0.5, "disagree": 0.0}}
    assert "factuality" not in case["assert"][0]


@pytest.mark.parametrize("given, message", [
    ({"subset": 1, "differ": 0}, "factuality: differ is no factuality category; the categories are subset, superset, "
                                 "agree, disagree, differButFactual"),
    ({"subset": "high"}, "factuality.subset must be a score (a number >= 0), got 'high'"),
    ({"subset": -1}, "factuality.subset must be a score (a number >= 0), got -1"),
    ("1,0", "factuality must be a mapping of category scores"),
])
def test_factuality_options_that_are_not_scores_are_refused(given, message, tmp_path):
    with pytest.raises(BatchInputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_assert({"type": "factuality", "value": "x", "factuality": given})
    with pytest.raises(BatchInputError, match="factuality scores apply to factuality asserts only"):
        parse_assert({"type": "llm-rubric", "value": "x", "factuality": {"subset": 1}})


def test_g_eval_judges_each_criterion_and_averages_the_scores():
    spec = {"type": "g-eval", "value": ["The reply is coherent", "The reply is short"]}
    result, judge, verdict = judged(spec, "Paris is the capital.",
                                    {"steps": ["Read it"]}, {"score": 9, "reason": "flows"},
                                    {"steps": ["Count words"]}, {"score": 4, "reason": "long"})
    criteria = [text.split("Evaluation Criteria:\n")[1].split("\n")[0] for text, _, _ in judge.asked]
    assert criteria == ["The reply is coherent"] * 2 + ["The reply is short"] * 2
    assert verdict.score == pytest.approx(0.65) and verdict.reason == "flows\n\nlong"
    assert not result.passed and result.score == pytest.approx(0.65)  # below promptfoo's default 0.7
    lenient, _, _ = judged({**spec, "threshold": 0.6}, "x", {"steps": ["a"]}, {"score": 9, "reason": ""},
                           {"steps": ["b"]}, {"score": 4, "reason": ""})
    assert lenient.passed


def test_a_criterion_the_judge_cannot_score_counts_zero_and_the_list_round_trips(tmp_path):
    spec = {"type": "g-eval", "value": ["coherent", "short"], "threshold": 0.4}
    _, _, verdict = judged(spec, "x", {"steps": ["a"]}, {"score": 10, "reason": "good"}, "not JSON")
    assert verdict.score == 0.5 and not verdict.unscored and "not the JSON asked for" in verdict.reason
    _, _, none = judged(spec, "x", "no", "no")
    assert none.unscored and not none.passed
    item = parse_assert(spec)
    assert item.value == ("coherent", "short") and item.to_dict()["value"] == ["coherent", "short"]
    assert parse_assert(item.to_dict()) == item and item.label == 'g-eval:["coherent", "short"]'
    _, rows, _ = read_config("prompts: ['{{q}}']\ntests:\n  - vars: {q: hi, c: brief}\n    assert:\n"
                             "      - {type: g-eval, value: ['coherent', 'is {{c}}']}\n", tmp_path)
    assert rows[0].asserts[0].value == ("coherent", "is brief")
    with pytest.raises(BatchInputError, match=r"g-eval needs a text or a list of texts \(criteria\)"):
        parse_assert({"type": "g-eval", "value": ["ok", ""]})


def result_row(row, output: str) -> ResultRow:
    return ResultRow(prompt_index=row.index, prompt_id=row.id, prompt=row.text, setting="s", params={}, sample=0,
                     seed=0, output=output, finish_reason="stop", prompt_tokens=1, completion_tokens=1)
