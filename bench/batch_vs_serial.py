"""Continuous batching: 32 chat prompts of mixed lengths through the engine at once vs one after another.

Also the engine's batch against raw transformers `model.generate` on the same
prompts as one left-padded batch. Greedy, a fixed number of new tokens, one
thread count for all. Prints a table; the last line is `ratio: X`
(engine batched tokens/s / engine serial tokens/s).

    .venv/bin/python bench/batch_vs_serial.py [--prompts 32] [--new-tokens 64] [--threads 1]
"""

from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).resolve().parent.parent))  # the repository root: loaders/, webui/

import argparse
import statistics
import time

import torch

from loaders.base import LoadOptions
from loaders.registry import default_registry
from webui.config import AppConfig
from webui.engine import Engine, EngineConfig, GenerationRequest, SamplingParams
from loaders.hf import ensure_converted
from webui.catalog import DEFAULT_MODEL, default_model_gguf

TOPICS = ["the sea", "a city at night", "bread", "an old clock", "winter", "a robot", "the moon", "coffee"]
SHAPES = ["Say hi.", "Write one sentence about {t}.", "Write a short poem about {t}, with a title.",
          "Describe {t} in detail for a children's book, with colours, sounds and smells, in a few paragraphs."]


def chat_prompts(model, n: int) -> list[list[int]]:
    out = []
    for i in range(n):
        text = SHAPES[i % len(SHAPES)].format(t=TOPICS[i % len(TOPICS)])
        rendered = model.tokenizer.apply_chat_template([{"role": "user", "content": text}])
        out.append(model.tokenizer.encode(rendered, add_special_tokens=False))
    return out


def run_engine(engine: Engine, prompts, params, together: bool) -> tuple[float, list[list[int]]]:
    started = time.perf_counter()
    if together:
        streams = [engine.submit(GenerationRequest(p, params)) for p in prompts]
        results = [s.result() for s in streams]
    else:
        results = [engine.generate(GenerationRequest(p, params)) for p in prompts]
    return time.perf_counter() - started, [r.token_ids for r in results]


def run_generate(model, prompts, n_new: int) -> tuple[float, list[list[int]]]:
    width = max(len(p) for p in prompts)
    pad = min(model.tokenizer.eos_token_ids)
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    started = time.perf_counter()
    with torch.inference_mode():
        out = model.model.generate(ids, attention_mask=mask, max_new_tokens=n_new, min_new_tokens=n_new,
                                   do_sample=False, pad_token_id=pad)
    return time.perf_counter() - started, out[:, width:].tolist()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=1, help="repetitions of the batched runs (median)")
    ap.add_argument("--quick", action="store_true", help="a tiny run (4 prompts, 4 tokens) that only checks the bench works")
    args = ap.parse_args()
    if args.quick:
        args.prompts, args.new_tokens, args.reps = 4, 4, 1
    torch.set_num_threads(args.threads)
    folder = ensure_converted(default_model_gguf(), AppConfig().converted_dir / DEFAULT_MODEL)
    model = default_registry().get("transformers").load(folder, LoadOptions(device="cpu", threads=args.threads))
    prompts = chat_prompts(model, args.prompts)
    n = args.new_tokens
    params = SamplingParams(temperature=0, max_new_tokens=n, min_new_tokens=n)
    # The same prompts run several times: the prefix cache is off so each run pays the same prefill.
    engine = Engine(model, EngineConfig(max_running=args.prompts, max_batch_tokens=4096, prefill_chunk=1024,
                                        prefix_cache_mb=0))
    total = n * len(prompts)
    print(f"model {model.name}, torch {torch.__version__}, threads {args.threads}, {len(prompts)} prompts "
          f"({min(map(len, prompts))}-{max(map(len, prompts))} tokens), {n} new tokens each, greedy")
    run_engine(engine, prompts[:2], SamplingParams(temperature=0, max_new_tokens=4), True)  # warm-up
    batched, gen = [], []
    for _ in range(args.reps):  # alternate the two batched runs
        t_engine, engine_tokens = run_engine(engine, prompts, params, together=True)
        t_gen, gen_tokens = run_generate(model, prompts, n)
        batched.append(t_engine)
        gen.append(t_gen)
    t_serial, serial_tokens = run_engine(engine, prompts, params, together=False)
    engine.close()
    same_serial = sum(a == b for a, b in zip(engine_tokens, serial_tokens))
    same_generate = sum(a == b for a, b in zip(engine_tokens, gen_tokens))
    rows = [("engine, one after another", t_serial), ("engine, all at once (batched)", statistics.median(batched)),
            ("transformers generate, padded batch", statistics.median(gen))]
    print(f"{'run':40} {'seconds':>8} {'tokens/s':>9}")
    for name, seconds in rows:
        print(f"{name:40} {seconds:8.2f} {total / seconds:9.1f}")
    print(f"batched outputs equal to serial: {same_serial}/{len(prompts)}; "
          f"equal to generate's padded batch: {same_generate}/{len(prompts)}")
    print(f"engine batched / transformers generate batch: {statistics.median(gen) / statistics.median(batched):.3f}")
    print(f"ratio: {t_serial / statistics.median(batched):.3f}")


if __name__ == "__main__":
    main()
