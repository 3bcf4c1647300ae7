"""Structured output's cost: decode speed with a JSON schema vs without, a batch of 16 at once.

The same 16 chat prompts run through the engine together, sampled (temperature
1.0, fixed seeds), once constrained by a JSON schema and once free, alternating,
with one thread count for both. Tokens/s counts every generated token over the
wall time of the batch (prefill included, the same for both). The last line is
`ratio: X` = constrained tok/s / free tok/s (target >= 0.8).

    .venv/bin/python bench/structured.py [--prompts 16] [--new-tokens 64] [--reps 3] [--threads 1]
"""

from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).resolve().parent.parent))  # the repository root: loaders/, webui/

import argparse
import json
import statistics
import time

import torch

from loaders.base import LoadOptions
from loaders.hf import ensure_converted
from loaders.registry import default_registry
from webui.config import AppConfig
from webui.engine import Engine, EngineConfig, GenerationRequest, SamplingParams
from webui.catalog import DEFAULT_MODEL, default_model_gguf

SCHEMA = {"type": "object", "additionalProperties": False, "required": ["name", "age", "role", "skills"],
          "properties": {"name": {"type": "string", "maxLength": 40},
                         "age": {"type": "integer", "minimum": 18, "maximum": 99},
                         "role": {"enum": ["engineer", "artist", "teacher", "farmer"]},
                         "skills": {"type": "array", "items": {"type": "string", "maxLength": 30}, "maxItems": 6}}}
PEOPLE = ["a baker", "a pilot", "a poet", "a nurse", "a chess player", "a gardener", "a sailor", "a librarian"]


def run(engine: Engine, prompts: list[list[int]], params: SamplingParams) -> tuple[float, int]:
    started = time.perf_counter()
    streams = [engine.submit(GenerationRequest(p, params.replace(seed=i))) for i, p in enumerate(prompts)]
    tokens = sum(s.result().usage.completion_tokens for s in streams)
    return time.perf_counter() - started, tokens


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="a tiny run (2 prompts, 4 tokens) that only checks the bench works")
    args = ap.parse_args()
    if args.quick:
        args.prompts, args.new_tokens, args.reps = 2, 4, 1
    torch.set_num_threads(args.threads)
    folder = ensure_converted(default_model_gguf(), AppConfig().converted_dir / DEFAULT_MODEL)
    model = default_registry().get("transformers").load(folder, LoadOptions(device="cpu", threads=args.threads))
    prompts = []
    for i in range(args.prompts):
        text = f"Describe {PEOPLE[i % len(PEOPLE)]} as a JSON object with name, age, role and skills."
        rendered = model.tokenizer.apply_chat_template([{"role": "user", "content": text}])
        prompts.append(model.tokenizer.encode(rendered, add_special_tokens=False))
    free = SamplingParams(temperature=1.0, max_new_tokens=args.new_tokens)
    constrained = free.replace(structured_outputs={"json": SCHEMA})
    engine = Engine(model, EngineConfig(max_running=args.prompts, prefix_cache_mb=0))
    try:
        run(engine, prompts, constrained)  # warm-up: compiles the schema, builds llguidance's tokenizer
        speeds: dict[str, list[float]] = {"free": [], "json schema": []}
        for _ in range(args.reps):
            for name, params in (("free", free), ("json schema", constrained)):
                seconds, tokens = run(engine, prompts, params)
                speeds[name].append(tokens / seconds)
        valid = 0
        for i, p in enumerate(prompts):  # informational: the constrained replies parse
            text = engine.generate(GenerationRequest(p, constrained.replace(seed=i))).text
            try:
                json.loads(text)
                valid += 1
            except ValueError:
                pass
    finally:
        engine.close()
    for name, values in speeds.items():
        print(f"{name:12} {statistics.median(values):8.1f} tok/s  (median of {len(values)})")
    print(f"constrained replies that parse as JSON within {args.new_tokens} tokens: {valid}/{len(prompts)}")
    print(f"ratio: {statistics.median(speeds['json schema']) / statistics.median(speeds['free']):.3f}")


if __name__ == "__main__":
    main()
