"""`python launch.py` for real: flags, a served page driven in Debian's chromium, restarts, bad start-up input."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.e2e.server import CHROMIUM_ARGS, running_server, user_data_with_default_model

ARTIFACTS = ROOT / "tests" / "artifacts"

pytestmark = pytest.mark.real_model


def test_help_lists_every_flag():
    out = subprocess.run([sys.executable, str(ROOT / "launch.py"), "--help"], capture_output=True, text=True,
                         check=True).stdout
    for flag in ("--model", "--loader", "--models-dir", "--user-data-dir", "--listen", "--port", "--api",
                 "--api-port", "--api-key", "--lora", "--device", "--dtype", "--threads"):
        assert flag in out, flag


@pytest.mark.parametrize("args,message", [
    (["--model", "nope"], "unknown model 'nope'"),
    (["--model", "/nonexistent/model"], "does not exist"),
    (["--dtype", "float64"], "invalid choice"),
    (["--loader", "nope"], "unknown loader 'nope'"),
])
def test_bad_startup_input_exits_with_a_clear_message(tmp_path, default_model_dir, args, message):
    user_data = user_data_with_default_model(tmp_path / "data", default_model_dir)
    proc = subprocess.run([sys.executable, str(ROOT / "launch.py"), "--user-data-dir", str(user_data),
                           "--port", "1", *args], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode != 0
    assert message in proc.stderr


@pytest.fixture(scope="module")
def server(tmp_path_factory, default_model_dir):
    user_data = user_data_with_default_model(tmp_path_factory.mktemp("launch") / "data", default_model_dir)
    with running_server(user_data) as (url, log):
        yield url, log, user_data


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS, headless=True)
        yield b
        b.close()


def open_page(browser, url):
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(url)
    page.wait_for_selector("#prompt textarea", timeout=60_000)
    return page


def choose_preset(page, name: str) -> None:
    page.locator("#preset input").click()
    page.get_by_role("option", name=name).click()


def output_text(page) -> str:
    return page.locator("#output textarea").input_value()


@pytest.mark.browser
def test_prompt_streams_an_answer_in_the_browser(server, browser):
    url, log, _ = server
    page = open_page(browser, url)
    choose_preset(page, "Deterministic")
    page.wait_for_function(
        "() => document.querySelector('#params-temperature input[type=number]').value === '0'", timeout=30_000)
    page.locator("#prompt textarea").fill("What is the capital of France?")
    page.locator("#params-max_new_tokens input").fill("12")
    page.locator("#generate").click()
    page.wait_for_function("() => document.querySelector('#stats')?.innerText.includes('finish')",
                           timeout=120_000)
    assert "Paris" in output_text(page)
    assert "Model: SmolLM2-135M-Instruct" in page.locator("#status-line").inner_text()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "playground.png"), full_page=True)
    page.close()


@pytest.mark.browser
def test_stop_button_cancels_the_generation(server, browser):
    url, _, _ = server
    page = open_page(browser, url)
    page.locator("#prompt textarea").fill("Write a very long story about a dragon.")
    page.locator("#params-max_new_tokens input").fill("2000")
    page.locator("#params-ban_eos input").check()
    page.locator("#generate").click()
    page.wait_for_function("() => document.querySelector('#output textarea').value.length > 20", timeout=120_000)
    page.locator("#stop").click()
    page.wait_for_function("() => document.querySelector('#stats')?.innerText.includes('cancelled')",
                           timeout=60_000)
    tokens = int(page.locator("#stats").inner_text().split(" tokens")[0])
    assert tokens < 2000
    page.close()


@pytest.mark.browser
def test_preset_moves_the_sliders(server, browser):
    url, _, _ = server
    page = open_page(browser, url)
    choose_preset(page, "Precise")
    page.wait_for_function(
        "() => document.querySelector('#params-top_k input[type=number]').value === '40'", timeout=30_000)
    assert page.locator("#params-temperature input[type=number]").input_value() == "0.3"
    page.close()


def test_second_start_skips_conversion(tmp_path, default_model_dir):
    user_data = user_data_with_default_model(tmp_path / "data", default_model_dir)
    with running_server(user_data) as (_, log):
        pass
    text = log.read_text()
    assert "converting" not in text and "Workbench ready" in text
