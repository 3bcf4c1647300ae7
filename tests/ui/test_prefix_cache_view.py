"""The prefix cache in the browser: Regenerate reads the prompt from the cache and says so; the Model tab shows
the cache and empties it."""

from __future__ import annotations

import pytest

from tests.ui.pages import ready_page, screenshot, send, tab, wait_reply_done, wait_text

pytestmark = [pytest.mark.real_model, pytest.mark.browser]
OWN_SERVER = True  # its first reply must find nothing in the prefix cache, which other modules fill


def test_regenerate_says_the_prompt_came_from_the_cache_and_clear_empties_it(server, browser):
    page = ready_page(browser, server.url, max_new_tokens=4)
    page.locator("#chat-system textarea").fill("You are a helpful assistant. " * 6)
    send(page, "Name one colour of the rainbow.")
    first = wait_reply_done(page)
    page.locator("#chat-regenerate").click()
    page.wait_for_function("() => document.querySelector('#chat-stats').innerText.includes('cached')",
                           timeout=120_000)
    again = wait_reply_done(page)
    assert "cached)" not in first and "cached)" in again, (first, again)
    tab(page, "Model")
    page.wait_for_function("() => /[1-9][0-9]* blocks of 16 tokens/.test("
                           "document.querySelector('#prefix-cache-info').innerText)", timeout=30_000)
    assert "prefix cache" in page.locator("#status-line").inner_text()
    screenshot(page, "model-prefix-cache")
    page.locator("#prefix-cache-clear").click()
    wait_text(page, "#prefix-cache-info", "0 blocks of 16 tokens")
    page.close()

