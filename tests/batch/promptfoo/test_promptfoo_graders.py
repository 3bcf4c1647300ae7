"""Who grades a promptfoo suite and how much it may write (#49): ``--grader`` (promptfoo's ``eval --grader``) over
every grader the suite names, an llm-rubric with no value whose ``rubricPrompt`` is the whole grading prompt, and the
grader's token budget; built on promptfoo's
custom-grading-prompt example (tests/data/promptfoo/examples/custom-grading-prompt, see its SOURCE.md).

Both are in promptfoo 0.115: ``eval --grader`` and an llm-rubric graded by ``defaultTest.options.rubricPrompt``
alone (its example runs there)."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
import yaml

from tests.batch.asserts.test_graded import Judge, run
from tests.conftest import ROOT
from webui.batch.asserts.assertion import parse_assert
from webui.batch.asserts.errors import BatchInputError
from webui.batch.asserts.types import AssertResult, Observed
from webui.batch.asserts.graded import GRADED, verdict_key
from webui.batch.promptfoo.options import grader_model
from webui.batch.promptfoo.reader import load_suite, read_suite
from webui.batch.run.grid import GridSpec
from webui.batch.run.judge import grade, inputs_for, judge_budget, max_score
from webui.batch.run.prompts import parse_lines
from webui.batch.run.runner import BatchJob

EXAMPLE = ROOT / "tests" / "data" / "promptfoo" / "examples" / "custom-grading-prompt"


def hosted(tmp_path, **extra):
    """The example as written for a hosted grader: defaultTest.options.provider as promptfoo's docs write it
    (plus ``extra`` on its one test)."""
    config = yaml.safe_load((EXAMPLE / "promptfooconfig.yaml").read_text(encoding="utf-8"))
    config["defaultTest"]["options"]["provider"] = "openai:gpt-4.1-mini"
    config["tests"][0].update(extra)
    (tmp_path / "prompts.txt").write_text((EXAMPLE / "prompts.txt").read_text(encoding="utf-8"))
    return yaml.safe_dump(config)


def test_a_hosted_grader_is_refused_saying_that_grader_overrides_it(tmp_path):
    with pytest.raises(BatchInputError, match=re.escape("'openai:gpt-4.1-mini' is no loaded model")) as caught:
        read_suite(hosted(tmp_path), tmp_path)
    assert "--grader workbench:NAME (promptfoo's eval --grader" in str(caught.value)


def test_the_grader_overrides_every_grader_of_the_suite(tmp_path):
    config = yaml.safe_load(hosted(tmp_path, options={"provider": "anthropic:claude"}))
    config["tests"][0]["assert"] += [{"type": "llm-rubric", "value": "is polite", "provider": "openai:gpt-4o"},
                                     {"type": "contains", "value": "economy"}]
    suite = read_suite(yaml.safe_dump(config), tmp_path, grader="SmolLM2-135M-Instruct")
    assert suite.options.judge_model == "SmolLM2-135M-Instruct"
    assert [a.kind for a in suite.rows[0].asserts] == ["llm-rubric", "llm-rubric", "contains"]
    replaced = [n for n in suite.notes if "is replaced by the grader" in n]
    assert [n.split(" ")[0] for n in replaced] == ["defaultTest.options.provider", "tests[0].options.provider",
                                                   "tests[0].assert[1].provider"]


@pytest.mark.parametrize("given, name", [("workbench:SmolLM2-135M-Instruct", "SmolLM2-135M-Instruct"),
                                         ("SmolLM2-135M-Instruct@llamacpp", "SmolLM2-135M-Instruct@llamacpp")])
def test_a_grader_names_a_loaded_model(given, name):
    assert grader_model(given) == name


def test_a_hosted_grader_id_is_refused_saying_what_to_write():
    with pytest.raises(BatchInputError, match=re.escape("grader 'openai:gpt-4.1-mini': the grader here is a model "
                                                        "loaded by the workbench; write workbench:NAME")):
        grader_model("openai:gpt-4.1-mini")


def test_the_cli_checks_its_grader_before_loading_a_model(tmp_path, capsys):
    from webui.batch.run.cli import main

    config = tmp_path / "promptfooconfig.yaml"
    config.write_text(hosted(tmp_path))
    assert main([str(config), "--grader", "openai:gpt-4.1-mini"]) == 2
    assert "grader 'openai:gpt-4.1-mini': the grader here is a model" in capsys.readouterr().err
    assert main([str(config), "--grader", "workbench:a", "--judge-model", "b"]) == 2
    assert "--grader names the judge; leave out --judge-url and --judge-model" in capsys.readouterr().err


def test_an_llm_rubric_without_a_value_is_graded_by_the_suites_rubric_prompt():
    suite = load_suite(EXAMPLE / "promptfooconfig.yaml")
    row = suite.rows[0]
    (item,) = row.asserts
    assert item.kind == "llm-rubric" and item.value is None
    output = "The Federal Reserve sets rates. What do you want to know?"
    judge = Judge({"reason": "mentions the Fed and asks", "pass": True, "score": 0.67})
    verdict = run(grade(item, inputs_for(item, output, row.text, row.variables), judge))
    (text, _, _), = judge.asked
    assert "Did the output mention the Federal Reserve? +1 point" in text and f"Output: {output}" in text
    result = item.check(Observed(output, prompt=row.text, judged={verdict_key(item): verdict},
                                 variables=row.variables))
    assert result.passed and result.score == 0.67


def test_a_suites_grader_config_max_tokens_is_the_judges_budget(tmp_path):
    """promptfoo caps its grader by the grader provider's config (defaultTest.options.provider: {id, config:
    {max_tokens}}); here the loaded judge's tokens per grading step."""
    config = yaml.safe_load((EXAMPLE / "promptfooconfig.yaml").read_text(encoding="utf-8"))
    (tmp_path / "prompts.txt").write_text("Talk about {{topic}}\n")
    config["defaultTest"]["options"]["provider"] = {"id": "workbench:judge", "config": {"max_tokens": 96}}
    options = read_suite(yaml.safe_dump(config), tmp_path).options
    assert (options.judge_model, options.judge_tokens) == ("judge", 96)
    config["defaultTest"]["options"]["provider"]["config"] = {"max_tokens": 0, "temperature": 1}
    with pytest.raises(BatchInputError, match=re.escape("defaultTest.options.provider.config: a grader's config "
                                                        "here takes max_tokens only")):
        read_suite(yaml.safe_dump(config), tmp_path)


