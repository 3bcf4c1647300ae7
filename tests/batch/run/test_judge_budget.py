"""The grader's token budget (#49, judges that cost too much): per suite (defaultTest.options.provider config
max_tokens), per assert (its own provider's config max_tokens) and per run (launch.py batch --grader-max-tokens,
the Batch tab's grader budget), as promptfoo's grader options give it; the run's over the assert's over the
suite's, each capping a step's own budget. Built on promptfoo's custom-grading-prompt example
(tests/data/promptfoo/examples/custom-grading-prompt, see its SOURCE.md); a grader's provider config is promptfoo
0.115's (its matchers load an assert's ``provider: {id, config}`` over ``defaultTest.options.provider``)."""

from __future__ import annotations

import yaml

from tests.batch.asserts.test_graded import Judge, run
from tests.conftest import ROOT
from webui.batch.asserts.assertion import parse_assert
from webui.batch.asserts.errors import BatchInputError
from webui.batch.asserts.graded import GRADED
from webui.batch.promptfoo.reader import read_suite
from webui.batch.run.judge import grade, inputs_for, judge_budget, select_best, step_tokens, with_suite_tokens

EXAMPLE = ROOT / "tests" / "data" / "promptfoo" / "examples" / "custom-grading-prompt"
VERDICT = {"reason": "ok", "pass": True, "score": 1}


def suite(tmp_path, default_provider, *asserts, grader: str = "", **test):
    """The example with its judge given by ``default_provider``, ``asserts`` added to its one test and ``test``
    (more keys) set on it."""
    config = yaml.safe_load((EXAMPLE / "promptfooconfig.yaml").read_text(encoding="utf-8"))
    (tmp_path / "prompts.txt").write_text((EXAMPLE / "prompts.txt").read_text(encoding="utf-8"))
    config["defaultTest"]["options"]["provider"] = default_provider
    config["tests"][0]["assert"] += list(asserts)
    config["tests"][0].update(test)
    return read_suite(yaml.safe_dump(config), tmp_path, grader)


def test_an_asserts_own_budget_wins_over_the_suites_and_the_runs_over_both(tmp_path):
    found = suite(tmp_path, {"id": "workbench:judge", "config": {"max_tokens": 96}},
                  {"type": "llm-rubric", "value": "is polite", "provider": {"config": {"max_tokens": 40}}})
    rows = with_suite_tokens(found.rows, found.options.judge_tokens)
    whole, own = rows[0].asserts  # the example's llm-rubric (the suite's budget), the one with its own
    assert (whole.options["max_tokens"], own.options["max_tokens"]) == (96, 40)
    step = GRADED["llm-rubric"].steps[0]
    assert [step_tokens(step, a) for a in (whole, own)] == [96, 40]
    assert [step_tokens(step, a, 50) for a in (whole, own)] == [50, 50]  # the run's over both
    assert step_tokens(step, own, 10_000) == step.max_tokens  # a budget caps a step's own, never raises it
    assert judge_budget([whole, own]) == 136 and judge_budget([whole, own], 50) == 100


def test_a_grader_that_replaces_the_suites_keeps_their_budgets(tmp_path):
    """promptfoo's eval --grader (here the model that grades): the providers the suite names are replaced, what
    they allow the grader to write is kept, and said so."""
    found = suite(tmp_path, {"id": "openai:gpt-4.1-mini", "config": {"max_tokens": 96}},
                  {"type": "llm-rubric", "value": "is polite",
                   "provider": {"id": "openai:gpt-4o", "config": {"max_tokens": 40, "temperature": 0}}},
                  grader="SmolLM2-135M-Instruct",
                  options={"provider": {"id": "openai:o1", "config": {"max_tokens": 9}}})
    assert (found.options.judge_model, found.options.judge_tokens) == ("SmolLM2-135M-Instruct", 96)
    example, own = with_suite_tokens(found.rows, found.options.judge_tokens)[0].asserts
    assert (example.options["max_tokens"], own.options["max_tokens"]) == (9, 40)  # the test's, the assert's own
    assert "tests[0].assert[1].provider is replaced by the grader SmolLM2-135M-Instruct (its config.max_tokens is " \
           "kept: the assert's grader token budget)" in found.notes
    assert "tests[0].options.provider is replaced by the grader SmolLM2-135M-Instruct (its config.max_tokens is " \
           "kept: the grader's token budget)" in found.notes


def test_a_tests_own_budget_is_its_graded_asserts_over_the_suites(tmp_path):
    """#49's last budget: a test's ``options.provider: {config: {max_tokens}}`` (promptfoo's test-level grader
    config, as its getFinalTest gives it to each assert without its own provider) is the budget of that test's
    graded asserts without their own, over the suite's and under the run's; its other asserts are left alone; a
    wrong budget says where."""
    found = suite(tmp_path, {"id": "workbench:judge", "config": {"max_tokens": 96}},
                  {"type": "llm-rubric", "value": "is polite", "provider": {"config": {"max_tokens": 40}}},
                  {"type": "contains", "value": "a"},
                  options={"provider": {"config": {"max_tokens": 24}}})
    example, own, plain = with_suite_tokens(found.rows, found.options.judge_tokens)[0].asserts
    assert (example.options["max_tokens"], own.options["max_tokens"]) == (24, 40)
    assert (plain.kind, plain.options) == ("contains", {})
    step = GRADED["llm-rubric"].steps[0]
    assert step_tokens(step, example) == 24 and step_tokens(step, example, 10) == 10
    try:
        suite(tmp_path, {"id": "workbench:judge"}, options={"provider": {"config": {"max_tokens": 0}}})
    except BatchInputError as exc:
        assert "tests[0].options.provider.config" in str(exc) and "whole number >= 1" in str(exc)
    else:
        raise AssertionError("a budget of 0 was taken")


