"""llm-rubric: a model judges an output against a rubric.

The judge is the loaded model, asked through the run's chat template with the judge
prompt (shown and editable in the Batch tab; ``{{output}}`` and ``{{rubric}}`` are
filled in), greedily, and constrained to answer JSON ``{"reason", "pass", "score"}``
(structured output), so its answer can always be read. A small model is a weak
judge: the verdict and its reason are stored with the row to be checked by eye.

Or the judge is a remote OpenAI-compatible server (``/chat/completions``, with the
same JSON schema as ``response_format``); its API key comes from the environment
variable WORKBENCH_JUDGE_API_KEY or the form, and is never stored with the run.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Callable

import httpx

from webui.batch.asserts import Assert, Verdict
from webui.batch.errors import BatchInputError
from webui.batch.prompts import render, template_variables
from webui.engine import GenerationRequest, SamplingParams

JUDGE_PROMPT = """You are grading an output against a rubric. Read the output, then decide whether the rubric is \
true of it.

<Output>
{{output}}
</Output>

<Rubric>
{{rubric}}
</Rubric>

Answer with JSON only: {"reason": a short reason, "pass": true if the rubric holds and false if not, \
"score": a number from 0 (fails completely) to 1 (holds completely)}."""

# compact JSON (no free whitespace) and a short reason, so the answer always fits the judge's token budget
VERDICT_SCHEMA = {"x-guidance": {"whitespace_flexible": False}, "type": "object", "additionalProperties": False,
                  "required": ["reason", "pass", "score"],
                  "properties": {"reason": {"type": "string", "maxLength": 200}, "pass": {"type": "boolean"},
                                 "score": {"type": "number", "minimum": 0, "maximum": 1}}}
# from_dict: structured_outputs is given as vLLM's {form: value}, which the check turns into (form, text)
JUDGE_PARAMS = SamplingParams.from_dict({"temperature": 0.0, "max_new_tokens": 256,
                                         "structured_outputs": {"json": VERDICT_SCHEMA}})


KEY_VARIABLE = "WORKBENCH_JUDGE_API_KEY"


@dataclass(frozen=True)
class RemoteJudge:
    """An OpenAI-compatible server that judges; ``key`` is not stored with the run."""

    url: str
    model: str = ""
    key: str = ""

    def verdict(self, text: str, timeout: float = 120.0) -> Verdict:
        """Ask the server; a server that fails gives a failing verdict that says why."""
        schema = {k: v for k, v in VERDICT_SCHEMA.items() if k != "x-guidance"}
        body: dict[str, Any] = {"messages": [{"role": "user", "content": text}], "temperature": 0, "max_tokens": 256,
                                "response_format": {"type": "json_schema",
                                                    "json_schema": {"name": "verdict", "schema": schema}}}
        if self.model:
            body["model"] = self.model
        key = self.key or os.environ.get(KEY_VARIABLE, "")
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        try:
            answer = httpx.post(self.url.rstrip("/") + "/chat/completions", json=body, headers=headers,
                                timeout=timeout)
        except httpx.HTTPError as exc:
            return Verdict(False, 0.0, f"the judge server {self.url} could not be reached: {exc}")
        if answer.status_code != 200:
            return Verdict(False, 0.0, f"the judge server answered {answer.status_code}: {answer.text[:200]}")
        try:
            content = answer.json()["choices"][0]["message"]["content"] or ""
        except (ValueError, KeyError, IndexError, TypeError):
            return Verdict(False, 0.0, "the judge server's answer is not a chat completion")
        return read_verdict(content) or Verdict(False, 0.0, f"the judge's answer is not the verdict JSON: "
                                                            f"{content[:120]!r}")

    def to_dict(self) -> dict[str, str]:
        return {"url": self.url, "model": self.model}  # never the key


def check_judge_prompt(text: str) -> str:
    """The judge prompt, checked: it must hold {{output}} and {{rubric}} and nothing else."""
    names = set(template_variables(text or ""))
    if names != {"output", "rubric"}:
        raise BatchInputError("the judge prompt must hold {{output}} and {{rubric}} (and no other placeholder); "
                              f"it has {', '.join(sorted(names)) or 'none'}")
    return text


def rubrics(asserts: list[Assert]) -> list[str]:
    return list(dict.fromkeys(str(a.value) for a in asserts if a.kind == "llm-rubric"))


def judge_request(render_chat: Callable[[str], str], judge_prompt: str, output: str, rubric: str) -> GenerationRequest:
    """The request asking the judge about ``output`` (``render_chat`` writes a user message as the model reads it)."""
    text = render(judge_prompt, {"output": output, "rubric": rubric})
    return GenerationRequest(render_chat(text), JUDGE_PARAMS, add_special_tokens=False)


def read_verdict(text: str) -> Verdict | None:
    """The judge's answer as a Verdict; None when it cannot be read (cut off by the token limit, say)."""
    try:
        data: Any = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("pass"), bool):
        return None
    score = data.get("score")
    score = float(score) if isinstance(score, (int, float)) and not isinstance(score, bool) else float(data["pass"])
    return Verdict(data["pass"], max(0.0, min(1.0, score)), str(data.get("reason", "")))
