"""The model-graded assert kinds: one :class:`GradedKind` each, in one table, :data:`GRADED`.

A graded kind is asked of a judge (webui.batch.run.judge runs it): its steps, each a
grading prompt (``{{ name }}`` placeholders filled from the inputs below) and
the JSON its answer is constrained to (structured output, so the answer can
always be read when it fits the step's token budget), or none: a plain step,
answered in free text as promptfoo's graders answer (context-relevance's
sentences, answer-relevance's questions, where a JSON constraint broke a small
judge's answers, #49), and how the answers become a verdict (passed, a score in
[0, 1], a reason). A later step sees what earlier steps answered (g-eval's
evaluation steps, context-faithfulness's statements).

The inputs every step may use, named as promptfoo's grading prompts name them,
so a promptfoo ``rubricPrompt`` reads the same: the test's vars, then
``output`` (also ``completion`` and ``answer``), the assert's value (also
``rubric``, ``criteria``, ``ideal`` and ``groundTruth``), the prompt (``input``;
``question`` and ``query`` are the ``query`` var, else the prompt) and
``context`` (the ``context`` var).

The prompts carry the meaning of promptfoo 0.115's default grading prompts
(src/prompts/grading.ts and src/prompts/external/ragas.ts, MIT; the context
prompts there are ported from RAGAS, Apache-2.0) and the verdicts its matchers'
(src/matchers.ts), with the answer asked as JSON instead of free text, except context-relevance's and
answer-relevance's, which are promptfoo's prompts word for word, their answers read as promptfoo reads them. A
``rubricPrompt`` replaces a step's prompt (a list: one per step); the JSON the answer must be is still appended
to it (a plain step's stands alone, as promptfoo's).

answer-relevance asks the judge three times for a question the output answers (promptfoo's three calls,
each reply read to its line's end), then compares them by embeddings with the query (the ``query`` var, else
the prompt): its :attr:`GradedKind.scored` gets the run's embedding model (the runner's), and without one
the assert fails saying so. classifier asks no judge: a text-classification model named with the assert
scores the output (webui.batch.asserts.classify; its entry here has no steps). Any use of ``contextTransform``
is refused by name.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Mapping, NamedTuple

from webui.batch.asserts.errors import BatchInputError

if TYPE_CHECKING:
    from webui.batch.asserts.types import AssertData
    from webui.embeddings import TextEmbeddings

Embed = Callable[[list[str]], Awaitable["TextEmbeddings | None"]]
"""Texts -> their vectors from the run's embedding model (None: the model could not embed them)."""


class Grade(NamedTuple):
    """A graded kind's verdict: passed (before a threshold given with the assert), score in [0, 1], reason, and
    whether no score could be computed (the verdict then fails whatever the threshold)."""

    passed: bool
    score: float
    reason: str
    unscored: bool = False


@dataclass(frozen=True)
class Step:
    """One question to the judge: its default prompt (with the answer instruction), the instruction alone
    (appended to a custom prompt; "" for a plain step), the JSON schema its answer follows (None: a plain step,
    answered in free text as promptfoo's graders answer, its answer read as ``{"texts": [each call's reply]}``),
    its token budget per call, what its answer adds to the inputs of the next step, how many times it is asked
    (answer-relevance's three questions, one a call, as promptfoo asks them) and the strings that end a plain
    answer."""

    prompt: str
    answer: str
    schema: dict[str, Any] | None
    max_tokens: int = 256
    carry: Callable[[dict[str, Any]], dict[str, str]] | None = None
    calls: int = 1
    stop: tuple[str, ...] = ()


@dataclass(frozen=True)
class GradedKind:
    """A model-graded kind: its steps and how their answers (and the inputs) become a :class:`Grade`."""

    name: str
    steps: tuple[Step, ...]
    read: Callable[[list[dict[str, Any]], Mapping[str, str], Mapping[str, Any]], Grade] | None
    """(the steps' answers, the inputs, the assert's options) -> the grade; None: judged over a test's outputs
    (select-best), or by a classifier model (classifier: no steps)."""
    example: str = ""
    """A value for error messages and the help ("": the kind takes no value)."""
    note: str = ""
    threshold: float = 0.5
    by_score: bool = False
    """Whether the score against the threshold decides (g-eval, context-*); else the judge's pass does, and a
    threshold given with the assert then also must be reached."""
    needs: tuple[str, ...] = ()
    """The test vars it reads; a row without one is refused before the run."""
    scored: Callable[[list[dict[str, Any]], Mapping[str, str], Embed], Awaitable[Grade]] | None = None
    each: bool = False
    """A list of values is judged one at a time and the scores averaged (g-eval's list of criteria)."""
    """(the steps' answers, the inputs, the run's embedding model) -> the grade, for a kind scored by embeddings;
    its ``read`` is then the grade when the run has no embedding model (asked before the judge is)."""