def test_the_judge_is_asked_with_the_budget_of_each_step():
    item = parse_assert({"type": "g-eval", "value": "is clear", "provider": {"config": {"max_tokens": 64}}})
    judge = Judge({"steps": ["read it"]}, {"score": 8, "reason": "clear"})
    run(grade(item, inputs_for(item, "Paris.", "Name a city.", {}), judge))
    assert [asked[2] for asked in judge.asked] == [64, 64]
    judge = Judge({"steps": ["read it"]}, {"score": 8, "reason": "clear"})
    run(grade(item, inputs_for(item, "Paris.", "Name a city.", {}), judge, tokens=20))  # the run's budget
    assert [asked[2] for asked in judge.asked] == [20, 20]
    best = parse_assert({"type": "select-best", "value": "shortest", "provider": {"config": {"max_tokens": 30}}})
    judge = Judge({"reason": "short", "best": 1})
    run(select_best(best, ["a", "bb"], inputs_for(best, "", "Say a.", {}), judge))
    assert judge.asked[0][2] == 30


def test_an_asserts_budget_is_stored_as_promptfoo_writes_it():
    item = parse_assert({"type": "llm-rubric", "value": "is polite", "provider": {"config": {"max_tokens": 40}}})
    assert item.to_dict() == {"type": "llm-rubric", "value": "is polite", "provider": {"config": {"max_tokens": 40}}}
    assert parse_assert(item.to_dict()) == item



def test_the_time_left_bound_counts_the_judges_tokens_as_work_done(tmp_path):
    """#49: with every cell's tokens made, the bound counted the judges' budget but not what they wrote, so while
    they worked it only grew (here from "at most 30s" to "at most 60s" after 20 of their 60 tokens); now their
    tokens are work done at the run's speed and come off what they may still write. A fake clock: the run
    started ``elapsed`` seconds ago."""
    import time
    from dataclasses import replace

    from webui.batch.run.grid import GridSpec, expand, plan
    from webui.batch.run.prompts import parse_lines
    from webui.batch.run.handle import RunHandle
    from webui.presets import PresetStore

    settings = expand(GridSpec([], {"max_new_tokens": [10]}), PresetStore(tmp_path / "presets"))
    rows = [replace(row, asserts=[parse_assert("llm-rubric:is polite")]) for row in parse_lines("a\nb")]

    def bound(elapsed: float, judged: dict[int, int]) -> str:
        handle = RunHandle(1, plan(rows, settings), started=time.monotonic() - elapsed, judge_tokens=30)
        handle.streaming.update({0: 10, 1: 10})  # every cell's tokens made; the judges' 2 x 30 at most
        handle.judging.update(judged)
        return handle.eta_text()

    assert bound(10, {}) == "at most 30s left"  # 20 tokens in 10 s, 60 to come
    assert bound(20, {0: 20}) == "at most 20s left"  # 40 tokens in 20 s, 40 to come
    assert bound(30, {0: 30, 1: 20}) == "at most 4s left"  # 70 in 30 s, 10 to come


def test_a_budget_is_per_grader_call_so_answer_relevance_gets_it_for_each_of_its_questions():
    """promptfoo asks answer-relevance's three questions in three grader calls, each with the grader's max_tokens;
    so does its step here (asked three times), each call with the budget, the output's budget three of them."""
    item = parse_assert({"type": "answer-relevance", "provider": {"config": {"max_tokens": 96}}})
    (step,) = GRADED["answer-relevance"].steps
    assert step.calls == 3 and step_tokens(step, item) == min(step.max_tokens, 96)
    assert step_tokens(step, item, 20) == 20 and judge_budget([item], 20) == 60


def test_no_time_left_is_claimed_while_select_best_judges_rows_already_kept(tmp_path):
    """Every row kept, the run still going (select-best's judge compares a test's outputs): the estimate said
    "about 0s left" for as long as that took; now it says nothing."""
    import time

    from webui.batch.run.grid import GridSpec, expand, plan
    from webui.batch.run.prompts import parse_lines
    from webui.batch.run.results import ResultRow
    from webui.batch.run.handle import RunHandle
    from webui.presets import PresetStore

    settings = expand(GridSpec([], {"temperature": [0, 0.7]}), PresetStore(tmp_path / "presets"))
    handle = RunHandle(1, plan(parse_lines("a"), settings), started=time.monotonic() - 10)
    handle.results[0] = ResultRow(0, "1", "a", settings[0].label, {}, 0, 0, "out", "stop", 1, 4)
    assert handle.eta_text() == "about 10s left"  # one row of two made in 10 s
    handle.results[1] = ResultRow(0, "1", "a", settings[1].label, {}, 0, 0, "out", "stop", 1, 4)
    assert handle.eta_text() == ""
