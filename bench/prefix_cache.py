"""The prefix cache: time to first token and total time with the cache off vs on, side by side in one run.

On the default model (SmolLM2-135M-Instruct, fp32 through the transformers loader),
one engine with ``prefix_cache_mb=0`` and one with the cache on, same thread count:

1. chat: a conversation of N turns, each user message ~150 tokens, greedy replies;
   time to first token of the last turn (the whole history as its prompt), off vs on;
2. regenerate: the same ~1,000-token prompt a second time; time to first token, off vs on;
3. batch grid: one ~500-token prompt x 4 settings x 4 samples (seeded), 32 new tokens each,
   submitted at once; total time off vs on (and whether the outputs are identical);
4. API: 16 concurrent streams through a real server (``launch.py --api``) whose chats share one
   long system prompt; time-to-first-token p95 over one stream's (target <= 3).

The outputs with the cache on must equal those with it off (checked and printed). The
last line is ``ratio: X``, the chat-turn ratio (TTFT off / on; target >= 4).

    .venv/bin/python bench/prefix_cache.py [--threads 1] [--turns 8] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from api_concurrency import one_stream, percentile  # noqa: E402  (bench/ is on sys.path when run as a script)
from loaders.base import LoadOptions  # noqa: E402
from loaders.registry import default_registry  # noqa: E402
from tests.e2e.server import free_port, running_server, user_data_with_default_model  # noqa: E402
from webui.config import AppConfig  # noqa: E402
from webui.engine import Engine, EngineConfig, GenerationRequest, SamplingParams  # noqa: E402
from loaders.hf import ensure_converted  # noqa: E402
from webui.catalog import DEFAULT_MODEL, default_model_gguf  # noqa: E402

WORDS = ("river stone lantern orchard harbor meadow copper violin garden thunder silver canyon paper window "
         "forest signal marble ladder comet island").split()


def filler(model, tokens: int, seed: int) -> str:
    """Plain text of about ``tokens`` tokens, different for each seed."""
    words = [WORDS[(seed * 7 + i * (seed + 3)) % len(WORDS)] for i in range(tokens)]
    text = " ".join(words)
    ids = model.tokenizer.encode(text, add_special_tokens=False)[:tokens]
    return model.tokenizer.decode(ids)


def ttft(engine: Engine, prompt: str, params: SamplingParams) -> tuple[float, list[int], int]:
    """Seconds to the first token, the tokens, and the prompt tokens served from the cache."""
    start = time.perf_counter()
    first = None
    tokens: list[int] = []
    cached = 0
    for event in engine.submit(GenerationRequest(prompt, params, add_special_tokens=False)):
        if first is None and event.token_ids:
            first = time.perf_counter() - start
        tokens += event.token_ids
        if event.usage is not None:
            cached = event.usage.cached_tokens
    return first or 0.0, tokens, cached


def chat(engines: dict[str, Engine], model, turns: int, user_tokens: int, reply_tokens: int) -> float:
    params = SamplingParams(temperature=0, max_new_tokens=reply_tokens)
    history = [{"role": "system", "content": "You are a helpful assistant."}]
    for turn in range(turns):
        history.append({"role": "user", "content": f"Remember these words: {filler(model, user_tokens, turn)}"})
        prompt = model.tokenizer.apply_chat_template(history)
        last = turn == turns - 1
        times, outputs = {}, {}
        for name in (("off", "on") if last else ("on",)):  # the off engine has no history to keep
            times[name], outputs[name], cached = ttft(engines[name], prompt, params)
        history.append({"role": "assistant", "content": model.tokenizer.decode(outputs["on"])})
    n = len(model.tokenizer.encode(prompt, add_special_tokens=False))
    print(f"chat, turn {turns} ({n} prompt tokens, {cached} from the cache): TTFT off {times['off']:.3f} s, "
          f"on {times['on']:.3f} s, ratio {times['off'] / times['on']:.2f} (target >= 4); "
          f"same reply: {outputs['off'] == outputs['on']}")
    return times["off"] / times["on"]


def regenerate(engines: dict[str, Engine], model, prompt_tokens: int) -> float:
    prompt = filler(model, prompt_tokens, 99)
    params = SamplingParams(temperature=0, max_new_tokens=4)
    off = [ttft(engines["off"], prompt, params) for _ in range(2)]
    on = [ttft(engines["on"], prompt, params) for _ in range(2)]
    ratio = off[1][0] / on[1][0]
    print(f"regenerate a {prompt_tokens}-token prompt: TTFT off {off[1][0]:.3f} s, on {on[1][0]:.3f} s "
          f"({on[1][2]} tokens from the cache), ratio {ratio:.2f} (target >= 10); same tokens: {off[1][1] == on[1][1]}")
    return ratio


def grid(engines: dict[str, Engine], model, prompt_tokens: int, new_tokens: int, settings: int, samples: int) -> float:
    prompt = filler(model, prompt_tokens, 5)
    params = [SamplingParams(temperature=0.3 + 0.2 * s, top_p=0.9, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                             seed=100 + k) for s in range(settings) for k in range(samples)]
    seconds, outputs = {}, {}
    for name in ("off", "on"):
        engines[name].generate(GenerationRequest("warm-up", SamplingParams(max_new_tokens=1)))
        start = time.perf_counter()
        streams = [engines[name].submit(GenerationRequest(prompt, p, add_special_tokens=False)) for p in params]
        outputs[name] = [s.result().token_ids for s in streams]
        seconds[name] = time.perf_counter() - start
    ratio = seconds["off"] / seconds["on"]
    print(f"batch grid, {prompt_tokens}-token prompt x {settings} settings x {samples} samples, {new_tokens} new tokens: "
          f"off {seconds['off']:.2f} s, on {seconds['on']:.2f} s, ratio {ratio:.2f} (target >= 2); "
          f"same outputs: {outputs['off'] == outputs['on']}")
    return ratio


async def api_streams(base_url: str, system: str, streams: int, new_tokens: int) -> tuple[float, float]:
    def body(i: int) -> dict:
        return {"model": DEFAULT_MODEL, "max_tokens": new_tokens, "temperature": 0, "ignore_eos": True,
                "stream": True, "stream_options": {"include_usage": True},
                "messages": [{"role": "system", "content": system},
                             {"role": "user", "content": f"Question {i}: which of the words comes {i + 1}th?"}]}

    limits = httpx.Limits(max_connections=streams + 4, max_keepalive_connections=streams + 4)
    async with httpx.AsyncClient(base_url=base_url, timeout=httpx.Timeout(600.0), limits=limits) as client:
        await one_stream(client, body(999))  # the server reads the system prompt once
        single = statistics.median([(await one_stream(client, body(100 + i))).ttft for i in range(3)])
        results = await asyncio.gather(*(one_stream(client, body(i)) for i in range(streams)))
    return single, percentile([r.ttft for r in results], 95)


def api(model_dir: Path, model, threads: int, streams: int, system_tokens: int, new_tokens: int) -> float:
    system = f"You are a careful assistant. Use these words when you answer: {filler(model, system_tokens, 42)}"
    with tempfile.TemporaryDirectory(prefix="bench-prefix-") as tmp:
        user_data = user_data_with_default_model(Path(tmp) / "data", model_dir)
        port = free_port()
        with running_server(user_data, "--nowebui", "--api-port", str(port), "--threads", str(threads),
                            "--max-running", str(max(16, streams))):
            single, p95 = asyncio.run(api_streams(f"http://127.0.0.1:{port}", system, streams, new_tokens))
    ratio = p95 / single
    print(f"API, {streams} concurrent streams sharing a {system_tokens}-token system prompt: one stream's TTFT "
          f"{single:.3f} s, p95 of {streams} {p95:.3f} s, ratio {ratio:.2f} (target <= 3)")
    return ratio


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--turns", type=int, default=8)
    ap.add_argument("--streams", type=int, default=16)
    ap.add_argument("--skip-api", action="store_true", help="leave out the API part (it starts a server)")
    ap.add_argument("--quick", action="store_true", help="a tiny run that only checks the bench works")
    args = ap.parse_args()
    sizes = dict(user=150, reply=16, regen=1000, grid=500, grid_new=32, settings=4, samples=4, system=400)
    if args.quick:
        args.turns, args.streams = 2, 2
        sizes = dict(user=20, reply=2, regen=40, grid=40, grid_new=2, settings=2, samples=1, system=40)
    torch.set_num_threads(args.threads)
    model_dir = ensure_converted(default_model_gguf(), AppConfig().converted_dir / DEFAULT_MODEL)
    model = default_registry().get("transformers").load(model_dir, LoadOptions(device="cpu", threads=args.threads))
    print(f"model {model.name}, torch {torch.__version__}, threads {args.threads}")
    engines = {"off": Engine(model, EngineConfig(prefix_cache_mb=0)), "on": Engine(model, EngineConfig())}
    try:
        chat_ratio = chat(engines, model, args.turns, sizes["user"], sizes["reply"])
        regenerate(engines, model, sizes["regen"])
        grid(engines, model, sizes["grid"], sizes["grid_new"], sizes["settings"], sizes["samples"])
        print(engines["on"].stats().prefix_cache.describe())
    finally:
        for engine in engines.values():
            engine.close()
    if not args.skip_api:
        api(model_dir, model, args.threads, args.streams, sizes["system"], sizes["grid_new"])
    print(f"ratio: {chat_ratio:.3f}")


if __name__ == "__main__":
    main()
