"""The Model tab with the optional backends: chat through llama.cpp, and a GPTQ quantize job's progress/errors;
the memory budget's line, warning and refusals; the form on a narrow window."""

from __future__ import annotations

import importlib.util
import re

import httpx
import pytest

from tests.e2e.server import free_port, running_server, user_data_with_default_model
from tests.ui.pages import (LONG, choose, open_page, screenshot, send, set_number, tab, toast,
                            wait_reply_done, wait_text)

pytestmark = pytest.mark.browser
needs_llama_cpp = pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None,
                                     reason="the llamacpp extra is not installed (python launch.py install llamacpp)")
AUTO = "auto (from what the model holds; the default model: transformers)"
BUDGET = 1500
"""MiB (--memory-budget): the default model in float32 (about 520 MiB) and a small llama.cpp load fit side by side;
a llama.cpp context of 1,000,000 tokens (over 6 GiB of KV cache, even quantized to q4_0) never fits."""


@pytest.fixture(scope="module")
def server(tmp_path_factory, default_model_dir):
    user_data = user_data_with_default_model(tmp_path_factory.mktemp("model_backends") / "data", default_model_dir)
    api_port = free_port()
    with running_server(user_data, "--memory-budget", str(BUDGET), "--api", "--api-port", str(api_port)) as srv:
        srv.user_data, srv.api = user_data, f"http://127.0.0.1:{api_port}"
        yield srv


def type_number(page, elem_id: str, value: int) -> None:
    """Select the number box's text and type ``value`` as a person would, then leave the box."""
    box = page.locator(f"#{elem_id} input")
    box.click()
    box.press("Control+a")
    box.press_sequentially(str(value), delay=60)
    box.press("Tab")


def free_and_used(page) -> tuple[int, int]:
    """(what the estimate line says the budget has free, what the loaded-models table says they take), MiB."""
    number = lambda pattern, sel: int(re.search(pattern, page.locator(sel).inner_text()).group(1)  # noqa: E731
                                      .replace(",", ""))
    return (number(r"budget has ([\d,]+) MiB free", "#model-estimate"),
            number(r"Loaded models take ([\d,]+) MiB", "#model-loaded"))


def wait_memory_line_fresh(page) -> int:
    """Wait until the estimate line's free memory is the budget less what the loaded models take; return it."""
    page.wait_for_function(r"""budget => {
        const free = /budget has ([\d,]+) MiB free/.exec(document.querySelector('#model-estimate').innerText);
        const used = /Loaded models take ([\d,]+) MiB/.exec(document.querySelector('#model-loaded').innerText);
        return free && used && Math.abs(budget - (+used[1].replace(/,/g, '')) - (+free[1].replace(/,/g, ''))) <= 1;
    }""", arg=BUDGET, timeout=30_000)
    return free_and_used(page)[0]


@needs_llama_cpp
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


@needs_llama_cpp
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


def wait_loaded_table(page, has: bool) -> None:
    """Wait until the loaded-models table lists the default model on llama.cpp (``has``) or does not."""
    page.wait_for_function("has => document.querySelector('#model-loaded').innerText.includes('@llamacpp') === has",
                           arg=has, timeout=LONG)


@needs_llama_cpp
def test_the_memory_line_is_recomputed_after_a_load_a_switch_and_an_unload(server, browser):
    page = open_page(browser, server.url)
    tab(page, "Model")
    wait_text(page, "#model-estimate", "free of 1,500 MiB")
    if "@llamacpp" in page.locator("#model-loaded").inner_text():  # left by an earlier test: the default model alone
        choose(page, "model-in-use", "SmolLM2-135M-Instruct@llamacpp")
        wait_text(page, "#model-info", "loader llamacpp")
        page.locator("#model-unload").click()
        wait_loaded_table(page, False)
    alone = wait_memory_line_fresh(page)
    choose(page, "model-loader", "llamacpp")
    type_number(page, "load-llamacpp-n_ctx", 2048)
    wait_text(page, "#model-estimate", "needs about")
    page.locator("#model-load").click()  # beside the default model
    wait_text(page, "#model-info", "loader llamacpp", LONG)
    wait_loaded_table(page, True)
    beside = wait_memory_line_fresh(page)
    assert beside < alone
    screenshot(page, "model-memory-line")
    choose(page, "model-in-use", "SmolLM2-135M-Instruct")  # a switch: the same models, the same memory
    wait_text(page, "#model-info", "loader transformers")
    assert wait_memory_line_fresh(page) == beside
    choose(page, "model-in-use", "SmolLM2-135M-Instruct@llamacpp")
    wait_text(page, "#model-info", "loader llamacpp")
    page.locator("#model-unload").click()  # the llama.cpp one, in use
    wait_loaded_table(page, False)
    assert wait_memory_line_fresh(page) > beside
    tab(page, "Chat")  # loaded elsewhere (the API, another browser tab): opening the Model tab shows it
    load = {"model_name": "SmolLM2-135M-Instruct", "loader": "llamacpp", "options": {"n_ctx": 2048},
            "make_current": False}
    assert httpx.post(f"{server.api}/v1/internal/model/load", json=load, timeout=300).status_code == 200
    tab(page, "Model")
    wait_loaded_table(page, True)
    assert wait_memory_line_fresh(page) == beside
    assert httpx.post(f"{server.api}/v1/internal/model/unload", timeout=60,
                      json={"model_name": "SmolLM2-135M-Instruct@llamacpp"}).status_code == 200
    page.close()


