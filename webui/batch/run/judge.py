"""The judge: a model asked about an output for the model-graded asserts (webui.batch.asserts.graded).

The judge is the loaded model, asked through the run's chat template with each
graded kind's grading prompt (llm-rubric's is shown and editable in the Batch
tab; ``{{output}}`` and ``{{rubric}}`` are filled in; an assert's
``rubricPrompt`` replaces its kind's), greedily, and constrained to answer the
kind's JSON (structured output), so its answer can always be read; a plain step
(context-relevance's, answer-relevance's) is answered in free text, ended by its
stop strings, as promptfoo's graders answer. A small model
is a weak judge: the verdict and its reason are stored with the row to be
checked by eye.

Or the judge is a remote OpenAI-compatible server (``/chat/completions``, with the
same JSON schema as ``response_format``); its API key comes from the environment
variable WORKBENCH_JUDGE_API_KEY or the form, and is never stored with the run.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from typing import Any, Awaitable, Callable, Mapping, Sequence

import httpx
import jsonschema

from webui.batch.asserts.assertion import Assert
from webui.batch.asserts.types import AssertResult, Verdict
from webui.batch.asserts.errors import BatchInputError
from webui.batch.asserts.graded import (
    COMPARING, GRADED, JUDGE_PROMPT, VERDICT_SCHEMA, Embed, GradedKind, Step, max_score_grades, numbered_outputs,
    select_grades, select_schema, verdict_key,
)
from webui.batch.run.prompts import PromptRow, render, template_variables
from webui.engine import EngineError, GenerationRequest, SamplingParams

__all__ = ["JUDGE_PROMPT", "KEY_VARIABLE", "VERDICT_SCHEMA", "JudgeError", "RemoteJudge", "check_judge_prompt",
           "grade", "graded", "inputs_for", "judge_budget", "judge_request", "max_score", "read_answer", "rubrics",
           "select_best", "step_text", "step_tokens", "with_suite_tokens"]

KEY_VARIABLE = "WORKBENCH_JUDGE_API_KEY"

Ask = Callable[[str, Mapping[str, Any] | None, int, Sequence[str]], Awaitable[str]]
"""(the question, the JSON schema its answer follows (None: free text), the token budget, the strings that end
a free-text answer) -> the judge's answer; JudgeError when the judge cannot answer."""


class JudgeError(Exception):
    """The judge could not answer; the message says why."""


def judge_params(schema: Mapping[str, Any] | None, max_tokens: int, stop: Sequence[str] = ()) -> SamplingParams:
    """Greedy, at most ``max_tokens``, the answer constrained to ``schema`` (None: free text, ended by ``stop``)."""
    # from_dict: structured_outputs is given as vLLM's {form: value}, which the check turns into (form, text)
    shape = {"structured_outputs": {"json": dict(schema)}} if schema is not None else {"stop": list(stop)}
    return SamplingParams.from_dict({"temperature": 0.0, "max_new_tokens": max_tokens, **shape})


@dataclass(frozen=True)
class RemoteJudge:
    """An OpenAI-compatible server that judges; ``key`` is not stored with the run."""

    url: str
    model: str = ""
    key: str = ""

    def ask(self, text: str, schema: Mapping[str, Any] | None, max_tokens: int = 256, stop: Sequence[str] = (),
            timeout: float = 120.0) -> str:
        """The server's answer to ``text``, asked for JSON following ``schema`` (None: free text, ended by
        ``stop``); JudgeError saying why not."""
        body: dict[str, Any] = {"messages": [{"role": "user", "content": text}], "temperature": 0,
                                "max_tokens": max_tokens}
        if schema is not None:
            plain = {k: v for k, v in schema.items() if k != "x-guidance"}
            body["response_format"] = {"type": "json_schema", "json_schema": {"name": "verdict", "schema": plain}}
        elif stop:
            body["stop"] = list(stop)
        if self.model:
            body["model"] = self.model
        key = self.key or os.environ.get(KEY_VARIABLE, "")
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        try:
            answer = httpx.post(self.url.rstrip("/") + "/chat/completions", json=body, headers=headers,
                                timeout=timeout)
        except httpx.HTTPError as exc:
            raise JudgeError(f"the judge server {self.url} could not be reached: {exc}") from None
        if answer.status_code != 200:
            raise JudgeError(f"the judge server answered {answer.status_code}: {answer.text[:200]}")
        try:
            return str(answer.json()["choices"][0]["message"]["content"] or "")
        except (ValueError, KeyError, IndexError, TypeError):
            raise JudgeError("the judge server's answer is not a chat completion") from None

    def to_dict(self) -> dict[str, str]:
        return {"url": self.url, "model": self.model}  # never the key


def check_judge_prompt(text: str) -> str:
    """The judge prompt, checked: it must hold {{output}} and {{rubric}} and nothing else."""
    names = set(template_variables(text or ""))
    if names != {"output", "rubric"}:
        raise BatchInputError("the judge prompt must hold {{output}} and {{rubric}} (and no other placeholder); "
                              f"it has {', '.join(sorted(names)) or 'none'}")
    return text