def _schema(**properties: Any) -> dict[str, Any]:
    """A closed JSON object schema of these required properties, compact (no free whitespace)."""
    return {"x-guidance": {"whitespace_flexible": False}, "type": "object", "additionalProperties": False,
            "required": list(properties), "properties": properties}


def _text(limit: int) -> dict[str, Any]:
    return {"type": "string", "maxLength": limit}


def _texts(limit: int, most: int) -> dict[str, Any]:
    return {"type": "array", "items": _text(limit), "maxItems": most}


# -- llm-rubric (promptfoo's DEFAULT_GRADING_PROMPT) --------------------------------------------------------

RUBRIC_ANSWER = ('Answer with JSON only: {"reason": a short reason, "pass": true if the rubric holds and false if '
                 'not, "score": a number from 0 (fails completely) to 1 (holds completely)}.')
JUDGE_PROMPT = f"""You are grading an output against a rubric. Read the output, then decide whether the rubric is \
true of it.

<Output>
{{{{output}}}}
</Output>

<Rubric>
{{{{rubric}}}}
</Rubric>

{RUBRIC_ANSWER}"""
"""The llm-rubric prompt (the Batch tab shows it, editable: it must hold {{output}} and {{rubric}})."""
VERDICT_SCHEMA = _schema(reason=_text(200), **{"pass": {"type": "boolean"}},
                         score={"type": "number", "minimum": 0, "maximum": 1})


def _rubric(answers: list[dict[str, Any]], inputs: Mapping[str, str], options: Mapping[str, Any]) -> Grade:
    data = answers[0]
    score = data.get("score")
    score = float(score) if isinstance(score, (int, float)) and not isinstance(score, bool) else float(data["pass"])
    return Grade(bool(data["pass"]), max(0.0, min(1.0, score)), str(data.get("reason", "")))


# -- model-graded-closedqa (promptfoo's OPENAI_CLOSED_QA_PROMPT, from OpenAI evals) -------------------------

CLOSEDQA_ANSWER = ('Answer with JSON only: {"reason": your reasoning about the criterion, step by step and short, '
                   '"answer": "Y" if the submission meets the criterion, "N" if not}.')
CLOSEDQA_PROMPT = f"""You are assessing a submitted answer on a given task based on a criterion. Here is the data:
[BEGIN DATA]
***
[Task]: {{{{input}}}}
***
[Submission]: {{{{completion}}}}
***
[Criterion]: {{{{criteria}}}}
***
[END DATA]
Does the submission meet the criterion? Reason about the criterion first, so that your conclusion is correct; \
do not state the answer at the outset.

{CLOSEDQA_ANSWER}"""


def _closedqa(answers: list[dict[str, Any]], inputs: Mapping[str, str], options: Mapping[str, Any]) -> Grade:
    passed, reason = answers[0]["answer"] == "Y", str(answers[0].get("reason", ""))
    said = "The submission meets the criterion" if passed else "The submission does not meet the criterion"
    return Grade(passed, float(passed), f"{said}: {reason}" if reason else said)


# -- factuality (promptfoo's OPENAI_FACTUALITY_PROMPT, from OpenAI evals' fact.yaml) --------------------------

FACTUALITY_CHOICES = {
    "A": "The submitted answer is a subset of the expert answer and is fully consistent with it.",
    "B": "The submitted answer is a superset of the expert answer and is fully consistent with it.",
    "C": "The submitted answer contains all the same details as the expert answer.",
    "D": "There is a disagreement between the submitted answer and the expert answer.",
    "E": "The answers differ, but these differences don't matter from the perspective of factuality."}
