"""Several models in a real browser: load one beside another, pick the model in use, A/B on two models,
a batch run with a model axis, unload one."""

from __future__ import annotations

import pytest

from tests.e2e.server import running_server, user_data_with_default_model
from tests.ui.pages import (LONG, bot_messages, choose, open_page, ready_page, reload, screenshot, send, tab,
                            wait_new_reply, wait_reply_done, wait_text)

pytestmark = [pytest.mark.real_model, pytest.mark.browser]
DEFAULT = "SmolLM2-135M-Instruct"


@pytest.fixture(scope="module")
def server(tmp_path_factory, default_model_dir, tiny_model_dir):
    user_data = user_data_with_default_model(tmp_path_factory.mktemp("several") / "data", default_model_dir)
    (user_data / "models").mkdir(exist_ok=True)
    (user_data / "models" / "tiny").symlink_to(tiny_model_dir, target_is_directory=True)
    with running_server(user_data) as srv:
        yield srv


def test_a_second_model_loads_beside_the_first_and_the_picker_switches(server, browser):
    page = ready_page(browser, server.url, max_new_tokens=4)
    send(page, "What is the capital of France?")
    wait_reply_done(page)
    first = bot_messages(page)[-1].split("\n")[0]  # the reply's first line
    tab(page, "Model")
    choose(page, "model-name", "tiny")
    page.locator("#model-load").click()
    wait_text(page, "#model-loaded", "● in use\ttiny", LONG)
    table = page.locator("#model-loaded").inner_text()
    assert DEFAULT in table and "MiB budget" in table
    wait_text(page, "#status-line", f"also loaded: {DEFAULT}")
    screenshot(page, "several-models")
    send(page, "What is the capital of France?")  # the tiny model (in use now) answers
    assert wait_new_reply(page, 1).split("\n")[0] != first
    choose(page, "model-in-use", DEFAULT)  # the picker at the top: the default model again, nothing reloads
    wait_text(page, "#status-line", "also loaded: tiny")
    assert f"{DEFAULT} · " in page.locator("#status-line").inner_text()  # in use (a progress timer may lead)
    wait_text(page, "#chat-stats", "· by tiny (transformers)")  # #30 (10): the stats name the model that wrote it
    reload(page)  # the chat opens with its last reply inspected as the model that wrote it read it
    page.get_by_text("Prompt and reproduce record (click a message; default: the last reply)").click()
    wait_text(page, "#chat-inspect-note", "of the 256-token context", 30_000)  # tiny's, not the default's 8,192
    page.locator("#chat-new").click()
    page.wait_for_function("() => !document.querySelector('#chat-log [data-testid=bot]')")
    send(page, "What is the capital of France?")
    assert wait_new_reply(page, 0).split("\n")[0] == first  # the same greedy reply as before the second model came
    page.close()


def test_ab_puts_a_model_on_each_side_and_a_batch_compares_them(server, browser):
    page = open_page(browser, server.url)
    tab(page, "A/B")
    page.locator("#ab-prompt textarea").fill("Hello")
    choose(page, "ab-b-preset", "current parameters")
    choose(page, "ab-a-model", DEFAULT)
    choose(page, "ab-b-model", "tiny")
    page.locator("#ab-run").click()
    wait_text(page, "#ab-a-stats", "finish:", LONG)
    wait_text(page, "#ab-b-stats", "finish:", LONG)
    a, b = (page.locator(f"#ab-{s}-output textarea").input_value() for s in "ab")
    assert a and b and a != b
    tab(page, "Batch")
    page.locator("#batch-prompts textarea").fill("Hello\nName a colour.")
    page.locator("#batch-axes textarea").fill(f"model={DEFAULT},tiny\nmax_new_tokens=3")
    page.locator("#batch-run").click()
    wait_text(page, "#batch-progress", "Finished: 4/4", LONG)
    assert f"model={DEFAULT}" in page.locator("#batch-results").inner_text()
    page.get_by_role("tab", name="Summary").click()
    wait_text(page, "#batch-summary", "model=tiny (all settings)", 30_000)
    summary = page.locator("#batch-summary").inner_text()
    assert f"model={DEFAULT}" in summary
    page.locator("#batch-axes textarea").fill("model=nope")
    page.locator("#batch-run").click()
    wait_text(page, "body", f"the model 'nope' is not loaded; loaded: {DEFAULT}, tiny")
    screenshot(page, "several-models-batch")
    page.close()


def test_unloading_the_model_in_use_leaves_the_other(server, browser):
    page = open_page(browser, server.url)
    tab(page, "Model")
    wait_text(page, "#model-loaded", "tiny")
    page.locator("#model-unload").click()  # the model in use (the default model, picked in the first test)
    wait_text(page, "#model-loaded", "● in use\ttiny", LONG)
    assert DEFAULT not in page.locator("#model-loaded").inner_text()
    wait_text(page, "#status-line", "tiny")
    page.close()