def graded(asserts: Sequence[Assert], select: bool = False) -> list[Assert]:
    """The graded asserts (one per verdict key): those judged per output, or (``select``) the select-best and
    max-score ones, which compare a test's outputs."""
    found = {verdict_key(a): a for a in asserts if a.kind in GRADED and (a.kind in COMPARING) == select}
    return list(found.values())


def step_tokens(step: Step, item: Assert, run: int | None = None) -> int:
    """The most tokens the judge writes on one grading step of ``item``. The budget given, by precedence: the
    run's (``launch.py batch --grader-max-tokens``, the Batch tab's grader budget), over the assert's own (its
    ``provider: {config: {max_tokens}}``), over the suite's (``defaultTest.options.provider.config.max_tokens``,
    given to each graded assert without its own by :func:`with_suite_tokens`); none given: the step's own (256-768,
    what its answer fits). A budget given caps the step's own, it never raises it; it is per grader call, as
    promptfoo's (a step asked several times, answer-relevance's three questions, gets it for each call)."""
    given = run or item.options.get("max_tokens")
    return min(step.max_tokens, given) if given else step.max_tokens


def with_suite_tokens(rows: Sequence[PromptRow], tokens: int | None) -> list[PromptRow]:
    """``rows`` with the suite's grader budget given to each graded assert that has none of its own (as
    promptfoo's defaultTest.options.provider is the grader of every assert without its own provider)."""
    if tokens is None:
        return list(rows)

    def budgeted(item: Assert) -> Assert:
        if item.kind not in GRADED or not GRADED[item.kind].steps or "max_tokens" in item.options:
            return item
        return replace(item, options={**item.options, "max_tokens": tokens})
    return [replace(row, asserts=[budgeted(a) for a in row.asserts]) for row in rows]


def judge_budget(asserts: Sequence[Assert], run: int | None = None) -> int:
    """The most tokens the judge may write on one output's graded asserts: each step's budget
    (:func:`step_tokens`; ``run``: the run's grader budget), for each criterion of a kind that judges them one at
    a time."""
    total = 0
    for item in [*graded(asserts), *graded(asserts, select=True)]:
        kind = GRADED[item.kind]
        times = len(item.value) if kind.each and isinstance(item.value, tuple) else 1
        total += times * sum(step.calls * step_tokens(step, item, run) for step in kind.steps)
    return total


def rubrics(asserts: list[Assert]) -> list[str]:
    """The rubrics of the llm-rubric asserts the run's judge prompt asks about (no rubricPrompt of their own)."""
    return [str(a.value) for a in graded(asserts) if a.kind == "llm-rubric" and "rubricPrompt" not in a.options]


def inputs_for(item: Assert, output: str, prompt: str, variables: Mapping[str, str]) -> dict[str, str]:
    """What a grading prompt may name: the test's vars, then the names promptfoo's grading prompts use."""
    query = str(variables.get("query") or prompt)
    return {**{k: str(v) for k, v in variables.items()}, "output": output, "completion": output, "answer": output,
            **value_inputs(item.value), "input": prompt, "question": query, "query": query,
            "context": str(variables.get("context", ""))}


def value_inputs(value: Any) -> dict[str, str]:
    """An assert's value under the names promptfoo's grading prompts give it."""
    text = "" if value is None else str(value)
    return {"rubric": text, "criteria": text, "ideal": text, "groundTruth": text}


def step_text(kind: GradedKind, index: int, inputs: Mapping[str, str], custom: Sequence[str] = (),
              default: str | None = None) -> str:
    """Step ``index``'s question: its custom prompt (a rubricPrompt; its answer instruction appended), else
    ``default`` (the run's judge prompt, for llm-rubric), else the kind's prompt; BatchInputError when a custom
    prompt names what is not there (a plain step's custom prompt stands alone, as promptfoo renders it)."""
    step = kind.steps[index]
    if index < len(custom):
        text = custom[index]
        try:
            messages = json.loads(text)
        except ValueError:
            messages = None
        if isinstance(messages, list) and all(isinstance(m, dict) and "content" in m for m in messages):
            text = "\n\n".join(str(m["content"]) for m in messages)  # a chat prompt: its messages, as one
        where = f"{kind.name} rubricPrompt"
        filled = render(text, inputs, where=where, noun="input")
        return filled + "\n\n" + step.answer if step.answer else filled
    return render(default if default is not None and index == 0 else step.prompt, inputs, noun="input")


def judge_request(render_chat: Callable[[str], str], text: str, schema: Mapping[str, Any] | None = VERDICT_SCHEMA,
                  max_tokens: int = 256, stop: Sequence[str] = ()) -> GenerationRequest:
    """The request asking the judge ``text`` (``render_chat`` writes a user message as the model reads it)."""
    return GenerationRequest(render_chat(text), judge_params(schema, max_tokens, stop), add_special_tokens=False)


def read_answer(text: str, schema: Mapping[str, Any]) -> dict[str, Any] | None:
    """The judge's answer, when it is JSON following ``schema``; None when it is not (cut off by the token
    limit, say)."""
    try:
        data: Any = json.loads(text)
        jsonschema.validate(data, {k: v for k, v in schema.items() if k != "x-guidance"})
    except (ValueError, jsonschema.ValidationError):
        return None
    return data if isinstance(data, dict) else None