FACTUALITY_SCORES = {"A": 1.0, "B": 1.0, "C": 1.0, "D": 0.0, "E": 1.0}
"""promptfoo's default score of each category; a category scoring above 0 passes."""
FACTUALITY_NAMES = {"subset": "A", "superset": "B", "agree": "C", "disagree": "D", "differButFactual": "E"}
"""promptfoo's names for the categories in a test's ``options.factuality`` (the score each one gives)."""
FACTUALITY_ANSWER = ('Answer with JSON only: {"reason": a short reason, "choice": the letter of the option that '
                     'applies, one of "A", "B", "C", "D", "E"}.')
FACTUALITY_PROMPT = """You are comparing a submitted answer to an expert answer on a given question. Here is the data:
[BEGIN DATA]
************
[Question]: {{input}}
************
[Expert]: {{ideal}}
************
[Submission]: {{completion}}
************
[END DATA]

Compare the factual content of the submitted answer with the expert answer. Ignore any differences in style, \
grammar, or punctuation.
The submitted answer may either be a subset or superset of the expert answer, or it may conflict with it. \
Determine which case applies. Answer the question by selecting one of the following options:
""" + "\n".join(f"({letter}) {text}" for letter, text in FACTUALITY_CHOICES.items()) + "\n\n" + FACTUALITY_ANSWER


def factuality_scores(given: Any, where: str = "factuality") -> dict[str, float]:
    """A test's ``options.factuality`` checked: {category name: its score (a number >= 0)}."""
    if not isinstance(given, Mapping) or not given:
        raise BatchInputError(f"{where} must be a mapping of category scores ({', '.join(FACTUALITY_NAMES)})")
    unknown = [str(k) for k in given if k not in FACTUALITY_NAMES]
    if unknown:
        raise BatchInputError(f"{where}: {', '.join(unknown)} is no factuality category; the categories are "
                              f"{', '.join(FACTUALITY_NAMES)}")
    for name, score in given.items():
        if isinstance(score, bool) or not isinstance(score, (int, float)) or not 0 <= score < float("inf"):
            raise BatchInputError(f"{where}.{name} must be a score (a number >= 0), got {score!r}")
    return {str(name): float(score) for name, score in given.items()}


def _factuality(answers: list[dict[str, Any]], inputs: Mapping[str, str], options: Mapping[str, Any]) -> Grade:
    """promptfoo's matchesFactuality: the category's score (``options.factuality`` over the defaults); it passes
    when that is above 0."""
    choice = answers[0]["choice"]
    own = {FACTUALITY_NAMES[name]: score for name, score in options.get("factuality", {}).items()}
    score = {**FACTUALITY_SCORES, **own}[choice]
    reason = str(answers[0].get("reason", ""))
    return Grade(score > 0, score, f"({choice}) {FACTUALITY_CHOICES[choice]}" + (f" {reason}" if reason else ""))


# -- g-eval (promptfoo's matchesGEval: evaluation steps from the criteria, then a score 0-10) ---------------

GEVAL_MAX = 10
GEVAL_STEPS_ANSWER = 'Answer with JSON only: {"steps": a list of 3 or 4 short evaluation steps}.'
GEVAL_STEPS_PROMPT = f"""Given an evaluation criteria which outlines how you should judge some text, generate 3-4 \
concise evaluation steps for any text based on the criteria below.

Evaluation Criteria:
{{{{criteria}}}}

{GEVAL_STEPS_ANSWER}"""
GEVAL_ANSWER = (f'Answer with JSON only: {{"score": a whole number from 0 to {GEVAL_MAX}, {GEVAL_MAX} being that '
                'the reply follows the evaluation criteria and 0 that it does not, "reason": a short reason for '
                'the score that names specific information from the source text and the reply but does not quote '
                'the score}.')
GEVAL_PROMPT = f"""You will be given one Reply for a Source Text below. Your task is to rate the Reply on one metric.
Please make sure you read and understand these instructions carefully.

Evaluation Criteria:
{{{{criteria}}}}

Evaluation Steps:
{{{{steps}}}}

Source Text:
{{{{input}}}}

Reply:
{{{{output}}}}

{GEVAL_ANSWER}"""


def _geval(answers: list[dict[str, Any]], inputs: Mapping[str, str], options: Mapping[str, Any]) -> Grade:
    score = int(answers[1]["score"]) / GEVAL_MAX
    return Grade(score >= 0.7, score, str(answers[1].get("reason", "")))


