"""Small helpers for driving the workbench's Gradio page with playwright."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from tests.conftest import ROOT

ARTIFACTS = ROOT / "tests" / "artifacts"
LONG = 180_000  # ms; the real model on a shared CPU
TEMPERATURE = "#params-temperature input[data-testid=number-input]"  # a slider's box (it keeps what was typed)


def watch(page) -> None:
    """Keep what the page logs and each queue request it sends, with times (shown when a test fails)."""
    start, lines = time.monotonic(), []

    def say(text: str) -> None:
        lines.append(f"{time.monotonic() - start:7.1f}s {text}")

    page.workbench_log = lines
    page.on("console", lambda m: say(f"console {m.type}: {m.text}"))
    page.on("pageerror", lambda e: say(f"page error: {e}"))
    page.on("requestfailed", lambda r: "/queue/data" not in r.url and say(f"failed: {r.method} {r.url} {r.failure}"))
    page.on("request", lambda r: "/queue/join" in r.url and '"data":[],"fn_index"' not in (r.post_data or "")
            and say(f"join {(r.post_data or '')[:4000]}"))  # (not the status line's timer, every second)

def open_page(browser, url: str):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    watch(page)
    page.goto(url)
    page.wait_for_selector("#chat-message textarea", timeout=60_000)
    page.wait_for_function("() => document.querySelector('#chat-list') !== null")
    wait_parameters_shown(page)
    return page


def showing(page) -> str:
    """Which set of parameters the page applied last (a reload's, a preset's): 0 before the first."""
    return page.evaluate("() => document.querySelector('#params-showing input').value")


def wait_parameters_shown(page, after: str = "0") -> None:
    """Wait until the page applied parameters sent after showing ``after`` (as a person sees the values come)."""
    page.wait_for_function("n => { const i = document.querySelector('#params-showing input');"
                           " return i && i.value !== n; }", arg=after, timeout=60_000)


def tab(page, name: str) -> None:
    page.get_by_role("tab", name=name, exact=True).click()  # (exact: "Batch" is also in "API batches")


def choose(page, elem_id: str, option: str) -> None:
    page.locator(f"#{elem_id} input").click()
    page.locator(f"#{elem_id}").get_by_role("option", name=option, exact=True).click()


def choose_preset(page, name: str, temperature: str) -> None:
    """Choose preset ``name`` and wait until the page shows its values (a preset already chosen shows them)."""
    tab(page, "Parameters")
    if page.locator("#preset input").input_value() != name:
        before = showing(page)
        choose(page, "preset", name)
        wait_parameters_shown(page, before)
    page.wait_for_function("([s, v]) => document.querySelector(s).value === v", arg=[TEMPERATURE, temperature],
                           timeout=30_000)


def reload(page) -> None:
    """Reload the page and wait until it shows what was saved (as a person waits for the page to fill)."""
    page.reload()
    page.wait_for_selector("#chat-message textarea", timeout=60_000)
    wait_parameters_shown(page)


def reload_parameters(page, max_new_tokens: str) -> None:
    """Reload the page and open Parameters once it shows ``max_new_tokens`` (the saved values are back)."""
    reload(page)
    tab(page, "Parameters")
    page.wait_for_function("n => document.querySelector('#params-max_new_tokens input').value === n",
                           arg=max_new_tokens, timeout=30_000)


def set_number(page, elem_id: str, value: int) -> None:
    box = page.locator(f"#{elem_id} input")
    box.fill(str(value))
    box.press("Tab")


def wait_text(page, selector: str, text: str, timeout: int = LONG) -> None:
    page.wait_for_function(
        "([sel, text]) => { const el = document.querySelector(sel); return el && el.innerText.includes(text); }",
        arg=[selector, text], timeout=timeout)


def wait_until(page, check, timeout: float = 15) -> None:
    """Poll ``check()`` through the page's own wait, so that the page's events (a route, say) are handled."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"not true after {timeout} s"
        page.wait_for_timeout(100)


def toast(page, text: str, timeout: int = 30_000) -> None:
    wait_text(page, "body", text, timeout)


def bot_messages(page) -> list[str]:
    return page.locator("#chat-log [data-testid='bot']").all_inner_texts()


