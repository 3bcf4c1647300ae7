"""A batch job beside a chat: the chat's time to first token alone vs while a batch of chat requests runs (#45).

Starts one real server (``python launch.py --nowebui``: the API alone) on the default model with a fresh user data
dir, then:

1. **alone**: ``--chats`` streaming chat completions, one after another, each making ``--chat-tokens`` tokens;
   each one's time to first token (TTFT).
2. **beside a batch**: uploads a JSONL of ``--rows`` greedy chat requests (varied questions, ``--row-tokens``
   tokens each) through ``/v1/files``, starts it with ``/v1/batches``, waits until its first rows are done, then
   sends the same chats one after another while the batch is still in progress (a chat that ends after the batch
   has finished is not counted; the bench says how many were).
3. **one by one**: once the batch has completed, every row is sent again alone, and its reply must equal the
   batch's (greedy: the batch runs each row exactly as the same request sent alone). A difference ends the bench.

Last line ``ratio: X`` = median chat TTFT alone / median chat TTFT beside the batch; #45's target is at least 0.67
(a chat at most 1.5x slower to start while a batch runs: batch rows run at background priority, never take the
engine's last free slot, and pause while a chat's prompt is read).

    .venv/bin/python bench/api_batch.py [--threads 1] [--rows 100] [--row-tokens 16] [--chats 5] [--chat-tokens 8]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from api_concurrency import default_model_dir, one_stream, stream_body  # noqa: E402  (bench/ is the script's folder)
from tests.e2e.server import free_port, running_server, user_data_with_default_model  # noqa: E402
from webui.catalog import DEFAULT_MODEL  # noqa: E402

CHAT_PROMPT = "Name three colours of the rainbow."
TOPICS = ("the moon", "rivers", "bread", "trains", "bees", "glass", "winter", "music", "maps", "clocks")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=1, help="the server's --threads (torch CPU threads; default 1)")
    p.add_argument("--rows", type=int, default=100, help="chat requests in the batch (default 100)")
    p.add_argument("--row-tokens", type=int, default=16, help="tokens each batch row makes at most (default 16)")
    p.add_argument("--chats", type=int, default=5, help="chats timed alone and beside the batch (default 5)")
    p.add_argument("--chat-tokens", type=int, default=8, help="tokens each chat makes (default 8)")
    p.add_argument("--quick", action="store_true", help="a tiny run (12 rows of 8 tokens, 2 chats of 2 tokens)")
    args = p.parse_args()
    if args.quick:
        args.rows, args.row_tokens, args.chats, args.chat_tokens = 12, 8, 2, 2
    return args


def rows(n: int, tokens: int) -> list[dict]:
    """The batch's lines: greedy chat requests, a different question each."""
    return [{"custom_id": f"row-{i}", "method": "POST", "url": "/v1/chat/completions",
             "body": {"model": DEFAULT_MODEL, "max_tokens": tokens, "temperature": 0, "messages": [
                 {"role": "user", "content": f"Write one sentence about {TOPICS[i % len(TOPICS)]} (number {i})."}]}}
            for i in range(n)]


async def chat_ttfts(client: httpx.AsyncClient, n: int, tokens: int, batch_id: str | None = None) -> list[float]:
    """TTFT of ``n`` chats sent one after another (with ``batch_id``: only those that ended while it still ran)."""
    out = []
    for _ in range(n):
        result = await one_stream(client, stream_body(CHAT_PROMPT, tokens))
        if batch_id is not None and (await batch(client, batch_id))["status"] != "in_progress":
            print(f"  a chat ended after the batch had finished: not counted ({len(out)} counted)")
            break
        out.append(result.ttft)
    return out


async def batch(client: httpx.AsyncClient, batch_id: str) -> dict:
    answer = await client.get(f"/v1/batches/{batch_id}")
    answer.raise_for_status()
    return answer.json()


async def start_batch(client: httpx.AsyncClient, lines: list[dict]) -> str:
    jsonl = "".join(json.dumps(line) + "\n" for line in lines).encode()
    uploaded = await client.post("/v1/files", data={"purpose": "batch"}, files={"file": ("rows.jsonl", jsonl)})
    uploaded.raise_for_status()
    created = await client.post("/v1/batches", json={"input_file_id": uploaded.json()["id"],
                                                     "endpoint": "/v1/chat/completions", "completion_window": "24h"})
    created.raise_for_status()
    return created.json()["id"]