# -- context-recall, context-relevance, context-faithfulness (promptfoo's RAGAS ports) --------------------------

RECALL_ANSWER = ('Answer with JSON only: {"sentences": each sentence of the answer, as {"sentence": the sentence, '
                 '"attributed": true if the context supports it, false if not}}.')
RECALL_PROMPT = f"""Given a context, and an answer, analyze each sentence in the answer and classify if the \
sentence can be attributed to the given context or not.

context: {{{{context}}}}
answer: {{{{groundTruth}}}}

{RECALL_ANSWER}"""


def _recall(answers: list[dict[str, Any]], inputs: Mapping[str, str], options: Mapping[str, Any]) -> Grade:
    sentences = answers[0]["sentences"]
    found = sum(bool(s["attributed"]) for s in sentences)
    score = found / len(sentences) if sentences else 0.0
    return Grade(True, score, f"recall {score:.2f}: {found} of {len(sentences)} sentences of the reference are "
                              "attributed to the context")


RELEVANCE_BAD = "Insufficient Information"
"""What the judge says for a context that holds nothing for the query (promptfoo's CONTEXT_RELEVANCE_BAD)."""
RELEVANCE_PROMPT = f"""Please extract relevant sentences from the provided context that is absolutely required \
answer the following query. If no relevant sentences are found, or if you believe the query cannot be answered from \
the given context, return the phrase "{RELEVANCE_BAD}".  While extracting candidate sentences you're not allowed to \
make any changes to sentences from given context.

query: {{{{query}}}}
context: {{{{context}}}}
candidate sentences:
"""
"""promptfoo 0.115's CONTEXT_RELEVANCE, word for word (its answer is free text, one sentence a line)."""
def _relevance(answers: list[dict[str, Any]], inputs: Mapping[str, str], options: Mapping[str, Any]) -> Grade:
    """promptfoo 0.115's context relevance (matchesContextRelevance): the judge's answer split into lines (its
    splitIntoSentences), blank ones dropped; the score is the share of lines that do not hold "Insufficient
    Information". An answer with no line fails unscored (promptfoo fails it: "No output")."""
    said = [line for line in answers[0]["texts"][0].split("\n") if line.strip()]
    if not said:
        return Grade(False, 0.0, "the judge answered nothing (no sentence extracted from the context)",
                     unscored=True)
    relevant = [line.strip() for line in said if RELEVANCE_BAD not in line]
    if not relevant:
        return Grade(True, 0.0, "the judge found nothing in the context needed for the query (score 0): "
                                f"{RELEVANCE_BAD}")
    score = len(relevant) / len(said)
    return Grade(True, score, f"relevance {score:.2f}: the judge extracted {len(relevant)} sentence(s) needed for "
                              f"the query" + (f" of {len(said)}" if len(said) > len(relevant) else "") + ": "
                              + " ".join(relevant)[:300])


STATEMENTS_ANSWER = 'Answer with JSON only: {"statements": the statements, each one short sentence}.'
STATEMENTS_PROMPT = f"""Given a question and answer, create one or more statements from each sentence in the \
given answer. Each statement stands alone: it names what it is about instead of saying "he" or "it".

question: {{{{question}}}}
answer: {{{{answer}}}}

{STATEMENTS_ANSWER}"""
VERDICTS_ANSWER = ('Answer with JSON only: {"verdicts": one per statement, in order, as {"reason": a brief '
                   'explanation, "supported": true if the context supports the statement, false if not}}.')
VERDICTS_PROMPT = f"""Natural language inference. Consider the given context and the following statements, then \
determine whether each is supported by the information present in the context. Give a brief explanation for each \
statement before the verdict.

context: {{{{context}}}}
statements:
{{{{statements}}}}

{VERDICTS_ANSWER}"""
_MOST_STATEMENTS = 8


def _statements(answer: dict[str, Any]) -> dict[str, str]:
    listed = [s for s in answer["statements"] if s.strip()]
    return {"statements": "\n".join(f"{i}. {s}" for i, s in enumerate(listed, 1)), "statement_count": str(len(listed))}


