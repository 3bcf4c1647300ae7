"""The A/B tab in a real browser: one prompt, two settings, both streamed at once."""

from __future__ import annotations

import pytest

from tests.ui.pages import choose, choose_preset, open_page, screenshot, set_number, tab, wait_text

pytestmark = [pytest.mark.real_model, pytest.mark.browser]


def test_two_settings_side_by_side(server, browser):
    page = open_page(browser, server.url)
    choose_preset(page, "Deterministic", "0")
    set_number(page, "params-max_new_tokens", 12)
    tab(page, "A/B")
    page.locator("#ab-prompt textarea").fill("What is the capital of France?")
    choose(page, "ab-b-preset", "Creative")
    page.locator("#ab-run").click()
    wait_text(page, "#ab-a-stats", "finish:", 120_000)
    wait_text(page, "#ab-b-stats", "finish:", 120_000)
    assert "Paris" in page.locator("#ab-a-output textarea").input_value()
    assert page.locator("#ab-b-output textarea").input_value()
    stats = page.locator("#ab-b-stats").inner_text()
    assert "seed" in stats and "max_new_tokens 12 (Parameters tab)" in stats  # a preset keeps the tab's length
    assert int(stats.split(" tokens")[0]) <= 12
    screenshot(page, "ab")
    page.close()
