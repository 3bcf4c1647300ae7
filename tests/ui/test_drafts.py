"""Browser tests that what was typed and not sent, or not saved, comes back after a reload (#30, #46): the Chat
tab's message box, the Notebook's text and name."""

from __future__ import annotations

import pytest

from tests.ui.pages import open_page, ready_page, reload, rows, tab, wait_reply_done

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