def _faithfulness(answers: list[dict[str, Any]], inputs: Mapping[str, str], options: Mapping[str, Any]) -> Grade:
    """promptfoo's score: 1 - (statements the judge found unsupported) / (statements)."""
    count = int(inputs.get("statement_count", "0"))
    if not count:
        return Grade(False, 0.0, "the judge found no statements in the output")
    unsupported = sum(not v["supported"] for v in answers[1]["verdicts"][:count])
    score = 1 - unsupported / count
    return Grade(True, score, f"faithfulness {score:.2f}: {count - unsupported} of {count} statements of the "
                              "output are supported by the context")


# -- answer-relevance (promptfoo's matchesAnswerRelevance, RAGAS's answer relevancy) -------------------------

RELEVANCE_QUESTIONS = 3
"""How many times the judge is asked for a question the output answers (promptfoo asks three times)."""
QUESTIONS_PROMPT = """Generate question for the given answer.
Answer:\nThe PSLV-C56 mission is scheduled to be launched on Sunday, 30 July 2023 at 06:30 IST / 01:00 UTC. It will \
be launched from the Satish Dhawan Space Centre, Sriharikota, Andhra Pradesh, India
Question: When is the scheduled launch date and time for the PSLV-C56 mission, and where will it be launched from?

Answer:{{answer}}
Question:"""
"""promptfoo 0.115's ANSWER_RELEVANCY_GENERATE, word for word: the judge's reply (to its line's end) is one
question."""
NO_EMBEDDINGS = ("answer-relevance compares embeddings, and no model of this run gives them; load a sentence-"
                 "embedding model (or a model through the transformers loader) in the Model tab, or use "
                 "llm-rubric or g-eval instead")


def _no_embeddings(answers: list[dict[str, Any]], inputs: Mapping[str, str], options: Mapping[str, Any]) -> Grade:
    return Grade(False, 0.0, NO_EMBEDDINGS, unscored=True)


async def _answer_relevance(answers: list[dict[str, Any]], inputs: Mapping[str, str], embed: Embed) -> Grade:
    """promptfoo's matchesAnswerRelevance: the mean cosine of the query's and each generated question's embeddings
    (one question a call; in [0, 1]: a negative mean is 0; promptfoo passes at ``score >= threshold``, 0 by
    default). A call answered with nothing fails the assert unscored, as promptfoo fails it ("No output")."""
    questions = list(answers[0]["texts"])  # embedded as the judge wrote them, as promptfoo embeds them
    if not all(q.strip() for q in questions):
        blank = sum(not q.strip() for q in questions)
        return Grade(False, 0.0, f"the judge generated no question from the output on {blank} of "
                                 f"{len(questions)} calls", unscored=True)
    query = inputs["query"]
    vectors = await embed(list(dict.fromkeys([query, *questions])))
    cosines = [vectors.cosine(query, q) for q in questions] if vectors is not None else [None]
    if vectors is None or any(c is None for c in cosines):
        return Grade(False, 0.0, "the embedding model could not embed the query and the generated questions",
                     unscored=True)
    mean = sum(c for c in cosines if c is not None) / len(cosines)
    score = min(1.0, max(0.0, mean))
    asked = "; ".join(f"{json.dumps(q, ensure_ascii=False)} ({c:.2f})" for q, c in dict(zip(questions, cosines)).items())
    return Grade(True, score, f"relevance {mean:.2f}: mean cosine of the query and the questions generated from "
                              f"the output: {asked}; embeddings from {vectors.source}")


# -- select-best (promptfoo's SELECT_BEST_PROMPT): one question for all outputs of a test ------------------

SELECT_ANSWER = 'Answer with JSON only: {"reason": a short reason, "best": the index of the text that fits best}.'
SELECT_PROMPT = f"""You are comparing multiple pieces of text to see which best fits the following criteria: \
{{{{criteria}}}}

Here are the pieces of text:
{{{{outputs}}}}

{SELECT_ANSWER}"""


def select_schema(count: int) -> dict[str, Any]:
    return _schema(reason=_text(200), best={"type": "integer", "minimum": 0, "maximum": count - 1})


def numbered_outputs(outputs: list[str]) -> str:
    """The outputs as promptfoo's select-best prompt lists them: ``<Text index="0">...</Text>``."""
    return "\n".join(f'<Text index="{i}">\n{text}\n</Text>' for i, text in enumerate(outputs))


