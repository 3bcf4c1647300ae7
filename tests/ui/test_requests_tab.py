"""The Requests tab (#33) in a real browser: an app's requests (the official client, in a thread) appear within a
second or two, the one clicked is shown as sent and as the model saw it, Replay gives the same reply, a replay
with changes is shown beside the original, and Delete takes one away. A batch job an app starts shows in the
Batch tab's "API batches" with its progress (#45)."""

from __future__ import annotations

import json
import re
import threading

import openai
import pytest

from tests.e2e.server import free_port, running_server, user_data_with_default_model
from tests.ui.pages import LONG, open_page, screenshot, tab, wait_text

pytestmark = [pytest.mark.real_model, pytest.mark.browser]

MODEL = "SmolLM2-135M-Instruct"
WEATHER_TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


@pytest.fixture(scope="module")
def server(tmp_path_factory, default_model_dir):
    user_data = user_data_with_default_model(tmp_path_factory.mktemp("requests-tab") / "data", default_model_dir)
    port = free_port()
    with running_server(user_data, "--api", "--api-port", str(port)) as srv:
        srv.api = f"http://127.0.0.1:{port}/v1"
        yield srv


def click_row(page, id_start: str) -> None:
    """Click the id cell of the row whose request id starts with ``id_start``."""
    cells = page.locator("#requests-table [role='gridcell']")
    index = page.evaluate("s => Array.from(document.querySelectorAll(\"#requests-table [role='gridcell']\"))"
                          ".findIndex(c => c.innerText.trim().startsWith(s))", id_start)
    assert index >= 0, f"no row's id starts with {id_start}"
    cells.nth(index).click()


def test_an_apps_requests_appear_show_replay_and_go(server, browser):
    page = open_page(browser, server.url)
    tab(page, "Requests")
    wait_text(page, "#requests-note", "Keeping only requests that ask", 30_000)
    page.locator("#requests-capture input").check()
    wait_text(page, "#requests-note", "Keeping every API request", 30_000)
    answers = {}

    def app() -> None:  # somebody's app, calling the API while the page is open
        client = openai.OpenAI(base_url=server.api, api_key="none", max_retries=0)
        answers["good"] = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "What is the weather in Oslo?"}], tools=[WEATHER_TOOL],
            temperature=0, max_tokens=10)
        try:
            client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hi"}], temperature=-3)
        except openai.BadRequestError as exc:
            answers["bad"] = exc

    thread = threading.Thread(target=app)
    thread.start()
    thread.join(120)
    assert "good" in answers and "bad" in answers
    good = answers["good"].id
    page.wait_for_function("id => { const t = document.querySelector('#requests-table').innerText;"
                           " return t.includes(id) && t.includes('\\n400\\n'); }", arg=good,
                           timeout=5_000)  # both, within the table's refresh (every second)
    click_row(page, good)
    wait_text(page, "#requests-summary", "status 200", 30_000)
    assert "get_weather" in page.locator("#requests-sent").inner_text()  # as sent, tools and all
    seen = page.locator("#requests-prompt textarea").input_value()
    assert "<|im_start|>user\nWhat is the weather in Oslo?<|im_end|>" in seen and "get_weather" in seen
    reply = page.locator("#requests-reply textarea").input_value()
    assert reply == (answers["good"].choices[0].message.content or "") or "get_weather(" in reply
    page.get_by_text("Tokens of the reply (the model").click()
    page.locator("#requests-show-tokens").click()
    page.wait_for_function("() => document.querySelectorAll('#requests-tokens .tv-tok').length > 0", timeout=60_000)
    shown = page.evaluate("() => Array.from(document.querySelectorAll('#requests-tokens .tv-tok'))"
                          ".map(t => t.firstChild.textContent).join('')")
    assert shown.replace("↵", "\n").startswith(reply[:10])  # the reply's own tokens, each with its probability
    first = page.evaluate("() => document.querySelector('#requests-tokens .tv-tok').getAttribute('aria-label')")
    assert first.endswith("after processors 100.0%")  # temperature 0: drawn from all mass on the chosen token
    page.locator("#requests-replay").click()
    wait_text(page, "#requests-replay-summary", "the same reply as the original", 120_000)
    assert page.locator("#requests-replayed textarea").input_value() == reply
    page.locator("#requests-changes textarea").fill('{"temperature": 1.5, "seed": 4, "max_tokens": 6}')
    page.locator("#requests-replay").click()
    wait_text(page, "#requests-replay-summary", "replay of", 120_000)
    page.wait_for_function("() => document.querySelector('#requests-replay-summary').innerText.includes('replay of')"
                           " && document.querySelector('#requests-replay-summary').innerText.includes('Replayed')")
    assert page.locator("#requests-reply textarea").input_value() == reply  # the original stays beside it
    replayed = re.search(r"Replayed as (\S+):", page.locator("#requests-replay-summary").inner_text()).group(1)
    page.wait_for_function("id => document.querySelector('#requests-table').innerText.includes(id)",
                           arg=replayed.strip("`"), timeout=5_000)  # the replays are listed too (then it stays still)
    screenshot(page, "requests")
    page.locator("#requests-to-notebook").click()  # the prompt as the model saw it, to continue
    page.wait_for_function("() => (document.querySelector('#notebook-text textarea')?.value ?? '')"
                           ".endsWith('What is the weather in Oslo?<|im_end|>\\n<|im_start|>assistant\\n')",
                           timeout=30_000)
    tab(page, "Requests")
    page.locator("#requests-to-insight").click()  # the same prompt, raw, to look at the next token
    page.wait_for_function("() => (document.querySelector('#insight-text textarea')?.value ?? '')"
                           ".includes('What is the weather in Oslo?<|im_end|>')", timeout=30_000)
    tab(page, "Requests")
    page.locator("#requests-to-chat").click()  # a new chat: the messages and the reply
    wait_text(page, "#chat-log", "What is the weather in Oslo?", 30_000)
    wait_text(page, "#chat-log", reply.split("\n")[0][:20], 30_000)
    tab(page, "Requests")
    page.locator("#requests-to-batch").click()  # every request listed: a batch test case each
    page.wait_for_function("() => (document.querySelector('#batch-prompts textarea')?.value ?? '').split('\\n')"
                           ".length === 3", timeout=30_000)  # the good one and its two replays; not the refused one
    assert page.locator("#batch-raw input").is_checked()
    lines = page.locator("#batch-prompts textarea").input_value().split("\n")
    assert all(line.startswith("<|im_start|>system\\n") and "Oslo" in line for line in lines)
    page.locator("#batch-axes textarea").fill("max_new_tokens=4")
    page.locator("#batch-run").click()
    wait_text(page, "#batch-progress", "Finished: 3/3 rows", 120_000)
    tab(page, "Requests")
    click_row(page, "req-")  # the refused one: no completion, so a request id
    wait_text(page, "#requests-summary", "status 400", 30_000)
    assert "temperature must be in" in page.locator("#requests-reply textarea").input_value()
    page.locator("#requests-delete").click()
    page.wait_for_function("() => !document.querySelector('#requests-table').innerText.includes('\\n400\\n')",
                           timeout=30_000)
    page.locator("#requests-changes textarea").fill("{temperature")
    click_row(page, good)
    wait_text(page, "#requests-summary", "status 200", 30_000)
    page.locator("#requests-replay").click()
    page.get_by_text("Changes must be a JSON object").first.wait_for(timeout=30_000)
    page.close()