def test_the_judges_budget_caps_each_step_and_counts_each_criterion():
    asserts = [parse_assert(a) for a in ("llm-rubric:is polite", "g-eval:is clear", "contains:x")]
    steps = [s.max_tokens for kind in ("llm-rubric", "g-eval") for s in GRADED[kind].steps]
    assert judge_budget(asserts) == sum(steps) and judge_budget(asserts, 96) == sum(min(s, 96) for s in steps)
    criteria = parse_assert({"type": "g-eval", "value": ["is clear", "is short"]})
    assert judge_budget([criteria], 50) == 2 * 50 * len(GRADED["g-eval"].steps)


def test_the_time_left_bound_counts_what_the_judges_may_still_write(tmp_path):
    """Before, the bound counted the cells' tokens only: once they were made it said seconds while the judges
    worked on for minutes (#49)."""
    import time

    from webui.batch.run.grid import expand, plan
    from webui.batch.run.handle import RunHandle
    from webui.presets import PresetStore

    settings = expand(GridSpec([], {"max_new_tokens": [10]}), PresetStore(tmp_path / "presets"))
    rows = [replace(row, asserts=[parse_assert("llm-rubric:is polite")]) for row in parse_lines("a\nb")]
    handle = RunHandle(1, plan(rows, settings), started=time.monotonic() - 10, judge_tokens=30)
    handle.streaming.update({0: 10, 1: 10})  # every cell's tokens made in 10 s; the judges' 2 x 30 still to come
    assert handle.eta_text() == "at most 30s left"


MAX_SCORE = ROOT / "tests" / "data" / "promptfoo" / "examples" / "max-score-selection" / "promptfooconfig.yaml"


