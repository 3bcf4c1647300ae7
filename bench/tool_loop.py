"""The tool loop's cost: replies that call a tool through webui/chat/tool_loop.py, against the same model turns fed
by hand, side by side in one run.

On the default model (SmolLM2-135M-Instruct, fp32, transformers loader), one engine, greedy, the built-in
``calculate`` tool: a question, a first turn constrained to one call (tool_choice "required"), the call run, its
result given back, a second turn that answers (no tools offered). "By hand" renders both prompts, submits both
turns, reads the call and runs the tool with direct calls; "loop" does the same through ``run_tool_loop``. Both
times leave out the tool's own run time. Runs alternate (by hand, loop, ...) after one warm-up of each; the replies
must be the same both ways (checked).

The last line is ``ratio: X`` = by-hand seconds / loop seconds (medians); target >= 0.95 (the loop adds at most
5 %).

    .venv/bin/python bench/tool_loop.py [--threads 1] [--reps 5] [--answer-tokens 24] [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from loaders.base import LoadOptions  # noqa: E402
from loaders.hf import ensure_converted  # noqa: E402
from loaders.registry import default_registry  # noqa: E402
from webui.catalog import DEFAULT_MODEL, default_model_gguf  # noqa: E402
from webui.chat.tool_loop import run_tool_loop  # noqa: E402
from webui.chat.tools import ToolPlan, plan_tools, read_calls, render_with_tools  # noqa: E402
from webui.config import AppConfig  # noqa: E402
from webui.engine import Engine, EngineConfig, GenerationRequest, SamplingParams  # noqa: E402
from webui.tools import ToolBox  # noqa: E402

CALCULATE = {"type": "function", "function": {
    "name": "calculate", "description": "Evaluate an arithmetic expression",
    "parameters": {"type": "object", "required": ["expression"], "properties": {
        "expression": {"type": "string", "pattern": "^[0-9 +*/().-]{1,40}$"}}}}}
QUESTION = [{"role": "user", "content": "What is 17 * 23? Use the calculator."}]


class Turns:
    """One model turn as both ways run it: render the history (with the tools offered, or none), generate."""

    def __init__(self, engine: Engine, model, answer_tokens: int) -> None:
        self.engine, self.model, self.answer_tokens = engine, model, answer_tokens

    def params(self, plan: ToolPlan | None) -> SamplingParams:
        if plan is None:
            return SamplingParams(temperature=0, max_new_tokens=self.answer_tokens, ban_eos=True)
        return SamplingParams(temperature=0, max_new_tokens=96, structured_outputs=plan.grammar())

    def __call__(self, history: list[dict], plan: ToolPlan | None):
        prompt, _ = render_with_tools(self.model.tokenizer, history, plan)
        text = ""
        for event in self.engine.submit(GenerationRequest(prompt, self.params(plan), add_special_tokens=False)):
            text += event.text
            yield text, event


def by_hand(turns: Turns, box: ToolBox, plan: ToolPlan) -> tuple[float, str]:
    """Both turns with direct calls; (seconds without the tool's, the answer)."""
    started = time.perf_counter()
    first = "".join(event.text for event in turns.engine.submit(GenerationRequest(
        render_with_tools(turns.model.tokenizer, QUESTION, plan)[0], turns.params(plan), add_special_tokens=False)))
    _, (call,) = read_calls(first, plan)
    result = box.call(call.name, call.arguments)
    history = QUESTION + [{"role": "assistant", "content": None, "tool_calls": [call.to_dict()]},
                          {"role": "tool", "tool_call_id": call.id, "content": result.text}]
    answer = "".join(event.text for event in turns.engine.submit(GenerationRequest(
        render_with_tools(turns.model.tokenizer, history, None)[0], turns.params(None), add_special_tokens=False)))
    return time.perf_counter() - started - result.seconds, answer


def through_loop(turns: Turns, box: ToolBox, plan: ToolPlan) -> tuple[float, str]:
    """The same through run_tool_loop; (seconds without the tool's, the answer)."""
    started = time.perf_counter()
    *_, last = run_tool_loop(QUESTION, plan, turns, box, max_steps=1)
    assert last.done and len(last.steps) == 1, "the first turn made no call"
    return time.perf_counter() - started - last.tool_seconds, last.text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--answer-tokens", type=int, default=24)
    ap.add_argument("--quick", action="store_true", help="a tiny run that only checks the bench works")
    args = ap.parse_args()
    if args.quick:
        args.reps, args.answer_tokens = 1, 2
    torch.set_num_threads(args.threads)
    model_dir = ensure_converted(default_model_gguf(), AppConfig().converted_dir / DEFAULT_MODEL)
    model = default_registry().get("transformers").load(model_dir, LoadOptions(device="cpu", threads=args.threads))
    print(f"model {model.name}, torch {torch.__version__}, threads {args.threads}")
    engine = Engine(model, EngineConfig(prefix_cache_mb=0))  # every run pays the same prefill
    plan = plan_tools([CALCULATE], "required", False)
    assert plan is not None
    with tempfile.TemporaryDirectory() as home, ToolBox(Path(home) / "tools", Path(home) / "mcp.json") as box:
        try:
            turns = Turns(engine, model, args.answer_tokens)
            by_hand(turns, box, plan), through_loop(turns, box, plan)  # warm-up
            hand, loop, answers = [], [], set()
            for _ in range(args.reps):
                for way, times in ((by_hand, hand), (through_loop, loop)):
                    seconds, answer = way(turns, box, plan)
                    times.append(seconds)
                    answers.add(answer)
        finally:
            engine.close()
    assert len(answers) == 1, f"the two ways answered differently: {answers}"
    print(f"answer: {answers.pop()!r}")
    print(f"by hand: median {statistics.median(hand):.3f} s over {len(hand)} replies")
    print(f"loop:    median {statistics.median(loop):.3f} s over {len(loop)} replies")
    print(f"ratio: {statistics.median(hand) / statistics.median(loop):.3f}")


if __name__ == "__main__":
    main()