REPLY_SO_FAR_JS = """() => { const live = document.querySelector('#chat-log .chat-live-text');
    const bots = document.querySelectorAll("#chat-log [data-testid='bot']");
    return live ? live.innerText : (bots.length ? bots[bots.length - 1].innerText : ''); }"""


def reply_so_far(page) -> str:
    """The reply being written (its text streams into a bubble at the end of the log: webui.ui.live), else the last
    reply in the log."""
    return page.evaluate(REPLY_SO_FAR_JS)


def wait_streaming(page, chars: int = 0, timeout: int = LONG) -> None:
    """Wait until the reply being written shows more than ``chars`` characters in its bubble (or has finished)."""
    page.wait_for_function("n => { const t = document.querySelector('#chat-log .chat-live-text');"
                           " return (t && t.innerText.length > n)"
                           " || document.querySelector('#chat-stats').innerText.includes('finish:'); }",
                           arg=chars, timeout=timeout)


def send(page, text: str) -> None:
    tab(page, "Chat")
    page.locator("#chat-message textarea").fill(text)
    page.locator("#chat-send").click()


def wait_reply_done(page, timeout: int = LONG) -> str:
    wait_text(page, "#chat-stats", "finish:", timeout)
    return page.locator("#chat-stats").inner_text()


def wait_new_reply(page, count: int, timeout: int = LONG) -> str:
    """Wait until the chat shows more than ``count`` bot replies and the last one has finished; return it."""
    page.wait_for_function("n => { const b = document.querySelectorAll('#chat-log [data-testid=bot]');"
                           " return b.length > n && document.querySelector('#chat-stats').innerText"
                           ".includes('finish:'); }", arg=count, timeout=timeout)
    return bot_messages(page)[-1]


def screenshot(page, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def export_file(page, button_id: str, file_id: str, dest):
    """Click an export button, then download the file it offers to ``dest``."""
    page.locator(f"#{button_id}").click()
    link = page.locator(f"#{file_id} a").first
    link.wait_for(timeout=30_000)
    with page.expect_download() as download:
        link.click()
    download.value.save_as(dest)
    return dest


def upload_file(page, button_id: str, path) -> None:
    with page.expect_file_chooser() as chooser:
        page.locator(f"#{button_id}").click()
    chooser.value.set_files(str(path))


def ready_page(browser, url: str, max_new_tokens: int = 12, preset: str = "Deterministic", temperature: str = "0"):
    """A page with a preset and a token budget chosen, on a new chat."""
    page = open_page(browser, url)
    choose_preset(page, preset, temperature)
    set_number(page, "params-max_new_tokens", max_new_tokens)
    tab(page, "Chat")
    page.locator("#chat-new").click()
    page.locator("#chat-message textarea").fill("")  # a draft another test left in the box (a reload keeps it)
    return page


def code_text(page, elem_id: str) -> str:
    """The whole text of a Code component: its editor draws only the lines in view, so read its document."""
    return page.evaluate("""(id) => { const c = document.querySelector('#' + id + ' .cm-content');
        const view = c && c.cmTile && c.cmTile.view;
        return view ? view.state.doc.toString() : (c ? c.innerText : ''); }""", elem_id)


def rows(user_data: Path, sql: str, *args):
    with sqlite3.connect(f"file:{user_data / 'workbench.sqlite3'}?mode=ro", uri=True) as db:
        return db.execute(sql, args).fetchall()


def last_reply(user_data: Path, question: str):
    """(created, content, stats) of the last reply in the chat where ``question`` was asked."""
    found = rows(user_data, "SELECT m.created, m.content, m.stats FROM messages m WHERE m.role='assistant' AND "
                            "m.chat_id = (SELECT chat_id FROM messages WHERE content = ? ORDER BY id DESC LIMIT 1) "
                            "ORDER BY m.position DESC, m.id DESC LIMIT 1", question)
    return found[0] if found else None


def reply_when(user_data: Path, question: str, done):
    """The stored last reply to ``question`` once ``done(reply)`` holds (or the last one seen at the deadline)."""
    deadline = time.monotonic() + LONG / 1000
    while True:
        reply = last_reply(user_data, question)
        if (reply and done(reply)) or time.monotonic() > deadline:
            return reply
        time.sleep(0.2)
