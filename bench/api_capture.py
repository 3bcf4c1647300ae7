"""What keeping every API request costs: API throughput at N concurrent streams with --capture-requests vs without.

Starts two real servers (``python launch.py --nowebui``: the API alone; one with ``--capture-requests``) on the
default model, each with a fresh user data dir, and sends them the same load in turns (off then on, on then off,
... ``--reps`` times each):
``--concurrency`` streaming chat completions at once, greedy, ``ignore_eos``, ``--new-tokens`` each (the streams
of bench/api_concurrency.py). Prints each turn's aggregate tokens/s, how many requests the capturing server kept,
and last ``ratio: X`` = the median over turns of (tok/s with capture / tok/s without) in the same turn: the two
runs of a turn are back to back, so a busy machine's slow spells cancel out better than in a ratio of medians, also
printed (#33's target: at least 0.95).

    .venv/bin/python bench/api_capture.py [--threads 1] [--concurrency 16] [--new-tokens 64] [--reps 3]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sqlite3
import statistics
import sys
import tempfile
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from api_concurrency import (DEFAULT_PROMPT, default_model_dir, level, one_stream,  # noqa: E402  (bench/ is
                             stream_body)  # the script's folder)
from tests.e2e.server import free_port, running_server, user_data_with_default_model  # noqa: E402
from webui.catalog import DEFAULT_MODEL  # noqa: E402


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=1, help="each server's --threads (default 1)")
    p.add_argument("--concurrency", type=int, default=16, help="concurrent streams (default 16)")
    p.add_argument("--new-tokens", type=int, default=64, help="tokens each stream makes (default 64)")
    p.add_argument("--reps", type=int, default=3, help="turns on each server (default 3)")
    p.add_argument("--quick", action="store_true", help="a tiny run (2 streams, 4 tokens, 1 turn each)")
    args = p.parse_args()
    if args.quick:
        args.concurrency, args.new_tokens, args.reps = 2, 4, 1
    return args


async def turns(urls: dict[str, str], args: argparse.Namespace) -> dict[str, list[float]]:
    body = stream_body(DEFAULT_PROMPT, args.new_tokens)
    limits = httpx.Limits(max_connections=args.concurrency + 4, max_keepalive_connections=args.concurrency + 4)
    rates: dict[str, list[float]] = {name: [] for name in urls}
    async with contextlib.AsyncExitStack() as stack:
        clients = {name: await stack.enter_async_context(httpx.AsyncClient(
            base_url=url, timeout=httpx.Timeout(600.0), limits=limits)) for name, url in urls.items()}
        for client in clients.values():
            await one_stream(client, {**body, "max_tokens": 8})  # warm-up
        for rep in range(args.reps):
            for name, client in sorted(clients.items(), reverse=rep % 2 == 1):  # off first, then on first, ...
                rate, wall, _ = await level(client, body, args.concurrency)
                rates[name].append(rate)
                print(f"turn {rep + 1}, capture {name:>3}: {rate:7.2f} tok/s aggregate, {wall:6.2f} s wall")
    return rates


def main() -> None:
    args = parse_args()
    model_dir = default_model_dir()
    with tempfile.TemporaryDirectory(prefix="bench-capture-") as tmp, contextlib.ExitStack() as servers:
        urls, kept_in = {}, None
        for name, extra in (("off", ()), ("on", ("--capture-requests",))):
            user_data = user_data_with_default_model(Path(tmp) / name / "data", model_dir)
            port = free_port()
            servers.enter_context(running_server(user_data, "--nowebui", "--api-port", str(port), "--threads",
                                                 str(args.threads), "--max-running", str(max(16, args.concurrency)),
                                                 *extra))
            urls[name] = f"http://127.0.0.1:{port}"
            kept_in = user_data / "workbench.sqlite3" if extra else kept_in
        print(f"two servers: {DEFAULT_MODEL}, --threads {args.threads}, {args.concurrency} streams of "
              f"{args.new_tokens} tokens (greedy, ignore_eos), {args.reps} turn(s) each")
        rates = asyncio.run(turns(urls, args))
        assert kept_in is not None
        with sqlite3.connect(kept_in) as db:
            kept = db.execute("SELECT count(*) FROM api_requests").fetchone()[0]
    off, on = statistics.median(rates["off"]), statistics.median(rates["on"])
    paired = statistics.median(b / a for a, b in zip(rates["off"], rates["on"]))
    print(f"\ncapture off: {off:.2f} tok/s, capture on: {on:.2f} tok/s (median of {args.reps}, ratio of medians "
          f"{on / off:.3f}); the capturing server kept {kept} requests")
    print(f"ratio: {paired:.3f}")


if __name__ == "__main__":
    main()
