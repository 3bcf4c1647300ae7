"""The model-graded kinds (webui.batch.asserts.graded, webui.batch.run.judge) without a model: each kind's grading prompt as
rendered, and fixed judge answers turned into verdicts and assert results."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
from typing import Any, Mapping

import pytest

from webui.batch.asserts.errors import BatchInputError
from webui.batch.asserts.assertion import parse_assert
from webui.batch.asserts.types import Observed, Verdict
from webui.batch.asserts.graded import GRADED, missing_vars, verdict_key
from webui.batch.run.grid import Cell, Setting
from webui.batch.run.judge import (
    JudgeError, grade, graded, inputs_for, judge_request, read_answer, rubrics, select_best, step_text,
)
from webui.batch.run.prompts import PromptRow
from webui.batch.run.results import Generated, rejudged, result_for
from webui.engine import SamplingParams

VARS = {"query": "What is the capital of France?", "context": "Paris is the capital of France. It has 2 million "
        "people. Lyon is in the south."}


def run(coroutine):
    """The coroutine's result, run on a loop of its own in another thread: a browser test earlier in the session
    (playwright's sync API) keeps a loop running in this one, where asyncio.run refuses to start."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


class Judge:
    """A scripted judge: answers its questions in order and keeps them."""

    def __init__(self, *answers: Any) -> None:
        self.answers = [a if isinstance(a, str) else json.dumps(a) for a in answers]
        self.asked: list[tuple[str, Mapping[str, Any] | None, int]] = []
        self.stops: list[tuple[str, ...]] = []

    async def __call__(self, text: str, schema: Mapping[str, Any] | None, max_tokens: int,
                       stop: Any = ()) -> str:
        self.asked.append((text, schema, max_tokens))
        self.stops.append(tuple(stop))
        if not self.answers:
            raise JudgeError("the scripted judge has no answer left")
        return self.answers.pop(0)


def judged(spec: Any, output: str, *answers: Any, prompt: str = "Name the capital of France.",
           variables: Mapping[str, str] = VARS) -> tuple[Any, Judge, Verdict]:
    """(the assert's result on ``output``, the judge, its verdict) with the judge answering ``answers``."""
    item, judge = parse_assert(spec), Judge(*answers)
    verdict = run(grade(item, inputs_for(item, output, prompt, variables), judge))
    seen = Observed(output, prompt=prompt, judged={verdict_key(item): verdict}, variables=variables)
    return item.check(seen), judge, verdict


def test_closedqa_asks_promptfoos_question_and_reads_y_or_n():
    result, judge, _ = judged("model-graded-closedqa:names a city", "Paris.",
                              {"reason": "Paris is a city", "answer": "Y"})
    (text, schema, _), = judge.asked
    assert "[Task]: Name the capital of France.\n***\n[Submission]: Paris.\n***\n[Criterion]: names a city" in text
    assert text.endswith(GRADED["model-graded-closedqa"].steps[0].answer)
    assert schema["properties"]["answer"] == {"enum": ["Y", "N"]}
    assert result.passed and result.score == 1.0
    assert result.detail == "judge: The submission meets the criterion: Paris is a city"
    failed, _, _ = judged("model-graded-closedqa:names a river", "Paris.", {"reason": "no river", "answer": "N"})
    assert not failed.passed and failed.score == 0.0 and "does not meet the criterion: no river" in failed.detail
    negated, _, _ = judged("not-model-graded-closedqa:names a river", "Paris.", {"reason": "", "answer": "N"})
    assert negated.passed


@pytest.mark.parametrize("choice, passed, score", [("A", True, 1.0), ("B", True, 1.0), ("C", True, 1.0),
                                                   ("D", False, 0.0), ("E", True, 1.0)])
def test_factuality_reads_promptfoos_categories_and_default_pass_set(choice, passed, score):
    result, judge, verdict = judged("factuality:Paris is the capital of France", "It is Paris.",
                                    {"reason": "same city", "choice": choice})
    text = judge.asked[0][0]
    assert "[Question]: Name the capital of France." in text and "[Expert]: Paris is the capital of France" in text
    assert "[Submission]: It is Paris." in text and "(D) There is a disagreement" in text
    assert (result.passed, result.score) == (passed, score) and verdict.reason.startswith(f"({choice}) ")


def test_g_eval_asks_for_steps_then_scores_out_of_ten_against_threshold_07():
    result, judge, _ = judged("g-eval:The reply is coherent", "Paris is the capital.",
                              {"steps": ["Read the reply", "Check it flows"]}, {"score": 7, "reason": "clear"})
    (first, _, _), (second, schema, _) = judge.asked
    assert "Evaluation Criteria:\nThe reply is coherent" in first and "3-4" in first
    assert "Evaluation Steps:\n- Read the reply\n- Check it flows" in second and "Reply:\nParis is the capital." in second
    assert schema["properties"]["score"]["maximum"] == 10
    assert result.passed and result.score == 0.7 and result.detail == "judge: clear (score 0.70, needs 0.7)"
    low, _, _ = judged("g-eval:The reply is coherent", "x", {"steps": ["a"]}, {"score": 6, "reason": "meh"})
    assert not low.passed and low.score == pytest.approx(0.6)
    lenient, _, _ = judged({"type": "g-eval", "value": "coherent", "threshold": 0.5}, "x", {"steps": ["a"]},
                           {"score": 6, "reason": "meh"})
    assert lenient.passed


def test_context_recall_counts_the_references_attributed_sentences():
    result, judge, _ = judged("context-recall:Paris is the capital. It has 3 million people.", "Paris", {
        "sentences": [{"sentence": "Paris is the capital.", "attributed": True},
                      {"sentence": "It has 3 million people.", "attributed": False}]})
    text = judge.asked[0][0]
    assert f"context: {VARS['context']}" in text and "answer: Paris is the capital. It has 3 million" in text
    assert result.passed and result.score == 0.5  # promptfoo's default threshold for context kinds: 0
    strict, _, _ = judged({"type": "context-recall", "value": "Paris.", "threshold": 0.8}, "Paris", {
        "sentences": [{"sentence": "Paris.", "attributed": False}]})
    assert not strict.passed and strict.score == 0.0


def test_context_relevance_scores_the_extracted_sentences_as_promptfoo_does():
    """promptfoo 0.115 (matchesContextRelevance): its prompt word for word, answered in free text (a JSON list
    with ["Insufficient Information"] as its only example made a small judge copy it, #49), split into lines;
    the score is the share of lines that are not its "Insufficient Information"."""
    result, judge, _ = judged({"type": "context-relevance", "threshold": 0.3}, "Paris",
                              "Paris is the capital of France.")
    (text, schema, _), = judge.asked
    assert text.endswith(f"query: What is the capital of France?\ncontext: {VARS['context']}\ncandidate sentences:\n")
    assert 'return the phrase "Insufficient Information".  While' in text and schema is None  # free text
    assert judge.stops == [()] and result.passed and result.score == 1.0
    mixed, _, _ = judged("context-relevance", "Paris", "Paris is the capital.\n\n2. Insufficient Information.\n"
                                                       "It has 2 million people. Insufficient Information")
    assert mixed.score == pytest.approx(1 / 3)  # split into lines as promptfoo splits its answer, blank ones dropped
    none, _, verdict = judged({"type": "context-relevance", "threshold": 0.3}, "Paris", '"Insufficient Information"')
    assert not none.passed and none.score == 0.0 and "found nothing" in verdict.reason
    empty, _, verdict = judged("context-relevance", "Paris", " \n\n")  # promptfoo: "No output", a fail
    assert not empty.passed and verdict.unscored and "the judge answered nothing" in verdict.reason


def test_context_faithfulness_makes_statements_then_checks_each_against_the_context():
    result, judge, verdict = judged({"type": "context-faithfulness", "threshold": 0.6}, "Paris has 9 million.",
                                    {"statements": ["Paris is the capital.", "Paris has 9 million people."]},
                                    {"verdicts": [{"reason": "said", "supported": True},
                                                  {"reason": "2 million", "supported": False}]})
    (first, _, _), (second, _, _) = judge.asked
    assert "question: What is the capital of France?\nanswer: Paris has 9 million." in first
    assert "statements:\n1. Paris is the capital.\n2. Paris has 9 million people." in second
    assert f"context: {VARS['context']}" in second
    assert not result.passed and result.score == 0.5 and "1 of 2 statements" in verdict.reason


def test_a_custom_rubric_prompt_replaces_the_grading_prompt_and_keeps_the_answer_form():
    spec = {"type": "factuality", "value": "Paris", "rubricPrompt": "Is {{completion}} what {{ideal}} says? "
                                                                    "Topic {{topic}}."}
    result, judge, _ = judged(spec, "Lyon", {"reason": "no", "choice": "D"}, variables={"topic": "geo"})
    assert judge.asked[0][0] == ("Is Lyon what Paris says? Topic geo.\n\n" + GRADED["factuality"].steps[0].answer)
    assert not result.passed
    item = parse_assert(spec)
    assert item.to_dict()["rubricPrompt"] == spec["rubricPrompt"] and parse_assert(item.to_dict()) == item
    steps = parse_assert({"type": "g-eval", "value": "x", "rubricPrompt": ["a {{criteria}}", "b {{steps}}"]})
    assert steps.to_dict()["rubricPrompt"] == ["a {{criteria}}", "b {{steps}}"] and steps.label == "g-eval:x"
    chat = {"type": "llm-rubric", "value": "polite", "rubricPrompt": [
        {"role": "system", "content": "Grade strictly."}, {"role": "user", "content": "{{output}} vs {{rubric}}"}]}
    _, judge, verdict = judged(chat, "Hi!", {"reason": "ok", "pass": True, "score": 1})
    assert judge.asked[0][0].startswith("Grade strictly.\n\nHi! vs polite\n\n") and verdict.passed
    _, _, bad = judged({**spec, "rubricPrompt": "{{nothing}}"}, "Lyon")
    assert not bad.passed and "factuality rubricPrompt" in bad.reason and "nothing" in bad.reason
    with pytest.raises(BatchInputError, match=r"context-faithfulness: rubricPrompt must be a non-empty text or a "
                                              r"list of up to 2 texts"):
        parse_assert({"type": "context-faithfulness", "rubricPrompt": ["a", "b", "c"]})


def test_an_answer_that_is_not_the_json_asked_for_fails_the_assert_saying_so():
    result, _, verdict = judged("model-graded-closedqa:x", "out", '{"reason": "cut')
    assert not result.passed and "not the JSON asked for" in verdict.reason
    _, _, wrong = judged("factuality:x", "out", {"reason": "", "choice": "F"})
    assert not wrong.passed and "not the JSON asked for" in wrong.reason
    _, _, silent = judged("g-eval:x", "out", {"steps": ["a"]})  # the judge fails on the second step
    assert not silent.passed and "could not answer" in silent.reason
    assert read_answer('{"pass": true, "reason": "r", "score": 0.5}', GRADED["llm-rubric"].steps[0].schema)
    assert not parse_assert("factuality:x").check(Observed("out")).passed  # no verdict at all
    # an unanswered judge fails a by-score kind at threshold 0, and its not- form too (no score to invert)
    relevance, _, _ = judged("context-relevance", "out", "")
    assert not relevance.passed and "answered nothing" in relevance.detail and "score" not in relevance.detail
    negated, _, _ = judged("not-llm-rubric:polite", "out", "no JSON")
    assert not negated.passed and negated.score == 0.0


def test_select_best_picks_one_of_the_tests_outputs():
    item = parse_assert("select-best:the shortest answer")
    judge = Judge({"reason": "shortest", "best": 1})
    verdicts = run(select_best(item, ["Paris is the capital.", "Paris"], inputs_for(item, "", "Q?", {}),
                                       judge))
    text, schema, _ = judge.asked[0]
    assert "criteria: the shortest answer" in text
    assert '<Text index="0">\nParis is the capital.\n</Text>\n<Text index="1">\nParis\n</Text>' in text
    assert schema["properties"]["best"] == {"type": "integer", "minimum": 0, "maximum": 1}
    assert [v.passed for v in verdicts] == [False, True] and [v.score for v in verdicts] == [0.0, 1.0]
    assert "not selected (output 1 was)" in verdicts[0].reason
    alone = run(select_best(item, ["only"], {}, Judge()))
    assert not alone[0].passed and "at least two outputs" in alone[0].reason


def test_rejudged_rows_take_select_bests_verdict_and_keep_the_rest():
    item = parse_assert("select-best:short")
    row = PromptRow(0, "Q?", asserts=[parse_assert("contains:P"), item])
    cell = Cell(row, Setting("a", SamplingParams()), 0, 0)
    first = result_for(cell, Generated("Paris", "stop", 1, 1))
    assert [r.passed for r in first.asserts] == [True, False] and not first.passed  # before the judge picked
    again = rejudged(first, cell, {verdict_key(item): Verdict(True, 1.0, "selected as the best for: short")})
    assert again.passed and again.score == 1.0 and again.asserts[0] == first.asserts[0]
    assert again.asserts[1].detail.startswith("judge: selected")


def test_graded_asserts_are_found_once_and_what_they_need_is_named():
    asserts = [parse_assert(s) for s in ("llm-rubric:kind", "llm-rubric:kind", "factuality:x", "contains:a",
                                         "select-best:short", "context-faithfulness")]
    assert [a.kind for a in graded(asserts)] == ["llm-rubric", "factuality", "context-faithfulness"]
    assert [a.kind for a in graded(asserts, select=True)] == ["select-best"] and rubrics(asserts) == ["kind"]
    assert missing_vars(asserts[-1], {"query": "q"}) == ["context"]
    assert missing_vars(parse_assert("context-recall:x"), {"context": "c"}) == []


def test_the_judge_request_is_greedy_and_held_to_the_steps_schema():
    step = GRADED["g-eval"].steps[1]
    request = judge_request(lambda text: f"<user>{text}</user>", "Q", step.schema, 99)
    assert request.prompt == "<user>Q</user>" and request.params.temperature == 0.0
    assert request.params.max_new_tokens == 99 and request.params.structured_outputs[0] == "json"
    assert json.loads(request.params.structured_outputs[1]) == step.schema and request.params.stop == ()
    plain = judge_request(lambda text: text, "Q", None, 64, ("\n",))  # a plain step: free text to its stop
    assert plain.params.structured_outputs == () and plain.params.stop == ("\n",)
    assert plain.params.temperature == 0.0 and plain.params.max_new_tokens == 64
    text = step_text(GRADED["llm-rubric"], 0, {"output": "o", "rubric": "r"}, default="{{output}}/{{rubric}}")
    assert text == "o/r"  # the run's judge prompt, as the Batch tab shows it


@pytest.mark.parametrize("spec, message", [
    ("answer-relevance:x", "answer-relevance takes no value: it reads the output and the prompt"),
    ({"type": "answer-relevance", "threshold": 1.5}, "answer-relevance: threshold must be a score between 0 and 1"),
    ("classifier:toxic", "classifier needs its model: write classifier:LABEL by ORG/MODEL"),
    ({"type": "context-recall", "value": "x", "contextTransform": "output"},
     "context-recall: contextTransform is not supported here: give the test a `context` var"),
    ("context-relevance:x", "context-relevance takes no value: it reads the test's query and context vars"),
    ("g-eval", "g-eval needs a value"),
    ({"type": "g-eval", "value": "x", "threshold": 2}, "g-eval: threshold must be a score between 0 and 1"),
])
def test_what_cannot_be_graded_is_refused_by_name(spec, message):
    with pytest.raises(BatchInputError, match=message.replace("(", r"\(")):
        parse_assert(spec)


def test_a_promptfoo_suite_reads_graded_asserts_with_their_rubric_prompts_and_refuses_a_grading_provider(tmp_path):
    from webui.batch.promptfoo.reader import read_config

    head = ("prompts: ['{{q}}']\nproviders: [{id: a}, {id: b}]\ntests:\n  - vars: {q: hi, query: hi, context: c}\n"
            "    assert:\n")
    _, rows, _ = read_config(head + "      - {type: context-faithfulness, threshold: 0.5}\n"
                             "      - {type: g-eval, value: fair, rubricPrompt: ['{{criteria}}', '{{steps}}']}\n"
                             "      - {type: not-select-best, value: short, weight: 2}\n", tmp_path)
    assert [a.to_dict() for a in rows[0].asserts] == [
        {"type": "context-faithfulness", "threshold": 0.5, "dialect": "promptfoo"},
        {"type": "g-eval", "value": "fair", "rubricPrompt": ["{{criteria}}", "{{steps}}"], "dialect": "promptfoo"},
        {"type": "not-select-best", "value": "short", "weight": 2, "dialect": "promptfoo"}]
    with pytest.raises(BatchInputError, match=r"tests\[0\].assert\[0\]: factuality: an assert's own grading "
                                              r"provider is not used here; the judge is the run's"):
        read_config(head + "      - {type: factuality, value: x, provider: 'openai:gpt-4o'}\n", tmp_path)
    with pytest.raises(BatchInputError, match=r"tests\[0\].assert\[0\]: context-recall: contextTransform is not"):
        read_config(head + "      - {type: context-recall, value: x, contextTransform: 'output'}\n", tmp_path)


def test_a_tests_options_rubric_prompt_grades_its_graded_asserts_and_may_be_a_file(tmp_path):
    from webui.batch.promptfoo.reader import read_config

    (tmp_path / "grade.txt").write_text("Does {{output}} meet {{criteria}}?")
    config = ("prompts: ['{{q}}']\ndefaultTest:\n  options:\n    rubricPrompt: 'Judge {{output}} by {{rubric}}'\n"
              "tests:\n  - vars: {q: hi}\n    assert:\n      - {type: llm-rubric, value: kind}\n"
              "      - {type: model-graded-closedqa, value: short, rubricPrompt: 'file://grade.txt'}\n"
              "      - {type: contains, value: h}\n")
    _, rows, _ = read_config(config, tmp_path)
    rubric, closedqa, contains = rows[0].asserts
    assert rubric.options["rubricPrompt"] == ("Judge {{output}} by {{rubric}}",)  # the test's options
    assert closedqa.options["rubricPrompt"] == ("Does {{output}} meet {{criteria}}?",)  # its own, from the file
    assert contains.to_dict() == {"type": "contains", "value": "h", "dialect": "promptfoo"}
    with pytest.raises(BatchInputError, match=r"tests\[0\].assert\[1\]: cannot read the rubricPrompt file"):
        read_config(config.replace("grade.txt", "none.txt"), tmp_path)


def vectors_for(given: Mapping[str, tuple[float, ...]]) -> Any:
    """An embedding model that gives these vectors (and keeps what it was asked to embed)."""
    from webui.embeddings import TextEmbeddings

    asked: list[list[str]] = []

    async def embed(texts: list[str]) -> TextEmbeddings:
        asked.append(texts)
        return TextEmbeddings("given", {t: given[t] for t in texts})
    embed.asked = asked  # type: ignore[attr-defined]
    return embed


QUESTIONS = ["What is the capital of France?", "Which city is French?", "Where is Paris?"]
"""The judge's three replies, one question a call."""
GIVEN = {"What is the capital of France?": (1.0, 0.0), "Which city is French?": (0.6, 0.8),
         "Where is Paris?": (0.0, 1.0), "Name the capital of France.": (0.8, 0.6)}


def relevance(spec: Any, embed: Any, *answers: Any, variables: Mapping[str, str] = VARS) -> tuple[Any, Judge]:
    item, judge = parse_assert(spec), Judge(*answers)
    inputs = inputs_for(item, "Paris is the capital of France.", "Name the capital of France.", variables)
    verdict = run(grade(item, inputs, judge, embed=embed))
    seen = Observed("Paris is the capital of France.", judged={verdict_key(item): verdict}, variables=variables)
    return item.check(seen), judge


def test_answer_relevance_is_the_mean_cosine_of_the_generated_questions_and_the_query():
    """promptfoo 0.115's matchesAnswerRelevance: three calls of its prompt, word for word, each reply one question
    (free text, read to its line's end; one JSON-constrained step made a small judge write junk, #49)."""
    embed = vectors_for({**GIVEN, VARS["query"]: (1.0, 0.0)})
    result, judge = relevance("answer-relevance", embed, *QUESTIONS)
    assert len(judge.asked) == 3 and len({text for text, _, _ in judge.asked}) == 1
    text, schema, _ = judge.asked[0]
    assert text.startswith("Generate question for the given answer.\nAnswer:\nThe PSLV-C56 mission")
    assert text.endswith("\n\nAnswer:Paris is the capital of France.\nQuestion:") and schema is None
    assert judge.stops == [("\n",)] * 3
    assert embed.asked == [[VARS["query"], *QUESTIONS[1:]]]  # the query var, not the prompt; each text once
    assert result.passed and result.score == pytest.approx((1.0 + 0.6 + 0.0) / 3)
    assert "relevance 0.53: mean cosine of the query and the questions generated from the output: " in result.detail
    assert '"Which city is French?" (0.60)' in result.detail and "embeddings from given" in result.detail
    strict, _ = relevance({"type": "answer-relevance", "threshold": 0.6}, embed, *QUESTIONS)
    assert not strict.passed and "needs 0.6" in strict.detail
    negated, _ = relevance({"type": "not-answer-relevance", "threshold": 0.6}, embed, *QUESTIONS)
    assert negated.passed and negated.score == pytest.approx(1 - 1.6 / 3)
    same, _ = relevance("answer-relevance", embed, "Where is Paris?", "Where is Paris?", QUESTIONS[0])
    assert same.score == pytest.approx(1 / 3)  # promptfoo's mean is over its three calls, the same question twice
    assert same.detail.count('"Where is Paris?"') == 1  # named once


def test_answer_relevance_embeds_the_prompt_without_a_query_var_and_reads_a_custom_generation_prompt():
    embed = vectors_for(GIVEN)
    result, judge = relevance({"type": "answer-relevance", "rubricPrompt": "Q for: {{answer}}"}, embed, *QUESTIONS,
                              variables={})
    assert [text for text, _, _ in judge.asked] == ["Q for: Paris is the capital of France."] * 3  # as promptfoo's
    assert embed.asked == [["Name the capital of France.", *QUESTIONS]]
    assert result.score == pytest.approx((0.8 + 0.96 + 0.6) / 3)


def test_answer_relevance_without_an_embedding_model_fails_saying_so_whatever_the_threshold():
    result, judge = relevance({"type": "answer-relevance", "threshold": 0}, None, *QUESTIONS)
    assert not result.passed and judge.asked == []  # the judge is not asked for questions nothing can embed
    assert "no model of this run gives them; load a sentence-embedding model" in result.detail
    assert "score" not in result.detail  # no score was computed
    negated, _ = relevance("not-answer-relevance", None, *QUESTIONS)
    assert not negated.passed and negated.score == 0.0 and "no model of this run gives them" in negated.detail
    gone, _ = relevance("answer-relevance", vectors_for({}), "", " ", "")
    assert not gone.passed and "the judge generated no question from the output on 3 of 3 calls" in gone.detail
    one, _ = relevance("answer-relevance", vectors_for(GIVEN), *QUESTIONS[:2], "  ")  # promptfoo: "No output"
    assert not one.passed and "on 1 of 3 calls" in one.detail and "score" not in one.detail


def test_answer_relevance_reads_promptfoos_dict_and_compact_forms():
    item = parse_assert({"type": "not-answer-relevance", "threshold": 0.7, "weight": 2,
                         "rubricPrompt": "Question for {{answer}}"})
    assert (item.kind, item.negate, item.threshold, item.weight) == ("answer-relevance", True, 0.7, 2)
    assert item.options["rubricPrompt"] == ("Question for {{answer}}",)
    assert parse_assert("answer-relevance").value is None and GRADED["answer-relevance"].threshold == 0.0
    assert item.label == "not-answer-relevance" and item.to_dict() == {
        "type": "not-answer-relevance", "threshold": 0.7, "weight": 2, "rubricPrompt": "Question for {{answer}}"}
    assert parse_assert(item.to_dict()) == item