def select_grades(answer: dict[str, Any], count: int, criteria: str) -> list[Grade]:
    """The verdict on each of ``count`` outputs: the chosen one passes with score 1, the others fail with 0."""
    best, reason = int(answer["best"]), str(answer.get("reason", ""))
    why = f" ({reason})" if reason else ""
    return [Grade(True, 1.0, f"selected as the best for: {criteria}{why}") if i == best else
            Grade(False, 0.0, f"not selected (output {best} was): {criteria}{why}") for i in range(count)]


# -- max-score (promptfoo's, newer than 0.115): the best of a test's outputs by its other asserts' scores ------

COMPARING = ("select-best", "max-score")
"""The kinds that compare a test's outputs (once all are made) rather than judge one."""
MAX_SCORE_METHODS = ("average", "sum")


def max_score_options(value: Any) -> dict[str, Any]:
    """A max-score's value ({method, weights, threshold}, each optional; none: average, every weight 1) checked."""
    given = {} if value is None or value == "" else value
    if not isinstance(given, dict) or set(given) - {"method", "weights", "threshold"}:
        raise BatchInputError(f"max-score takes {{method: average|sum, weights: {{assert type: weight}}, threshold}} "
                              f"(each optional), got {value!r}")
    method = given.get("method", "average")
    if method not in MAX_SCORE_METHODS:
        raise BatchInputError(f"max-score method must be average or sum, got {method!r}")
    weights = given.get("weights") or {}
    if not isinstance(weights, dict) or not all(
            isinstance(w, (int, float)) and not isinstance(w, bool) and w >= 0 for w in weights.values()):
        raise BatchInputError(f"max-score weights must map assert types to numbers >= 0, got {weights!r}")
    threshold = given.get("threshold")
    if threshold is not None and (isinstance(threshold, bool) or not isinstance(threshold, (int, float))):
        raise BatchInputError(f"max-score threshold must be a number, got {threshold!r}")
    return {"method": method, "weights": {str(k): float(w) for k, w in weights.items()},
            **({"threshold": float(threshold)} if threshold is not None else {})}


def max_score_grades(scored: list[list[tuple[str, float]]], options: Mapping[str, Any]) -> list[Grade]:
    """The grade of each output from its other asserts' (promptfoo type, score): each output's aggregate is the
    weighted average (or sum) of its scores, each weighted by its type's weight (default 1); the highest passes
    with score 1 (the first on a tie) unless it is under the threshold, the others fail with 0."""
    if any(not found for found in scored):
        return [Grade(False, 0.0, "max-score needs at least one other assert (not max-score or select-best) to "
                                  "aggregate the scores of")] * len(scored)
    weights, totals = options.get("weights", {}), []
    for found in scored:
        weighted = sum(score * weights.get(kind, 1.0) for kind, score in found)
        weight = sum(weights.get(kind, 1.0) for kind, _ in found)
        totals.append(weighted if options.get("method") == "sum" else weighted / weight if weight else 0.0)
    best = max(totals)
    winner, threshold = totals.index(best), options.get("threshold")
    met = threshold is None or best >= threshold
    return [Grade(True, 1.0, f"selected as the highest scoring output (score {total:.3f})") if i == winner and met
            else Grade(False, 0.0, f"not selected: score {total:.3f} is below the threshold {threshold:g}")
            if total == best and not met else
            Grade(False, 0.0, f"not selected (score {total:.3f}, the highest {best:.3f})")
            for i, total in enumerate(totals)]


# -- the table -----------------------------------------------------------------------------------------

