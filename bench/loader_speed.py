"""Tokens/s per loader on the default model, one stream and a batch of 16, against llama.cpp's own one stream.

Every loader runs through the same Engine with the same greedy settings (exactly N
new tokens per request, one thread count for everything):

* transformers: the fp32 safetensors folder converted once from the package's GGUF;
* llamacpp: the package's GGUF (Q4_1) as is, sequences batched through llama.cpp's batch API;
* gptq: a 4-bit GPTQ folder made by `python launch.py quantize gptq SmolLM2-135M-Instruct --bits 4`
  (looked for in the user data dir's models; skipped, with the command to make it, when absent);
* remote: our own API server (`launch.py --nowebui` with the default model, a subprocess on a free
  port) through the remote loader.

The baseline is the raw library call: llama-cpp-python's own ``Llama.generate`` on the same
GGUF and prompt, one stream (``--flash-attn`` as the loader has it). A loader whose backend is
not installed is skipped with the reason. Prints a table; ratios are tokens/s over the baseline's.

    .venv/bin/python bench/loader_speed.py [--threads 1] [--new-tokens 32] [--batch 16] [--only transformers,llamacpp]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from loaders.base import LoaderError, LoadOptions, missing_module  # noqa: E402
from loaders.registry import default_registry  # noqa: E402
from webui.config import AppConfig  # noqa: E402
from webui.engine import Engine, EngineConfig, GenerationRequest, SamplingParams  # noqa: E402
from loaders.hf import ensure_converted  # noqa: E402
from webui.catalog import DEFAULT_MODEL, default_model_gguf  # noqa: E402

QUESTIONS = ["Write a short poem about the sea.", "Explain why the sky is blue.", "Describe a city at night.",
             "Give three tips for writing clearly.", "Tell a story about a robot.", "What is bread made of?"]
LOADERS = ("transformers", "llamacpp", "gptq", "remote")


def prompts_for(model, n: int) -> list[str]:
    return [model.tokenizer.apply_chat_template([{"role": "user", "content": QUESTIONS[i % len(QUESTIONS)]}])
            for i in range(n)]


def engine_rates(model, prompts: list[str], n_new: int, batch: int) -> tuple[float, float]:
    """(tokens/s of one stream, tokens/s of ``batch`` streams submitted at once)."""
    params = SamplingParams(temperature=0, max_new_tokens=n_new, min_new_tokens=n_new, ban_eos=True)
    engine = Engine(model, EngineConfig(max_running=batch, max_waiting=batch))
    try:
        def request(prompt: str) -> GenerationRequest:
            return GenerationRequest(prompt, params, add_special_tokens=False,
                                     messages=[{"role": "user", "content": QUESTIONS[0]}])

        engine.generate(GenerationRequest(prompts[0], SamplingParams(temperature=0, max_new_tokens=2),
                                          add_special_tokens=False))  # warm-up
        start = time.perf_counter()
        one = engine.generate(request(prompts[0]))
        single = one.usage.completion_tokens / (time.perf_counter() - start)
        start = time.perf_counter()
        streams = [engine.submit(request(p)) for p in prompts[:batch]]
        made = sum(s.result().usage.completion_tokens for s in streams)
        return single, made / (time.perf_counter() - start)
    finally:
        engine.close()


def llama_cpp_baseline(gguf: Path, prompt: str, n_new: int, threads: int) -> float:
    from llama_cpp import Llama

    llm = Llama(str(gguf), n_ctx=2048, n_threads=threads, verbose=False, flash_attn=True)
    tokens = llm.tokenize(prompt.encode(), add_bos=True, special=True)
    for _ in zip(range(2), llm.generate(tokens, top_k=1, temp=0.0)):  # warm-up
        pass
    llm.reset()
    start = time.perf_counter()
    made = 0
    for _ in llm.generate(tokens, top_k=1, temp=0.0, repeat_penalty=1.0):
        made += 1
        if made == n_new:
            break
    rate = made / (time.perf_counter() - start)
    llm.close()
    return rate


def llama_cpp_batched(gguf: Path, prompts: list[str], n_new: int, threads: int) -> float:
    """An upper bound for a batching loader: llama.cpp's C API by hand, every prompt its own sequence in one
    context, all prefilled in one call (not timed), then one llama_decode per step for all of them (greedy by
    argmax); tokens/s of those decode steps alone."""
    import llama_cpp as lib
    import numpy as np

    lib.llama_backend_init()
    model = lib.llama_model_load_from_file(str(gguf).encode(), lib.llama_model_default_params())
    vocab = lib.llama_model_get_vocab(model)
    n_vocab = lib.llama_vocab_n_tokens(vocab)
    params = lib.llama_context_default_params()
    params.n_ctx, params.n_batch, params.n_seq_max, params.kv_unified = 16384, 2048, len(prompts) + 1, True
    params.n_threads = params.n_threads_batch = threads
    ctx = lib.llama_init_from_model(model, params)
    batch = lib.llama_batch_init(2048, 0, 1)

    def decode(feeds: list[tuple[int, int, list[int]]]) -> list[int]:
        batch.n_tokens = 0
        for seq, start, ids in feeds:
            for offset, token in enumerate(ids):
                i = batch.n_tokens
                batch.token[i], batch.pos[i], batch.n_seq_id[i] = token, start + offset, 1
                batch.seq_id[i][0], batch.logits[i] = seq, offset == len(ids) - 1
                batch.n_tokens += 1
        assert lib.llama_decode(ctx, batch) == 0
        out, row = [], -1
        for _, _, ids in feeds:
            row += len(ids)
            out.append(int(np.ctypeslib.as_array(lib.llama_get_logits_ith(ctx, row), shape=(n_vocab,)).argmax()))
        return out

    tokenized = []
    for text in prompts:
        data = text.encode()
        buf = (lib.llama_token * (len(data) + 8))()
        tokenized.append(list(buf[:lib.llama_tokenize(vocab, data, len(data), buf, len(buf), True, True)]))
    last = decode([(seq, 0, ids) for seq, ids in enumerate(tokenized)])  # every prompt in one call, as the loader
    start = time.perf_counter()
    for step in range(n_new - 1):
        last = decode([(seq, len(ids) + step, [last[seq]]) for seq, ids in enumerate(tokenized)])
    rate = (n_new - 1) * len(prompts) / (time.perf_counter() - start)
    lib.llama_batch_free(batch)
    lib.llama_free(ctx)
    lib.llama_model_free(model)
    return rate


def load(name: str, threads: int, user_data: Path, stack: list) -> tuple[object | None, str]:
    """The loaded model, or None and why it is skipped."""
    registry = default_registry()
    options = LoadOptions(device="cpu", threads=threads)
    gguf = default_model_gguf()
    if name == "transformers":
        folder = ensure_converted(gguf, AppConfig().converted_dir / DEFAULT_MODEL)
        return registry.get(name).load(folder, options), "fp32"
    if name == "llamacpp":
        return registry.get(name).load(gguf, options), "Q4_1 GGUF"
    if name == "gptq":
        folder = AppConfig().models_dir / f"{DEFAULT_MODEL}-gptq-4bit"
        if not folder.is_dir():
            return None, f"no {folder}; make it: python launch.py quantize gptq {DEFAULT_MODEL} --bits 4"
        return registry.get(name).load(folder, options), "GPTQ 4-bit"
    from tests.e2e.server import free_port, running_server, user_data_with_default_model

    folder = ensure_converted(gguf, AppConfig().converted_dir / DEFAULT_MODEL)
    port = free_port()
    server = running_server(user_data_with_default_model(user_data, folder), "--nowebui", "--api-port", str(port),
                            "--threads", str(threads), "--max-running", "32")
    server.__enter__()
    stack.append(server)
    return registry.get("remote").connect(f"http://127.0.0.1:{port}/v1"), "our API, fp32 transformers"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--only", default=",".join(LOADERS), help=f"comma-separated subset of {', '.join(LOADERS)}")
    ap.add_argument("--quick", action="store_true", help="a tiny run (4 tokens, 2 streams) that only checks the bench works")
    args = ap.parse_args()
    if args.quick:
        args.new_tokens, args.batch = 4, 2
    os.environ["WORKBENCH_TEST_THREADS"] = str(args.threads)
    import torch

    torch.set_num_threads(args.threads)
    gguf = default_model_gguf()
    print(f"default model {DEFAULT_MODEL}, threads {args.threads}, {args.new_tokens} new tokens per stream, "
          f"greedy, batch {args.batch}")
    baseline = None
    if missing_module(["llama_cpp"]) is None:
        probe = default_registry().get("llamacpp").load(gguf, LoadOptions(threads=args.threads))
        prompt = prompts_for(probe, 1)[0]
        probe.close()
        baseline = llama_cpp_baseline(gguf, prompt, args.new_tokens, args.threads)
        print(f"baseline: llama-cpp-python Llama.generate, one stream: {baseline:.1f} tok/s")
        probe = default_registry().get("llamacpp").load(gguf, LoadOptions(threads=args.threads))
        batch_prompts = prompts_for(probe, args.batch)
        probe.close()
        ceiling = llama_cpp_batched(gguf, batch_prompts, args.new_tokens, args.threads)
        print(f"upper bound: llama.cpp's C API by hand, {args.batch} sequences in one llama_decode per step, "
              f"decode steps only: {ceiling:.1f} tok/s")
    else:
        print("baseline: skipped (llama-cpp-python is not installed: python launch.py install llamacpp)")
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-loaders-") as tmp:
        stack: list = []
        try:
            for name in args.only.split(","):
                try:
                    model, what = load(name, args.threads, Path(tmp), stack)
                except LoaderError as exc:
                    model, what = None, str(exc)
                if model is None:
                    rows.append((name, f"skipped: {what}", None, None))
                    continue
                single, batched = engine_rates(model, prompts_for(model, args.batch) if name != "remote"
                                               else [QUESTIONS[0]] * args.batch, args.new_tokens, args.batch)
                model.close()
                rows.append((name, what, single, batched))
        finally:
            for server in stack:
                server.__exit__(None, None, None)
    ratio = (lambda v: f"{v / baseline:.2f}x") if baseline else (lambda v: "-")
    print(f"\n| loader | model | 1 stream tok/s | vs llama.cpp 1 stream | {args.batch} streams tok/s "
          f"| vs llama.cpp 1 stream |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    if baseline:
        print(f"| llama-cpp-python (raw) | Q4_1 GGUF | {baseline:.1f} | 1.00x | {ceiling:.1f} (C API, decode only) | "
              f"{ratio(ceiling)} |")
    for name, what, single, batched in rows:
        if single is None:
            print(f"| {name} | {what} | - | - | - | - |")
        else:
            print(f"| {name} | {what} | {single:.1f} | {ratio(single)} | {batched:.1f} | {ratio(batched)} |")
    # the headline: the llama.cpp loader's batch over raw llama.cpp's one stream (else the first loader measured)
    measured = {name: batched for name, _, single, batched in rows if single is not None}
    headline = measured.get("llamacpp", next(iter(measured.values()), None))
    print(f"ratio: {headline / baseline:.3f}" if headline and baseline else "ratio: nan (no baseline or loader ran)")


if __name__ == "__main__":
    main()
