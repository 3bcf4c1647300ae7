"""The Model tab with the optional backends: chat through llama.cpp, and a GPTQ quantize job's progress/errors."""

from __future__ import annotations

import importlib.util

import pytest

from tests.ui.pages import (LONG, choose, open_page, screenshot, send, set_number, tab, toast, wait_reply_done,
                            wait_text)

pytestmark = pytest.mark.browser


@pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None,
                    reason="the llamacpp extra is not installed (python launch.py install llamacpp)")
def test_load_the_default_gguf_with_llama_cpp_and_chat(server, browser):
    page = open_page(browser, server.url)
    tab(page, "Model")
    choose(page, "model-loader", "llamacpp")
    page.locator("#model-load").click()
    wait_text(page, "#model-info", "loader llamacpp", LONG)
    wait_text(page, "#model-info", "q4_1")
    wait_text(page, "#status-line", "llamacpp", 30_000)
    send(page, "Hello!")
    assert "finish:" in wait_reply_done(page)
    screenshot(page, "model-llamacpp")
    tab(page, "Model")
    choose(page, "model-loader", "auto (from what the model holds; the default model: transformers)")
    page.locator("#model-load").click()
    wait_text(page, "#model-info", "loader transformers", LONG)
    page.close()


def test_quantize_job_shows_its_progress_and_a_clear_failure(server, browser):
    page = open_page(browser, server.url)
    tab(page, "Model")
    page.get_by_text("Install a loader backend · make a GPTQ model").click()
    choose(page, "quantize-model", "SmolLM2-135M-Instruct")
    set_number(page, "quantize-group", 100)
    page.locator("#quantize-start").click()
    wait_text(page, "#job-status", "Failed: quantizing SmolLM2-135M-Instruct (exit code 2", LONG)
    log = page.locator("#job-log textarea").input_value()
    assert "group size 100 does not divide" in log or "install gptq" in log
    screenshot(page, "model-quantize-error")
    page.close()


@pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None,
                    reason="the llamacpp extra is not installed (python launch.py install llamacpp)")
def test_the_loaders_own_options_form_estimate_refusal_and_memory(server, browser):
    page = open_page(browser, server.url)
    tab(page, "Model")
    # auto picks transformers for the default model: its options are shown, llama.cpp's are not
    page.wait_for_selector("#load-options-transformers", state="visible")
    assert not page.locator("#load-options-llamacpp").is_visible()
    choose(page, "model-loader", "llamacpp")
    page.wait_for_selector("#load-options-llamacpp", state="visible")
    wait_text(page, "#model-estimate", "needs about")
    before = page.locator("#model-estimate").inner_text()
    set_number(page, "load-llamacpp-n_ctx", 1024)
    page.wait_for_function("b => document.querySelector('#model-estimate').innerText !== b", arg=before)
    # a combination llama.cpp cannot run is refused at load, naming the fix; the model in use stays
    choose(page, "load-llamacpp-cache_type", "q4_0")
    choose(page, "load-llamacpp-flash_attn", "off")
    page.locator("#model-load").click()
    toast(page, "needs flash attention; set flash_attn to auto or on")
    wait_text(page, "#model-info", "loader transformers")
    choose(page, "load-llamacpp-flash_attn", "auto")
    page.locator("#model-load").click()
    wait_text(page, "#model-info", "loader llamacpp", LONG)
    wait_text(page, "#model-info", "context length: 1024 tokens")
    wait_text(page, "#model-info", "n_ctx=1024")
    screenshot(page, "model-load-options")
    page.close()
    # remembered for this model on this loader: a new page shows the values it was loaded with
    page = open_page(browser, server.url)
    tab(page, "Model")
    choose(page, "model-loader", "llamacpp")
    page.wait_for_function("() => document.querySelector('#load-llamacpp-n_ctx input').value === '1024'")
    assert page.locator("#load-llamacpp-cache_type input").input_value() == "q4_0"
    choose(page, "model-loader", "auto (from what the model holds; the default model: transformers)")
    page.locator("#model-load").click()
    wait_text(page, "#model-info", "loader transformers", LONG)
    page.close()
