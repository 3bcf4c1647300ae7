"""The token view in Chat and Notebook: tokens shaded by probability, alternatives on hover, branching."""

from __future__ import annotations

import json

import pytest

from tests.ui.pages import (wait_until, LONG, choose_preset, open_page, screenshot, send, set_number, tab, wait_reply_done,
                            wait_text)

pytestmark = pytest.mark.browser


def open_tokens(page, panel: str) -> None:
    page.locator(f"#{panel}-tokens-panel").get_by_text("Tokens of the", exact=False).first.click()
    page.wait_for_selector(f"#{panel}-tokens .tv-tok", timeout=30_000)


def hover_and_branch(page, panel: str, pos: int) -> str:
    """Hover token ``pos``, check its alternatives table, click its first alternative; return that token's label."""
    token = page.locator(f"#{panel}-tokens .tv-tok[data-pos='{pos}']")
    token.hover()
    popup = token.locator(".tv-pop")
    popup.wait_for(state="visible", timeout=10_000)
    assert "model" in popup.inner_text() and "sampled from" in popup.inner_text()
    button = popup.locator(".tv-branch").first
    label = button.inner_text()
    screenshot(page, f"{panel}-token-view")
    button.click()
    return label


def chosen_label(page, panel: str, pos: int) -> str:
    return page.locator(f"#{panel}-tokens .tv-tok[data-pos='{pos}'] .tv-chosen code").first.inner_text()


def test_chat_token_view_shows_alternatives_and_branches_from_one(server, browser):
    page = open_page(browser, server.url)
    choose_preset(page, "Deterministic", "0")
    set_number(page, "params-max_new_tokens", 8)
    tab(page, "Chat")
    page.locator("#chat-new").click()
    send(page, "Name three fruits.")
    wait_reply_done(page)
    first_reply = page.locator("#chat-log [data-testid='bot']").last.inner_text()
    open_tokens(page, "chat")
    assert page.locator("#chat-tokens .tv-tok").count() == 8
    label = hover_and_branch(page, "chat", 1)
    wait_text(page, "#chat-stats", "finish:", LONG)
    page.wait_for_function(
        "([sel, label]) => { const c = document.querySelector(sel); return c && c.innerText.includes(label); }",
        arg=["#chat-tokens .tv-tok[data-pos='1'] .tv-chosen", label], timeout=LONG)
    assert chosen_label(page, "chat", 1) == label  # the reply now has the alternative at that position
    replies = page.locator("#chat-log [data-testid='bot']")
    assert replies.count() == 1 and replies.last.inner_text() != first_reply
    screenshot(page, "chat-branched")
    page.close()


def test_notebook_token_view_branches_the_text(server, browser):
    page = open_page(browser, server.url)
    choose_preset(page, "Deterministic", "0")
    set_number(page, "params-max_new_tokens", 6)
    tab(page, "Notebook")
    settings = server.user_data / "settings.json"
    for _ in range(2):  # a fresh run's page mounted the tab's saved (empty) draft over text typed just before
        page.locator("#notebook-text textarea").fill("The capital of France is")
        try:
            wait_until(page, lambda: json.loads(settings.read_text()).get("notebook_text") == "The capital of France is"
                       and page.locator("#notebook-text textarea").input_value() == "The capital of France is", 10)
            break
        except AssertionError:
            pass
    page.locator("#notebook-generate").click()
    wait_text(page, "#notebook-stats", "finish:", LONG)
    first = page.locator("#notebook-text textarea").input_value()
    open_tokens(page, "notebook")
    label = hover_and_branch(page, "notebook", 0)
    page.wait_for_function(
        "([sel, label]) => { const c = document.querySelector(sel); return c && c.innerText.includes(label); }",
        arg=["#notebook-tokens .tv-tok[data-pos='0'] .tv-chosen", label], timeout=LONG)
    text = page.locator("#notebook-text textarea").input_value()
    assert text.startswith("The capital of France is") and text != first
    assert text.startswith("The capital of France is" + eval(label))  # the label is the token's repr()
    page.close()
