"""Browser tests that what was typed and not sent, or not saved, comes back after a reload (#30, #46): the Chat
tab's message box, the Notebook's text and name."""

from __future__ import annotations

import time

import pytest

from tests.ui.pages import (LONG, choose_preset, open_page, ready_page, reload, rows, send, set_number, tab,
                            wait_reply_done, wait_text)

pytestmark = [pytest.mark.real_model, pytest.mark.browser]
OWN_SERVER = True  # the drafts are the server's: a module of its own keeps them from others' pages


def typed_just_before_a_reload_comes_back(page, box: str, typed: str, leave: bool = False) -> None:
    """Type into ``box`` (a textarea's selector) at a person's speed, reload 0.1 s after the last key (``leave``:
    after clicking outside the box), and see it come back; then clear it (sent or cleared: no draft comes back)."""
    text = page.locator(box)
    text.click()
    text.press("Control+a")
    text.press_sequentially(typed, delay=40)
    if leave:
        page.mouse.click(5, 5)  # a click outside the box
    page.wait_for_timeout(100)
    reload(page)
    if box.startswith("#notebook"):
        tab(page, "Notebook")
    page.wait_for_function("([s, t]) => document.querySelector(s).value === t", arg=[box, typed], timeout=30_000)
    text.fill("")
    page.wait_for_timeout(1000)


def test_a_chat_message_typed_and_left_comes_back_after_a_reload_and_goes_once_sent(server, browser):
    """#46 (12): the message box, typed and not sent, is there again after a reload once the user has left the box
    (a save per key made typing lag: each Gradio event costs the page a pass over every component); sent, it goes."""
    page = ready_page(browser, server.url, max_new_tokens=2)
    typed_just_before_a_reload_comes_back(page, "#chat-message textarea", "A question typed, not sent yet",
                                          leave=True)
    box = page.locator("#chat-message textarea")
    box.click()
    box.press_sequentially("Sent, so not kept.", delay=40)
    page.mouse.click(5, 5)
    page.wait_for_timeout(500)
    box.click()
    box.press("Enter")
    wait_reply_done(page)
    reload(page)
    page.wait_for_timeout(1000)
    assert page.locator("#chat-message textarea").input_value() == ""
    page.close()


def test_notebook_text_typed_just_before_a_reload_comes_back(server, browser):
    """#46 (12): a reload 0.1 s after the last keystroke lost it (its save was still waiting to be sent)."""
    page = open_page(browser, server.url)
    tab(page, "Notebook")
    typed_just_before_a_reload_comes_back(page, "#notebook-text textarea",
                                          "Typed right before a reload, every key kept.")
    page.close()


def test_unsaved_notebook_text_and_name_come_back_after_a_reload(server, browser):
    """#30 (7): what is in the Notebook, saved or not, is there again after a reload."""
    page = open_page(browser, server.url)
    tab(page, "Notebook")
    text = page.locator("#notebook-text textarea")
    text.click()
    text.press("Control+a")
    text.press_sequentially("A draft, never saved: ", delay=40)
    name = page.locator("#notebook-name input")
    name.click()
    name.press("Control+a")
    name.press_sequentially("draft-1", delay=40)
    name.press("Tab")  # typed, not saved
    page.wait_for_timeout(1500)
    reload(page)
    tab(page, "Notebook")
    page.wait_for_function("() => document.querySelector('#notebook-text textarea').value === "
                           "'A draft, never saved: '", timeout=30_000)
    assert page.locator("#notebook-name input").input_value() == "draft-1"
    assert rows(server.user_data, "SELECT count(*) FROM notebooks WHERE name='draft-1'")[0][0] == 0  # not saved
    text.fill("")
    page.wait_for_timeout(1000)
    page.close()


def gradio_events(page) -> list[str]:
    """The Gradio events the page sends from now on (each a request to its queue), as a list that grows."""
    sent: list[str] = []
    page.on("request", lambda r: "/queue/join" in r.url and sent.append((r.post_data or "")[:200]))
    return sent


