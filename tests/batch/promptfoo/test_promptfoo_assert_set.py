"""promptfoo's assert-set with its own threshold (#32): the set passes on its asserts' weighted score against the
threshold, whatever each says; the row's score stays the weighted mean promptfoo gives."""

from __future__ import annotations

import json

import pytest

from webui.batch.asserts.types import Observed
from webui.batch.run.grid import Setting, plan
from webui.batch.run.prompts import PromptRow
from webui.batch.promptfoo.reader import read_suite
from webui.batch.run.results import Generated, asserts_pass, result_for
from webui.engine import SamplingParams

SUITE = """prompts: ['{{q}}']
tests:
  - vars: {q: x}
    assert:
      - type: assert-set
        threshold: 0.5
        weight: 2
        assert:
          - {type: contains, value: red, weight: 3}
          - {type: contains, value: blue}
      - {type: starts-with, value: The}
"""


@pytest.mark.parametrize("output, passed, score", [
    ("The red car", True, (2 * 3 / 4 + 1) / 3),  # the set's score 0.75 >= 0.5: passes though 'blue' fails
    ("The blue car", False, (2 * 1 / 4 + 1) / 3),  # 0.25 < 0.5
    ("A red car", False, (2 * 3 / 4) / 3),  # the set passes, the assert outside it does not
    ("The red blue", True, 1.0),
])
def test_a_set_with_a_threshold_passes_on_its_weighted_score(output, passed, score, tmp_path):
    (row,) = read_suite(SUITE, tmp_path).rows
    assert row.sets == (((0, 1), 0.5),)
    (cell,) = plan([row], [Setting("s", SamplingParams())], 1, 0)
    result = result_for(cell, Generated(output, "stop", 1, 1))
    assert result.passed is passed and result.score == pytest.approx(score)
    stored = PromptRow.from_dict(json.loads(json.dumps(row.to_dict())))  # a re-run keeps its sets
    assert stored.sets == row.sets


def test_without_a_threshold_every_assert_of_a_set_must_pass(tmp_path):
    (row,) = read_suite(SUITE.replace("        threshold: 0.5\n", ""), tmp_path).rows
    assert row.sets == ()
    results = [a.check(Observed("The red car")) for a in row.asserts]
    assert not asserts_pass(results, row.sets)


def test_a_threshold_of_0_is_none_as_promptfoo_reads_it(tmp_path):
    (row,) = read_suite(SUITE.replace("threshold: 0.5", "threshold: 0"), tmp_path).rows
    assert row.sets == ()  # promptfoo tests the threshold for truth: every assert of the set must pass
    (test,) = read_suite(SUITE + "    threshold: 0\n", tmp_path).rows
    assert test.threshold is None


def test_the_export_nests_a_sets_results_and_writes_the_set_as_given(tmp_path):
    from webui.batch.promptfoo.export import to_promptfoo

    (row,) = read_suite(SUITE, tmp_path).rows
    (cell,) = plan([row], [Setting("s", SamplingParams())], 1, 0)
    result = result_for(cell, Generated("The red car", "stop", 1, 1))
    (shaped,) = json.loads(to_promptfoo([result], "s", [row]))["results"]["results"]
    the_set, red, blue, starts = shaped["gradingResult"]["componentResults"]
    assert the_set["assertion"] is None and the_set["pass"] and the_set["score"] == pytest.approx(0.75)
    assert the_set["reason"] == "Aggregate score 0.75 ≥ 0.5 threshold" and the_set["componentResults"] == [red, blue]
    assert red["assertion"] == {"type": "contains", "value": "red", "weight": 3} and not blue["pass"]
    assert starts["assertion"] == {"type": "starts-with", "value": "The"}
    assert shaped["testCase"]["assert"] == [
        {"type": "assert-set", "assert": [{"type": "contains", "value": "red", "weight": 3},
                                          {"type": "contains", "value": "blue"}], "threshold": 0.5, "weight": 2},
        {"type": "starts-with", "value": "The"}]
