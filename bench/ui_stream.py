"""The page while a reply streams: how fast it answers a person (typing in the message box, opening a past chat)
during a long streamed reply, against the same when idle (#46).

Starts a real workbench (``python launch.py``) on the default model with a fresh user data dir and drives it in
real Chromium (as tests/ui does): one short chat is made first (the past chat), then a new chat is opened and

1. **idle**: ``--keys`` characters are typed into the message box, one at a time, each timed from the key press
   until the box shows it; then the past chat is opened from the chat list, timed until its reply shows, and the
   new chat opened again;
2. **streaming**: a reply of ``--tokens`` tokens (greedy, EOS banned, so it is that long) is sent, and once half
   of it has streamed the same is timed again, while it goes on.

Prints each timing; last line ``ratio: X`` = the smaller of (median typing time idle / streaming) and (opening
time idle / streaming). 1.0: the page answers as fast while a reply streams as when idle; #46's target is at
least 0.5.

    .venv/bin/python bench/ui_stream.py [--tokens 400] [--keys 10] [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from api_concurrency import default_model_dir  # noqa: E402  (bench/ is the script's folder)
from tests.e2e.server import running_server, user_data_with_default_model  # noqa: E402
from tests.ui.pages import (REPLY_SO_FAR_JS, bot_messages, choose_preset, open_page, reply_so_far,  # noqa: E402
                            send, set_number, tab, wait_reply_done)

CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]
PAST_QUESTION, LONG_QUESTION = "Say hello.", "Tell me a long story about a dragon and a lighthouse."


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokens", type=int, default=400, help="tokens of the streamed reply (default 400)")
    p.add_argument("--keys", type=int, default=10, help="characters typed and timed each way (default 10)")
    p.add_argument("--threads", type=int, default=1, help="the server's --threads (default 1)")
    p.add_argument("--quick", action="store_true", help="a tiny run (a 40-token reply, 3 keys)")
    args = p.parse_args()
    if args.quick:
        args.tokens, args.keys = 40, 3
    return args


def typing_times(page, keys: int) -> list[float]:
    """Seconds from each key press until the message box shows the character."""
    box = page.locator("#chat-message textarea")
    box.fill("")
    out = []
    for i in range(keys):
        started = time.perf_counter()
        box.press("x")
        page.wait_for_function("n => document.querySelector('#chat-message textarea').value.length === n",
                               arg=i + 1, timeout=120_000)
        out.append(time.perf_counter() - started)
    box.fill("")
    return out


def open_time(page, label: str, shows: str) -> float:
    """Seconds from a click on the chat ``label`` in the chat list until the log shows ``shows``."""
    started = time.perf_counter()
    page.get_by_label(label).first.check()
    page.wait_for_function("t => document.querySelector('#chat-log').innerText.includes(t)", arg=shows,
                           timeout=120_000)
    return time.perf_counter() - started


def streamed_chars(page) -> int:
    return len(reply_so_far(page))


def measure(url: str, args: argparse.Namespace) -> tuple[list[float], list[float], float, float]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_FLAGS)
        page = open_page(browser, url)
        choose_preset(page, "Deterministic", "0")
        set_number(page, "params-max_new_tokens", 8)
        tab(page, "Chat")
        send(page, PAST_QUESTION)
        wait_reply_done(page)
        past_reply = bot_messages(page)[-1].strip()[:20]
        tab(page, "Parameters")
        set_number(page, "params-max_new_tokens", args.tokens)
        page.locator("#params-ban_eos input").check()
        tab(page, "Chat")
        page.locator("#chat-new").click()
        page.wait_for_function("() => !document.querySelector('#chat-log').innerText.includes('Say hello')")
        typing_idle = typing_times(page, args.keys)
        open_idle = open_time(page, PAST_QUESTION, past_reply)
        page.locator("#chat-new").click()
        page.wait_for_function("() => !document.querySelector('#chat-log').innerText.includes('Say hello')")
        send(page, LONG_QUESTION)
        half = args.tokens * 2  # about four characters a token: half of the reply
        page.wait_for_function(f"n => ({REPLY_SO_FAR_JS})().length >= n", arg=half, timeout=600_000)
        typing_streaming = typing_times(page, args.keys)
        shown_before = streamed_chars(page)
        open_streaming = open_time(page, PAST_QUESTION, past_reply)
        still = page.locator("#chat-stats").inner_text()
        print(f"reply streamed {shown_before} characters before the past chat was opened; stats then: {still!r}")
        browser.close()
    return typing_idle, typing_streaming, open_idle, open_streaming


def main() -> None:
    args = parse_args()
    model_dir = default_model_dir()
    with tempfile.TemporaryDirectory(prefix="bench-ui-stream-") as tmp:
        user_data = user_data_with_default_model(Path(tmp) / "data", model_dir)
        with running_server(user_data, "--threads", str(args.threads)) as server:
            print(f"server: the default model, --threads {args.threads}; a {args.tokens}-token reply, "
                  f"{args.keys} keys typed each way")
            typing_idle, typing_streaming, open_idle, open_streaming = measure(server.url, args)
    ti, ts = statistics.median(typing_idle), statistics.median(typing_streaming)
    print(f"typing: idle {', '.join(f'{t:.3f}' for t in typing_idle)} s")
    print(f"typing: streaming {', '.join(f'{t:.3f}' for t in typing_streaming)} s")
    print(f"median key: idle {ti:.3f} s, streaming {ts:.3f} s (ratio {ti / ts:.3f})")
    print(f"opening the past chat: idle {open_idle:.3f} s, streaming {open_streaming:.3f} s "
          f"(ratio {open_idle / open_streaming:.3f})")
    print(f"ratio: {min(ti / ts, open_idle / open_streaming):.3f}")


if __name__ == "__main__":
    main()