GRADED: dict[str, GradedKind] = {kind.name: kind for kind in (
    GradedKind("llm-rubric", (Step(JUDGE_PROMPT, RUBRIC_ANSWER, VERDICT_SCHEMA),), _rubric,
               "The answer is polite and names a city", "judged by a loaded model or a server"),
    GradedKind("model-graded-closedqa", (Step(CLOSEDQA_PROMPT, CLOSEDQA_ANSWER, _schema(
        reason=_text(300), answer={"enum": ["Y", "N"]}), 320),), _closedqa, "The answer names a city",
               "criterion judged Y/N"),
    GradedKind("factuality", (Step(FACTUALITY_PROMPT, FACTUALITY_ANSWER, _schema(
        reason=_text(200), choice={"enum": list(FACTUALITY_CHOICES)})),), _factuality, "Paris is the capital",
               "against a reference answer; D fails"),
    GradedKind("g-eval", (Step(GEVAL_STEPS_PROMPT, GEVAL_STEPS_ANSWER, _schema(steps={
        **_texts(150, 4), "minItems": 1}), 512, lambda a: {"steps": "\n".join(f"- {s}" for s in a["steps"])}),
        Step(GEVAL_PROMPT, GEVAL_ANSWER, _schema(score={"type": "integer", "minimum": 0, "maximum": GEVAL_MAX},
                                                 reason=_text(200)))), _geval,
               "The reply is coherent", "score/10 ≥ 0.7 (a list of criteria: their mean)", threshold=0.7, by_score=True,
               each=True),
    GradedKind("context-recall", (Step(RECALL_PROMPT, RECALL_ANSWER, _schema(sentences={
        "type": "array", "minItems": 1, "maxItems": 8, "items": _schema(sentence=_text(150), attributed={
            "type": "boolean"})}), 768),), _recall, "Paris is the capital of France",
               "the reference's sentences found in the context var", threshold=0.0, by_score=True, needs=("context",)),
    GradedKind("context-relevance", (Step(RELEVANCE_PROMPT, "", None, 512),), _relevance,
               "", "whether the judge finds sentences in the context var needed for the query var (the share of "
                   f"the lines of its answer that are not \"{RELEVANCE_BAD}\", as promptfoo 0.115 scores it)",
               threshold=0.0, by_score=True, needs=("query", "context")),
    GradedKind("context-faithfulness", (
        Step(STATEMENTS_PROMPT, STATEMENTS_ANSWER, _schema(statements={**_texts(150, _MOST_STATEMENTS),
                                                                       "minItems": 1}), 512, _statements),
        Step(VERDICTS_PROMPT, VERDICTS_ANSWER, _schema(verdicts={
            "type": "array", "maxItems": _MOST_STATEMENTS,
            "items": _schema(reason=_text(100), supported={"type": "boolean"})}), 768)), _faithfulness, "",
        "the output's statements supported by the context var", threshold=0.0, by_score=True,
        needs=("query", "context")),
    GradedKind("select-best", (Step(SELECT_PROMPT, SELECT_ANSWER, select_schema(2)),), None, "The most concise answer",
               "the best of a test's outputs across settings"),
    GradedKind("max-score", (), None, "", "the best of a test's outputs by the other asserts' scores (value: "
               "{method: average|sum, weights: {type: w}, threshold}); no judge"),
    GradedKind("answer-relevance", (Step(QUESTIONS_PROMPT, "", None, 256, calls=RELEVANCE_QUESTIONS,
                                         stop=("\n",)),), _no_embeddings, "",
               "mean cosine of the query var (else the prompt) and the questions the judge makes from the output "
               "(three calls, as promptfoo's); needs an embedding model", threshold=0.0, by_score=True,
               scored=_answer_relevance),
    GradedKind("classifier", (), None, "toxic", "a label's probability (none: the top one) by a local "
               "text-classification model", threshold=1.0, by_score=True),
)}
"""Every graded kind by name (llm-rubric first)."""

REFUSED: dict[str, str] = {}
"""Graded kinds promptfoo has that cannot run here, and why."""
def verdict_key(item: AssertData) -> str:
    """The key of an assert's verdict in ``Observed.judged``: an llm-rubric with the run's judge prompt is keyed
    by its rubric, any other by its kind, value and custom prompt."""
    custom, scores = item.options.get("rubricPrompt"), item.options.get("factuality")
    if item.kind == "llm-rubric" and not custom:
        return str(item.value)
    if item.kind == "max-score":
        return json.dumps([item.kind, item.options["max_score"]], ensure_ascii=False, sort_keys=True)
    if item.kind == "classifier":  # its model, and the output as its transform rewrites it
        return json.dumps([item.kind, item.value, item.options["provider"], list(item.transform)], ensure_ascii=False)
    return json.dumps([item.kind, item.value, list(custom or ()), *([scores] if scores else [])], ensure_ascii=False)


def missing_vars(item: AssertData, variables: Mapping[str, str]) -> list[str]:
    """The test vars a graded assert needs that ``variables`` lacks."""
    return [name for name in GRADED[item.kind].needs if not str(variables.get(name, "")).strip()]