@needs_llama_cpp
def test_a_load_that_never_fits_is_warned_of_and_its_refusal_stays_and_says_what_helps(server, browser):
    page = open_page(browser, server.url)
    tab(page, "Model")
    choose(page, "model-loader", AUTO)
    page.wait_for_selector("#model-dtype", state="visible")  # transformers takes a dtype
    choose(page, "model-loader", "llamacpp")
    page.wait_for_selector("#model-dtype", state="hidden")  # a GGUF runs in the types it holds
    type_number(page, "load-llamacpp-n_ctx", 1000000)  # whatever KV cache type an earlier test left
    wait_text(page, "#model-estimate", "More than the whole memory budget", 30_000)
    warning = page.locator("#model-estimate").inner_text()
    assert "n_ctx" in warning and "cache_type q8_0 or q4_0" in warning and "--memory-budget" in warning
    page.locator("#model-load").click()
    wait_text(page, "#model-message", "more than the whole 1,500 MiB memory budget", 60_000)
    refusal = page.locator("#model-message").inner_text()
    assert "cannot load even with every other model unloaded" in refusal and "n_ctx" in refusal
    assert "unload one" not in refusal and "without keeping" not in refusal
    page.wait_for_timeout(9_000)  # a toast would be gone by now; the line stays
    assert "more than the whole" in page.locator("#model-message").inner_text()
    screenshot(page, "model-never-fits")
    choose(page, "model-loader", AUTO)
    page.wait_for_selector("#model-dtype", state="visible")
    page.wait_for_function("() => !document.querySelector('#model-estimate').innerText.includes('⚠')",
                           timeout=30_000)  # transformers' estimate fits
    page.locator("#model-load").click()  # the next action: the line goes
    page.wait_for_function("() => document.querySelector('#model-message').innerText.trim() === ''",
                           timeout=30_000)
    wait_text(page, "#model-info", "loader transformers", LONG)
    assert page.locator("#model-message").inner_text().strip() == ""
    page.close()


def test_the_load_options_fit_a_narrow_window(server, browser):
    page = browser.new_page(viewport={"width": 800, "height": 1000})
    page.goto(server.url)
    page.wait_for_selector("#chat-message textarea", timeout=60_000)
    tab(page, "Model")
    choose(page, "model-loader", AUTO)
    page.wait_for_selector("#load-transformers-trust_remote_code", state="visible")
    cut = page.evaluate("""() => {
        const box = document.querySelector('#load-transformers-trust_remote_code');
        const form = document.querySelector('#load-options-transformers').getBoundingClientRect();
        const out = [];
        for (const e of [box, ...box.querySelectorAll('label, span, div.info-text')]) {
            const r = e.getBoundingClientRect();
            if (e.scrollWidth > e.clientWidth + 1 || r.right > form.right + 1 || r.left < form.left - 1)
                out.push(e.className + ': ' + e.innerText.slice(0, 40));
        }
        return out; }""")
    assert cut == [], f"cut off at 800 px: {cut}"
    label = page.locator("#load-transformers-trust_remote_code").get_by_text("trust remote code", exact=True)
    assert label.bounding_box()["width"] > 100  # on one line, not a word per line
    screenshot(page, "model-options-800px")
    page.close()


@pytest.mark.skipif(importlib.util.find_spec("exllamav2") is not None, reason="exllamav2 is installed here")
def test_an_unavailable_loader_is_marked_and_shows_why_and_how_to_install_not_an_estimate(server, browser):
    """#46 item 11: choosing a loader whose package is missing shows why and how to install it, not an estimate."""
    page = open_page(browser, server.url)
    tab(page, "Model")
    wait_text(page, "#model-estimate", "needs about", 30_000)
    page.locator("#model-loader input").click()
    option = page.locator("#model-loader").get_by_role("option", name=re.compile(r"^exllamav2 — unavailable: "))
    option.click()
    wait_text(page, "#model-estimate", "The exllamav2 loader is unavailable", 30_000)
    said = page.locator("#model-estimate").inner_text()
    assert "Install: python launch.py install exllamav2" in said and "needs about" not in said
    page.close()