def quiet(page, sent: list[str], for_ms: int = 4000, timeout: float = 90) -> None:
    """Wait until the page has sent no Gradio event (``sent``: gradio_events') for ``for_ms``: an event chained to
    another (``.then``) is sent when that one ends, which on a busy machine was 3 s after it was sent."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        before = len(sent)
        page.wait_for_timeout(for_ms)
        if len(sent) == before:
            return
    raise AssertionError(f"the page never went quiet; its last events: {sent[-3:]}")


def test_a_chat_message_typed_without_leaving_the_box_comes_back_after_an_immediate_reload(server, browser):
    """#46: typed, pasted and deleted, the message box is saved as it is without the user leaving it, and with
    no Gradio event per key (each costs the page a pass over every component's status): a reload 0.1 s after the
    last key brings it back exactly."""
    page = ready_page(browser, server.url, max_new_tokens=2)
    box = page.locator("#chat-message textarea")
    sent = gradio_events(page)
    quiet(page, sent)  # New chat's own events are done
    sent.clear()
    box.click()
    box.press_sequentially("Typed here, ", delay=40)
    page.keyboard.insert_text("then pasted; ")  # as a paste puts it in
    box.press_sequentially("and a typo", delay=40)
    for _ in range(4):
        box.press("Backspace")  # deleted: "and a " is what is left
    assert sent == []  # not one Gradio event while typing
    page.wait_for_timeout(100)
    reload(page)
    page.wait_for_function("t => document.querySelector('#chat-message textarea').value === t",
                           arg="Typed here, then pasted; and a ", timeout=30_000)
    page.locator("#chat-message textarea").fill("")
    page.wait_for_timeout(1000)
    page.close()


def test_notebook_typing_sends_no_gradio_event_and_an_immediate_reload_keeps_it(server, browser):
    """#46: the Notebook's text was saved by a Gradio event per key (typing lagged); now by the page, and a reload
    0.1 s after the last key still brings all of it back."""
    page = open_page(browser, server.url)
    tab(page, "Notebook")
    text = page.locator("#notebook-text textarea")
    text.click()
    text.press("Control+a")
    sent = gradio_events(page)
    quiet(page, sent)  # the load's own events are done
    sent.clear()
    text.press_sequentially("Every key kept, none sent as an event.", delay=40)
    assert sent == []
    page.wait_for_timeout(100)
    reload(page)
    tab(page, "Notebook")
    page.wait_for_function("t => document.querySelector('#notebook-text textarea').value === t",
                           arg="Every key kept, none sent as an event.", timeout=30_000)
    text.fill("")
    page.wait_for_timeout(1000)
    page.close()


def test_an_idle_page_sends_no_gradio_event_and_its_status_line_follows_the_server(server, browser):
    """#46: the status line (and the prefix cache's) were refreshed by Gradio timers, an event each second even
    when idle; the page now reads them itself, and the line still shows a reply's work within a second or two."""
    page = open_page(browser, server.url)
    sent = gradio_events(page)
    quiet(page, sent)  # the load's own events (the chat it opens fills panels) are done
    wait_text(page, "#status-line", "idle", 30_000)
    sent.clear()
    page.wait_for_timeout(3500)  # (a timer ticked each second)
    assert sent == []
    assert "SmolLM2" in page.locator("#status-line").inner_text()
    choose_preset(page, "Deterministic", "0")
    set_number(page, "params-max_new_tokens", 2)
    tab(page, "Model")
    wait_text(page, "#prefix-cache-info", "Prefix cache", 30_000)
    tab(page, "Chat")
    page.locator("#chat-new").click()
    send(page, "Say hi.")
    wait_reply_done(page)
    wait_text(page, "#status-line", "hit", 30_000)  # the prefix cache read the prompt: its figures show
    page.close()


def test_impersonate_streams_into_the_box_on_the_live_channel_and_is_kept(server, browser):
    """#46: Impersonate's text streamed through the Gradio event, a message per token; now on the reply's own
    stream (as a reply does), and the box ends with the whole text, kept as its draft across a reload."""
    page = ready_page(browser, server.url, max_new_tokens=6)
    page.wait_for_function("() => document.querySelector('#chat-message textarea').value === ''")
    with page.expect_request(lambda r: "/chat-live/" in r.url, timeout=LONG):  # the text comes on the live stream
        page.locator("#chat-impersonate").click()
    page.wait_for_function("() => document.querySelector('#chat-message textarea').value.trim() !== ''",
                           timeout=LONG)
    page.wait_for_function("() => document.querySelector('#chat-impersonate-token textarea')?.value === ''",
                           timeout=LONG)  # the event is over
    written = page.locator("#chat-message textarea").input_value()
    reload(page)
    page.wait_for_function("t => document.querySelector('#chat-message textarea').value === t", arg=written,
                           timeout=30_000)
    page.locator("#chat-message textarea").fill("")
    page.wait_for_timeout(1000)
    page.close()