def test_an_apps_batch_job_shows_in_the_batch_tab_with_its_progress(server, browser):
    """A batch an app starts through /v1/batches is listed in the Batch tab's "API batches" beside the tab's own
    runs; the list follows its progress by itself to the end, and a click shows it in words."""
    client = openai.OpenAI(base_url=server.api, api_key="none", max_retries=0)
    rows = [{"custom_id": f"q{i}", "method": "POST", "url": "/v1/chat/completions",
             "body": {"model": MODEL, "max_tokens": 4, "temperature": 0,
                      "messages": [{"role": "user", "content": f"Count to {i + 2}."}]}} for i in range(6)]
    uploaded = client.files.create(file=("rows.jsonl", "".join(json.dumps(r) + "\n" for r in rows).encode()),
                                   purpose="batch")
    page = open_page(browser, server.url)
    tab(page, "Batch")
    tab(page, "API batches")
    wait_text(page, "#batch-api-note", "batches", 30_000)  # none yet, or an earlier test's
    batch = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                                  completion_window="24h")
    page.locator("#batch-api-refresh").click()
    wait_text(page, "#batch-api-batches", batch.id, 30_000)
    wait_text(page, "#batch-api-batches", "6 / 6 (100%)", LONG)  # refreshed by itself while it ran
    wait_text(page, "#batch-api-batches", "completed", 30_000)
    page.locator("#batch-api-batches [role='gridcell']", has_text=batch.id).first.click()
    wait_text(page, "#batch-api-detail", "Output file file-", 30_000)  # (the id in code)
    assert client.batches.retrieve(batch.id).request_counts.completed == 6
    screenshot(page, "api-batches")
    page.close()


def test_the_promptfoo_export_keeps_a_replays_seed_and_the_tools(server, browser, tmp_path):
    """#46 items 10 and 11: a request with tools, replayed with seed 3 (the replay line names the change), exported
    as a promptfoo suite: the replay's provider
    has seed 3 and both have the tools, and our reader reads them back (the suite sends them again as they were)."""
    import yaml

    from tests.ui.pages import export_file
    from webui.batch.promptfoo.reader import load_config

    page = open_page(browser, server.url)
    tab(page, "Requests")
    page.locator("#requests-capture input").check()
    wait_text(page, "#requests-note", "Keeping every API request", 30_000)
    client = openai.OpenAI(base_url=server.api, api_key="none", max_retries=0)
    sent = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Weather in Bergen?"}],
                                          tools=[WEATHER_TOOL], temperature=0.5, max_tokens=6, stop=["\n\n"])
    page.wait_for_function("id => document.querySelector('#requests-table').innerText.includes(id)", arg=sent.id,
                           timeout=30_000)
    click_row(page, sent.id)
    wait_text(page, "#requests-summary", "status 200", 30_000)
    page.locator("#requests-changes textarea").fill('{"seed": 3}')
    page.locator("#requests-replay").click()
    wait_text(page, "#requests-replay-summary", "Replayed as", 120_000)
    assert "; changed seed 3 (was not sent)." in page.locator("#requests-replay-summary").inner_text()  # item 11
    page.locator("#requests-text input, #requests-text textarea").first.press_sequentially("Bergen", delay=30)
    saved = export_file(page, "requests-to-promptfoo", "requests-suite-file", tmp_path / "promptfooconfig.yaml")
    suite = yaml.safe_load(saved.read_text())
    assert len(suite["prompts"]) == 2 and all(p["config"] == {"temperature": 0.5, "max_tokens": 6, "stop": ["\n\n"]}
                                              for p in suite["prompts"])
    configs = [p["config"] for p in suite["providers"]]
    assert configs == [{"tools": [WEATHER_TOOL]}, {"seed": 3, "tools": [WEATHER_TOOL]}]
    _, rows, settings = load_config(saved)
    assert [s.params.seed for s in settings][1] == 3 and all(s.prompt and s.prompt.tools for s in settings)
    page.close()