def test_max_score_is_read_from_its_example_and_written_back():
    """max-score is newer than promptfoo 0.115 (not among its assert types): checked against promptfoo's
    documentation (docs/configuration/expected-outputs/model-graded/max-score) and its example."""
    suite = load_suite(MAX_SCORE)
    first, last = suite.rows[0].asserts[-1], suite.rows[-1].asserts[-1]
    assert first.options["max_score"] == {"method": "average", "weights": {"python": 3.0, "llm-rubric": 1.5}}
    assert last.options["max_score"] == {"method": "average", "weights": {}}
    assert parse_assert(first.to_dict()) == first
    for bad, said in (({"method": "median"}, "max-score method must be average or sum"),
                      ({"weights": {"python": "high"}}, "max-score weights must map assert types to numbers")):
        with pytest.raises(BatchInputError, match=re.escape(said)):
            parse_assert({"type": "max-score", "value": bad})


def checked(*pairs):
    """One output's (assert, result) pairs from (assert spec, score)."""
    return [(parse_assert(spec), AssertResult(score >= 0.5, score=score)) for spec, score in pairs]


def test_max_score_picks_the_highest_weighted_average_as_promptfoos_docs_compute_it():
    item = parse_assert({"type": "max-score", "value": {"weights": {"python": 3, "llm-rubric": 1}}})
    a = checked(("python:len(output) > 0", 1.0), ("llm-rubric:is clear", 0.5), ("contains:def", 1.0),
                (item.to_dict(), 0))
    b = checked(("python:len(output) > 0", 0.0), ("llm-rubric:is clear", 1.0), ("contains:def", 1.0))
    verdicts = max_score(item, [b, a])
    assert [v.passed for v in verdicts] == [False, True] and [v.score for v in verdicts] == [0.0, 1.0]
    assert "score 0.900" in verdicts[1].reason  # the docs' example: (1x3 + 0.5x1 + 1x1) / 5
    tied = max_score(parse_assert("max-score"), [b, b])
    assert [v.passed for v in tied] == [True, False]  # a tie: the first wins
    summed = parse_assert({"type": "max-score", "value": {"method": "sum", "threshold": 3}})
    assert not any(v.passed for v in max_score(summed, [a, b]))  # 2.5 and 2, under the threshold: none
    assert "below the threshold 3" in max_score(summed, [a, b])[0].reason
    alone = max_score(item, [checked((item.to_dict(), 0)), b])
    assert not alone[0].passed and "needs at least one other assert" in alone[0].reason


def test_max_score_compares_the_outputs_of_a_tests_prompts(tmp_path):
    """A promptfoo test runs once per prompt: max-score (like select-best) compares those outputs, as promptfoo
    does; one prompt and one provider leave nothing to compare."""
    from webui.batch.run.runner import BatchRunner

    suite = load_suite(MAX_SCORE)
    settings = suite.settings
    BatchRunner._check_graded(BatchJob("x", suite.rows, GridSpec([], {}), settings=settings), settings)
    one = [row for row in suite.rows if row.origin["promptIdx"] == 0]
    with pytest.raises(BatchInputError, match="max-score compares the outputs of several prompts or settings"):
        BatchRunner._check_graded(BatchJob("x", one, GridSpec([], {}), settings=settings), settings)


def test_a_judge_stops_as_soon_as_its_json_verdict_is_complete(default_model_dir):
    """Its verdict's schema is compact (no free whitespace), so once the JSON closes the engine's mask is done and
    allows only the end of the text: the judge cannot spend its budget after a complete verdict (#49)."""
    import llguidance.hf
    from transformers import AutoTokenizer

    from webui.batch.asserts.graded import VERDICT_SCHEMA
    from webui.engine.structured import StructuredMask, grammar_of

    tokenizer = AutoTokenizer.from_pretrained(default_model_dir)
    mask = StructuredMask(grammar_of("json", VERDICT_SCHEMA), llguidance.hf.from_tokenizer(tokenizer))
    for token in tokenizer.encode('{"reason":"ok","pass":true,"score":1}'):
        assert not mask.done
        mask.observe(token)
    assert mask.done and mask.allowed().nonzero().flatten().tolist() == [tokenizer.eos_token_id]