async def wait_for(client: httpx.AsyncClient, batch_id: str, done_rows: int, timeout: float = 3600) -> dict:
    """The batch once ``done_rows`` of its rows are done (or it has ended)."""
    deadline = time.monotonic() + timeout
    while True:
        state = await batch(client, batch_id)
        counts = state["request_counts"]
        if state["status"] in ("completed", "failed", "cancelled", "expired") or \
                counts["completed"] + counts["failed"] >= done_rows:
            return state
        if time.monotonic() > deadline:
            raise RuntimeError(f"the batch did not get {done_rows} rows done in {timeout:.0f} s: {state}")
        await asyncio.sleep(0.2)


async def replies_one_by_one(client: httpx.AsyncClient, lines: list[dict], state: dict) -> None:
    """Every row sent alone gives the batch's reply (a RuntimeError names the first that does not)."""
    output = await client.get(f"/v1/files/{state['output_file_id']}/content")
    output.raise_for_status()
    batched = {}
    for text in output.text.splitlines():
        row = json.loads(text)
        batched[row["custom_id"]] = row["response"]["body"]["choices"][0]["message"]["content"]
    if len(batched) != len(lines):
        raise RuntimeError(f"the output file holds {len(batched)} rows of {len(lines)}")
    for line in lines:
        alone = await client.post("/v1/chat/completions", json=line["body"])
        alone.raise_for_status()
        text = alone.json()["choices"][0]["message"]["content"]
        if text != batched[line["custom_id"]]:
            raise RuntimeError(f"{line['custom_id']}: alone {text!r}, in the batch {batched[line['custom_id']]!r}")


async def bench(base_url: str, args: argparse.Namespace) -> tuple[list[float], list[float]]:
    async with httpx.AsyncClient(base_url=base_url, timeout=httpx.Timeout(600.0)) as client:
        await one_stream(client, stream_body(CHAT_PROMPT, 2))  # warm-up
        alone = await chat_ttfts(client, args.chats, args.chat_tokens)
        print(f"alone:        TTFT {', '.join(f'{t:.3f}' for t in alone)} s")
        lines = rows(args.rows, args.row_tokens)
        started = time.perf_counter()
        batch_id = await start_batch(client, lines)
        await wait_for(client, batch_id, 1)
        beside = await chat_ttfts(client, args.chats, args.chat_tokens, batch_id)
        print(f"beside batch: TTFT {', '.join(f'{t:.3f}' for t in beside)} s")
        state = await wait_for(client, batch_id, args.rows)
        took = time.perf_counter() - started
        if state["status"] != "completed" or state["request_counts"]["failed"]:
            raise RuntimeError(f"the batch ended {state['status']}: {state}")
        print(f"batch: {args.rows} rows of at most {args.row_tokens} tokens in {took:.1f} s; sending each alone ...")
        await replies_one_by_one(client, lines, state)
        print(f"every row's reply alone equals its reply in the batch ({args.rows} rows)")
        return alone, beside


def main() -> None:
    args = parse_args()
    model_dir = default_model_dir()
    with tempfile.TemporaryDirectory(prefix="bench-api-batch-") as tmp:
        user_data = user_data_with_default_model(Path(tmp) / "data", model_dir)
        port = free_port()
        with running_server(user_data, "--nowebui", "--api-port", str(port), "--threads", str(args.threads)):
            print(f"server: {DEFAULT_MODEL}, --threads {args.threads}; {args.chats} chats of {args.chat_tokens} "
                  f"tokens, a batch of {args.rows} rows")
            alone, beside = asyncio.run(bench(f"http://127.0.0.1:{port}", args))
    if not beside:
        raise SystemExit("no chat ended while the batch ran: use more --rows or --row-tokens")
    a, b = statistics.median(alone), statistics.median(beside)
    print(f"median TTFT alone {a:.3f} s, beside the batch {b:.3f} s")
    print(f"ratio: {a / b:.3f}")


if __name__ == "__main__":
    main()
