"""Browser tests that what the page shows, what the server holds and what is saved never drift apart (#30): values
typed at a person's speed, replies cut off by a reload, panels that follow the chat shown, the Notebook kept."""

from __future__ import annotations

import json
import time

import pytest

from tests.e2e.server import running_server, user_data_with_default_model
from tests.ui.pages import (LONG, bot_messages, open_page, ready_page, reload_parameters, reply_when, rows, send,
                            set_number, tab, wait_new_reply, wait_text)

pytestmark = [pytest.mark.real_model, pytest.mark.browser]


@pytest.fixture(scope="module")
def server(tmp_path_factory, default_model_dir):
    user_data = user_data_with_default_model(tmp_path_factory.mktemp("ui-state") / "data", default_model_dir)
    with running_server(user_data) as srv:
        srv.user_data = user_data
        yield srv


def test_numbers_typed_at_a_persons_speed_are_saved_exactly_as_typed(server, browser):
    """#30 (2): every keystroke saves, and the last value typed is the one kept; before, a keystroke that came
    while the previous one's save was still running was dropped (64 was saved as 6, 0.45 as 0.4)."""
    page = open_page(browser, server.url)
    tab(page, "Parameters")
    settings = server.user_data / "settings.json"

    def saved(name: str):
        return json.loads(settings.read_text())["params"].get(name)

    for name, selector, typed in (("max_new_tokens", "#params-max_new_tokens input", ["64", "48", "32", "96"]),
                                  ("temperature", "#params-temperature input[type=number]", ["0.45", "1.25"])):
        box = page.locator(selector)
        for value in typed:
            box.click()
            box.press("Control+a")
            box.press_sequentially(value, delay=60)  # a person typing, not a paste
            box.press("Enter")
            deadline = time.monotonic() + 15
            while saved(name) != float(value) and time.monotonic() < deadline:
                time.sleep(0.1)
            time.sleep(0.8)  # a save of an earlier keystroke arriving late would land now
            assert saved(name) == float(value), (name, value, saved(name))
    reload_parameters(page, "96")
    assert page.locator("#params-temperature input[type=number]").input_value() == "1.25"
    page.close()


def test_the_note_on_left_out_turns_names_truncation_length(server, browser):
    """#30 (7): a chat cut to fit truncation_length says so, not that the context is full."""
    page = ready_page(browser, server.url, max_new_tokens=8)
    tab(page, "Parameters")
    set_number(page, "params-truncation_length", 120)
    try:
        for n in range(3):
            send(page, f"Question number {n}: name one colour of the rainbow and say why people like it.")
            wait_new_reply(page, n)
        wait_text(page, "#chat-stats", "not sent (over truncation_length 120)", 30_000)
        assert "the context is full" not in page.locator("#chat-stats").inner_text()
    finally:
        tab(page, "Parameters")
        set_number(page, "params-truncation_length", 0)
        page.wait_for_timeout(1000)
        page.close()


def test_remove_last_puts_the_removed_message_back_in_the_box(server, browser):
    """#30 (7): Remove last takes your last message and its reply away, and gives the message back to edit."""
    page = ready_page(browser, server.url, max_new_tokens=4)
    send(page, "Name a fruit.")
    wait_new_reply(page, 0)
    send(page, "Name a vegetable.")
    wait_new_reply(page, 1)
    page.locator("#chat-remove-last").click()
    page.wait_for_function("() => document.querySelector('#chat-message textarea').value === 'Name a vegetable.'",
                           timeout=30_000)
    assert len(bot_messages(page)) == 1 and "Name a vegetable." not in page.locator("#chat-log").inner_text()
    page.close()


def test_delete_asks_again_after_switching_chats(server, browser):
    """#30 (7): an armed Delete ("Confirm delete") is disarmed when another chat is shown, so the next click on it
    asks about that chat instead of deleting it."""
    page = ready_page(browser, server.url, max_new_tokens=2)
    send(page, "Keep this chat about owls.")
    wait_new_reply(page, 0)
    page.locator("#chat-new").click()
    send(page, "And this one about newts.")
    wait_new_reply(page, 0)
    page.locator("#chat-delete").click()
    wait_text(page, "#chat-delete", "Confirm delete", 30_000)
    page.locator("#chat-list").get_by_text("Keep this chat about owls.", exact=True).first.click()
    page.wait_for_function("() => document.querySelector('#chat-delete').innerText.trim() === 'Delete'",
                           timeout=30_000)
    page.locator("#chat-delete").click()  # asks first; deletes nothing
    wait_text(page, "#chat-delete", "Confirm delete", 30_000)
    for title in ("Keep this chat about owls.", "And this one about newts."):
        assert rows(server.user_data, "SELECT count(*) FROM chats WHERE title=?", title)[0][0] == 1
    page.locator("#chat-new").click()
    page.wait_for_function("() => document.querySelector('#chat-delete').innerText.trim() === 'Delete'",
                           timeout=30_000)
    page.close()


def test_the_chat_log_has_no_trash_icon_that_deletes_nothing(server, browser):
    """#30 (7): the chat log's own trash icon showed a blank chat and deleted nothing; Delete (with its confirm) is
    the one way to delete a chat, so the log shows no trash icon."""
    page = ready_page(browser, server.url, max_new_tokens=2)
    send(page, "A chat with a reply.")
    wait_new_reply(page, 0)
    shown = page.locator("#chat-log button").evaluate_all(
        "bs => bs.filter(b => b.offsetParent !== null).map(b => b.getAttribute('aria-label') || b.title)")
    assert "Copy message" in shown and not any("clear" in (b or "").lower() for b in shown), shown
    page.close()


def test_a_reply_cut_off_by_a_reload_is_stored_as_stop_stores_it(server, browser):
    """#30 (6): reloading the tab mid-reply ends the request; the reply keeps its stats, marked cancelled."""
    question = "Write a long story about a lighthouse keeper and his cat."
    page = ready_page(browser, server.url, max_new_tokens=300)
    send(page, question)
    page.wait_for_function("() => { const b = document.querySelectorAll('#chat-log [data-testid=bot]');"
                           " return b.length && b[b.length - 1].innerText.length > 30; }", timeout=LONG)
    page.reload()
    reply = reply_when(server.user_data, question, lambda r: r[2] is not None)
    stats = json.loads(reply[2] or "null")
    assert stats and stats["finish_reason"] == "cancelled" and stats["completion_tokens"] < 300, reply
    page.wait_for_selector("#chat-message textarea")
    wait_text(page, "#chat-log", "finish: cancelled", 30_000)  # the reloaded page shows it as Stop leaves it
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
    page.reload()
    page.wait_for_selector("#chat-message textarea")
    tab(page, "Notebook")
    page.wait_for_function("() => document.querySelector('#notebook-text textarea').value === "
                           "'A draft, never saved: '", timeout=30_000)
    assert page.locator("#notebook-name input").input_value() == "draft-1"
    assert rows(server.user_data, "SELECT count(*) FROM notebooks WHERE name='draft-1'")[0][0] == 0  # not saved
    text.fill("")
    page.wait_for_timeout(1000)
    page.close()
