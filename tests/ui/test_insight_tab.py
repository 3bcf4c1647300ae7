"""The Insight tab in a real browser: the prompt's tokens and the next-token chart."""

from __future__ import annotations

import pytest

from tests.ui.pages import choose, choose_preset, open_page, reload, screenshot, set_number, tab, wait_text

pytestmark = [pytest.mark.real_model, pytest.mark.browser]


def test_next_tokens_and_prompt_tokens(server, browser):
    page = open_page(browser, server.url)
    choose_preset(page, "Precise", "0.3")
    tab(page, "Insight")
    page.locator("#insight-text textarea").fill("What is the capital of France?")
    page.locator("#insight-chat input").check()
    page.locator("#insight-next").click()
    wait_text(page, "#insight-summary", "The current parameters cut", 60_000)
    table = page.locator("#insight-next-table").inner_text()
    assert "kept" in table and "cut" in table  # Precise's top_k/top_p cut some of the 20
    tab(page, "Parameters")
    choose(page, "params-constraint-form", "choice (one a line)")
    page.locator("#params-constraint-text textarea").fill("Paris\nLyon")
    wait_text(page, "#params-running", "structured_outputs", 30_000)
    tab(page, "Insight")
    page.locator("#insight-next").click()
    wait_text(page, "#insight-summary", "masked by the output constraint", 60_000)
    assert "masked by the constraint" in page.locator("#insight-next-table").inner_text()
    page.locator("#insight-chart").wait_for(state="visible", timeout=30_000)
    page.wait_for_timeout(1000)  # the plot draws after it shows
    screenshot(page, "insight-constraint")
    tab(page, "Parameters")
    choose(page, "params-constraint-form", "none")
    tab(page, "Insight")
    page.locator("#insight-inspect").click()
    wait_text(page, "#insight-summary", "of the 8,192-token context", 60_000)
    page.get_by_role("tab", name="Tokens of the prompt").click()
    wait_text(page, "#insight-rendered", "<|im_start|>assistant", 30_000)
    screenshot(page, "insight")
    page.close()


def test_perplexity_is_evaluated_and_kept(server, browser):
    page = open_page(browser, server.url)
    tab(page, "Insight")
    page.get_by_role("tab", name="Perplexity").click()
    page.locator("#ppl-text textarea").fill("The capital of France is Paris. It is a large city in Europe.")
    page.locator("#ppl-run").click()
    wait_text(page, "#ppl-note", "Perplexity", 120_000)
    value = float(page.locator("#ppl-note").inner_text().split("Perplexity ")[1].split(" ")[0])
    assert 1 < value < 200  # a real language model on plain English
    wait_text(page, "#ppl-results", "SmolLM2-135M-Instruct", 30_000)
    reload(page)
    tab(page, "Insight")
    page.get_by_role("tab", name="Perplexity").click()
    wait_text(page, "#ppl-results", "The capital of France is Paris.", 30_000)
    page.close()


def test_a_chat_reply_record_reruns_to_the_same_text(server, browser):
    from tests.ui.pages import code_text, last_reply, send, wait_reply_done

    page = open_page(browser, server.url)
    choose_preset(page, "Deterministic", "0")
    set_number(page, "params-max_new_tokens", 10)
    tab(page, "Chat")
    page.locator("#chat-new").click()  # a chat of its own, whatever chats earlier tests left open
    send(page, "Name a large animal.")
    wait_reply_done(page)
    _, stored, _ = last_reply(server.user_data, "Name a large animal.")
    reply = stored.split("\n")[0]
    page.get_by_text("Prompt and reproduce record (click a message; default: the last reply)").click()
    wait_text(page, "#chat-record", "llm-workbench.record", 30_000)
    record = code_text(page, "chat-record")
    assert "curl" in page.locator("#chat-record-curl").inner_text()
    tab(page, "Insight")
    page.get_by_role("tab", name="Re-run a record").click()
    page.locator("#record-input .cm-content").fill(record)
    page.locator("#record-run").click()
    wait_text(page, "#record-note", "finish:", 60_000)
    assert page.locator("#record-output textarea").input_value().split("\n")[0] == reply
    page.close()


def test_one_click_from_a_chat_message_or_a_batch_row_to_its_prompt(server, browser):
    from tests.ui.pages import send, wait_reply_done

    page = open_page(browser, server.url)
    choose_preset(page, "Deterministic", "0")
    set_number(page, "params-max_new_tokens", 4)
    tab(page, "Chat")
    page.locator("#chat-new").click()
    send(page, "Name a large animal.")
    wait_reply_done(page)
    page.get_by_text("Prompt and reproduce record (click a message; default: the last reply)").click()
    page.locator("#chat-log [data-testid='user']").last.click()
    wait_text(page, "#chat-inspect-note", "your message", 30_000)
    wait_text(page, "#chat-inspect-note", "of the 8,192-token context")
    wait_text(page, "#chat-inspect-rendered", "Name a large animal.<|im_end|>")
    assert "im_start" in page.locator("#chat-inspect-tokens").inner_text()
    page.locator("#chat-log [data-testid='bot']").last.click()
    wait_text(page, "#chat-inspect-note", "the reply", 30_000)
    wait_text(page, "#chat-record", "llm-workbench.record")

    tab(page, "Batch")
    page.locator("#batch-prompts textarea").fill("Name a fruit.\nName a planet.")
    page.locator("#batch-axes textarea").fill("max_new_tokens=4")
    page.locator("#batch-run").click()
    wait_text(page, "#batch-progress", "Finished: 2/2", 180_000)
    page.get_by_text("Prompt and reproduce record of a row (click a row)").click()
    page.locator("#batch-results [role='row'][aria-rowindex='3'] [role='gridcell']").first.click()
    wait_text(page, "#batch-inspect-note", "row 2", 30_000)
    wait_text(page, "#batch-inspect-rendered", "Name a planet.")
    wait_text(page, "#batch-record", "llm-workbench.record")
    assert "Name a planet." in page.locator("#batch-record-curl").inner_text()
    screenshot(page, "batch-row-inspect")
    page.close()