async def _answer(ask: Ask, text: str, schema: Mapping[str, Any], tokens: int) -> dict[str, Any]:
    said = await _said(ask, text, schema, tokens)
    data = read_answer(said, schema)
    if data is None:
        raise JudgeError(f"the judge's answer is not the JSON asked for (cut off?): {said[:120]!r}")
    return data


async def _said(ask: Ask, text: str, schema: Mapping[str, Any] | None, tokens: int,
                stop: Sequence[str] = ()) -> str:
    try:
        return await ask(text, schema, tokens, stop)
    except (JudgeError, EngineError, ValueError) as exc:
        raise JudgeError(f"the judge could not answer: {exc}") from None


async def _step(ask: Ask, step: Step, text: str, tokens: int) -> dict[str, Any]:
    """A step's answer: its JSON, or a plain step's replies, one a call (``{"texts": [...]}``)."""
    if step.schema is not None:
        return await _answer(ask, text, step.schema, tokens)
    return {"texts": [await _said(ask, text, None, tokens, step.stop) for _ in range(step.calls)]}


async def grade(item: Assert, inputs: Mapping[str, str], ask: Ask, default: str | None = None,
                embed: Embed | None = None, tokens: int | None = None) -> Verdict:
    """The judge's verdict on one graded assert (not select-best), its steps asked in order; a failing verdict
    saying why when the judge cannot answer or a custom prompt cannot be filled in. ``embed``: the run's
    embedding model, for a kind scored by embeddings (None: the run has none, and such a kind fails saying so).
    ``tokens``: the run's grader budget (:func:`step_tokens`)."""
    kind, custom = GRADED[item.kind], tuple(item.options.get("rubricPrompt", ()))
    if kind.read is None:
        raise ValueError(f"{item.kind} is judged over a test's outputs (select_best), not one output")
    if kind.each and isinstance(item.value, tuple):  # each criterion judged, the scores averaged (promptfoo's)
        return _mean([await grade(replace(item, value=value), {**inputs, **value_inputs(value)}, ask, default, embed,
                                  tokens) for value in item.value], kind.threshold)
    if kind.scored is not None and embed is None:
        return Verdict(*kind.read([], inputs, item.options))
    filled, answers = dict(inputs), []
    try:
        for index, step in enumerate(kind.steps):
            text = step_text(kind, index, filled, custom, default)
            answers.append(await _step(ask, step, text, step_tokens(step, item, tokens)))
            filled.update(step.carry(answers[-1]) if step.carry else {})
    except (JudgeError, BatchInputError) as exc:
        return Verdict(False, 0.0, str(exc), unscored=True)
    if kind.scored is not None and embed is not None:
        return Verdict(*await kind.scored(answers, filled, embed))
    return Verdict(*kind.read(answers, filled, item.options))


def _mean(verdicts: list[Verdict], threshold: float) -> Verdict:
    """The verdicts on each of a list of values as one: the mean score, the reasons one after another."""
    score = sum(v.score for v in verdicts) / len(verdicts)
    return Verdict(score >= threshold, score, "\n\n".join(v.reason for v in verdicts),
                   all(v.unscored for v in verdicts))


async def select_best(item: Assert, outputs: list[str], inputs: Mapping[str, str], ask: Ask,
                      tokens: int | None = None) -> list[Verdict]:
    """The judge's pick among a test's ``outputs`` (one per setting): a verdict for each; ``tokens``: the run's
    grader budget (:func:`step_tokens`)."""
    if len(outputs) < 2:
        return [Verdict(False, 0.0, "select-best needs at least two outputs of the test to compare")] * len(outputs)
    kind, custom = GRADED["select-best"], tuple(item.options.get("rubricPrompt", ()))
    filled = {**inputs, "outputs": numbered_outputs(outputs)}
    schema = select_schema(len(outputs))
    try:
        answer = await _answer(ask, step_text(kind, 0, filled, custom), schema,
                               step_tokens(kind.steps[0], item, tokens))
    except (JudgeError, BatchInputError) as exc:
        return [Verdict(False, 0.0, str(exc), unscored=True)] * len(outputs)
    return [Verdict(*g) for g in select_grades(answer, len(outputs), str(item.value))]


def max_score(item: Assert, checked: Sequence[Sequence[tuple[Assert, AssertResult]]]) -> list[Verdict]:
    """max-score's pick among a test's outputs, from each output's (assert, result) pairs (no judge): a verdict
    for each. An assert counts under its promptfoo type (not-contains...), select-best and max-score not at all."""
    scored = [[(("not-" if a.negate else "") + a.kind, result.value) for a, result in pairs
               if a.kind not in COMPARING] for pairs in checked]
    if len(scored) < 2:
        return [Verdict(False, 0.0, "max-score needs at least two outputs of the test to compare")] * len(scored)
    return [Verdict(*g) for g in max_score_grades(scored, item.options["max_score"])]
