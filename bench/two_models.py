"""Two loaded models in one batch run (the `model` axis) vs the same two models run one after the other.

Both models are the default model, fp32 through transformers, loaded twice under two names (the second from a
models-dir link), each on its own engine. 32 chat prompts, greedy, exactly N new tokens, the response cache and
the prefix cache off so every run generates everything. One run with `model=A,B` against two runs (`model=A`,
then `model=B`), alternated `--reps` times; the outputs of each model must be the same both ways. The last line
is `ratio: X` = one-after-the-other seconds / one-run seconds (the target is >= 1.3).

    .venv/bin/python bench/two_models.py [--prompts 32] [--new-tokens 32] [--threads 1] [--reps 2]
"""

from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).resolve().parent.parent))  # the repository root: loaders/, webui/

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch

from loaders.hf import ensure_converted
from webui.batch.run.grid import GridSpec
from webui.batch.run.prompts import parse_lines, PromptRow
from webui.batch.run.runner import BatchJob
from webui.config import AppConfig
from webui.catalog import DEFAULT_MODEL, default_model_gguf
from webui.services import Services

COPY = "SmolLM2-copy"
TOPICS = ["the sea", "a city at night", "bread", "an old clock", "winter", "a robot", "the moon", "coffee"]
SHAPES = ["Say hi.", "Write one sentence about {t}.", "Write a short poem about {t}, with a title.",
          "Describe {t} in detail for a children's book, with colours, sounds and smells."]


def run(services: Services, rows: list[PromptRow], models: list[str], n: int) -> tuple[float, dict[str, list[str]]]:
    """Seconds for one batch run over ``models`` and each model's outputs in prompt order."""
    grid = GridSpec([], {"model": models, "max_new_tokens": [n], "min_new_tokens": [n], "temperature": [0]})
    started = time.perf_counter()
    handle = services.batch_runner.start(BatchJob("bench", rows, grid, use_cache=False))
    handle.wait()
    seconds = time.perf_counter() - started
    assert handle.status == "done", handle.status
    outputs: dict[str, list[str]] = {}
    for row in sorted(handle.rows(), key=lambda r: r.prompt_index):
        outputs.setdefault(row.model, []).append(row.output)
    return seconds, outputs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (each engine's forward uses them)")
    ap.add_argument("--reps", type=int, default=2, help="repetitions of both ways (median)")
    ap.add_argument("--quick", action="store_true", help="a tiny run (4 prompts, 4 tokens) that only checks it works")
    args = ap.parse_args()
    if args.quick:
        args.prompts, args.new_tokens, args.reps = 4, 4, 1
    torch.set_num_threads(args.threads)
    folder = ensure_converted(default_model_gguf(), AppConfig().converted_dir / DEFAULT_MODEL)
    with tempfile.TemporaryDirectory(prefix="bench-two-models-") as tmp:
        config = AppConfig(user_data_dir=Path(tmp), threads=args.threads, device="cpu", max_running=args.prompts,
                           prefix_cache_mb=0, memory_budget_mb=0)
        config.make_dirs()
        (config.converted_dir / DEFAULT_MODEL).symlink_to(folder, target_is_directory=True)
        (config.models_dir / COPY).symlink_to(folder, target_is_directory=True)
        services = Services.create(config)
        try:
            services.models.load(DEFAULT_MODEL)
            services.models.load(COPY, make_current=False)
            models = [DEFAULT_MODEL, COPY]
            rows = parse_lines("\n".join(SHAPES[i % len(SHAPES)].format(t=TOPICS[i % len(TOPICS)])
                                          for i in range(args.prompts)))
            n = args.new_tokens
            print(f"models {', '.join(models)} (transformers, fp32, cpu), torch {torch.__version__}, threads "
                  f"{args.threads}, {len(rows)} chat prompts, {n} new tokens each, greedy")
            run(services, rows[:2], models, 2)  # warm-up
            together, apart = [], []
            for _ in range(args.reps):
                t_apart, seq_out = 0.0, {}
                for model in models:
                    seconds, out = run(services, rows, [model], n)
                    t_apart += seconds
                    seq_out.update(out)
                t_together, both_out = run(services, rows, models, n)
                together.append(t_together)
                apart.append(t_apart)
                assert both_out == seq_out, "each model's outputs differ between the two ways"
        finally:
            services.close()
    total = 2 * n * len(rows)
    print(f"{'run':44} {'seconds':>8} {'tokens/s':>9}")
    for name, seconds in (("two runs, one model after the other", statistics.median(apart)),
                          ("one run, both models (model axis)", statistics.median(together))):
        print(f"{name:44} {seconds:8.2f} {total / seconds:9.1f}")
    print("outputs of each model equal both ways: yes")
    print(f"ratio: {statistics.median(apart) / statistics.median(together):.3f}")


if __name__ == "__main__":
    main()
