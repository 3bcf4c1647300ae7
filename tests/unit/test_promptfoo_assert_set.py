"""promptfoo's assert-set with its own threshold (#32): the set passes on its asserts' weighted score against the
threshold, whatever each says; the row's score stays the weighted mean promptfoo gives."""

from __future__ import annotations

import json

import pytest

from webui.batch.asserts import Observed
from webui.batch.grid import Setting, plan
from webui.batch.prompts import PromptRow
from webui.batch.promptfoo import read_suite
from webui.batch.results import asserts_pass, result_for
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
    result = result_for(cell, output=output, finish_reason="stop", prompt_tokens=1, completion_tokens=1)
    assert result.passed is passed and result.score == pytest.approx(score)
    stored = PromptRow.from_dict(json.loads(json.dumps(row.to_dict())))  # a re-run keeps its sets
    assert stored.sets == row.sets


def test_without_a_threshold_every_assert_of_a_set_must_pass(tmp_path):
    (row,) = read_suite(SUITE.replace("        threshold: 0.5\n", ""), tmp_path).rows
    assert row.sets == ()
    results = [a.check(Observed("The red car")) for a in row.asserts]
    assert not asserts_pass(results, row.sets)
