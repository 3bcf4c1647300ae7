"""The workbench in a real browser (Debian's chromium) against `python launch.py` with the real default model."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest

from tests.conftest import random_lora
from tests.e2e.server import running_server, user_data_with_default_model
from tests.ui.pages import (LONG, TEMPERATURE, bot_messages, choose, choose_preset, code_text, export_file,
                            last_reply, open_page, ready_page, reload, reload_parameters, reply_so_far, reply_when,
                            rows, screenshot, send, tab, toast, upload_file, wait_new_reply, wait_reply_done,
                            wait_streaming, wait_text)

pytestmark = [pytest.mark.real_model, pytest.mark.browser]


def make_user_data(root: Path, default_model_dir: Path) -> Path:
    user_data = user_data_with_default_model(root / "data", default_model_dir)
    broken = user_data / "models" / "broken"
    broken.mkdir(parents=True)
    (broken / "config.json").write_text("{}")
    presets = user_data / "presets"
    presets.mkdir(parents=True, exist_ok=True)
    (presets / "Broken.yaml").write_text("temperature: 0.5\ntop_q: 0.9\n")
    random_lora(default_model_dir, user_data / "loras" / "noisy")
    return user_data


@pytest.fixture(scope="module")
def server(tmp_path_factory, default_model_dir):
    user_data = make_user_data(tmp_path_factory.mktemp("ui"), default_model_dir)
    with running_server(user_data) as srv:
        srv.user_data = user_data
        yield srv


def test_chat_reply_streams_in_and_is_stored(server, browser):
    page = ready_page(browser, server.url, max_new_tokens=40)
    send(page, "What is the capital of France? Tell me about it.")  # a reply long enough to watch it grow
    lengths = set()
    deadline = time.monotonic() + LONG / 1000
    while "finish:" not in page.locator("#chat-stats").inner_text() and time.monotonic() < deadline:
        lengths.add(len(reply_so_far(page)))
        time.sleep(0.05)
    stats = wait_reply_done(page)
    assert len(lengths) >= 2, "the reply should appear piece by piece"
    assert "Paris" in bot_messages(page)[-1] and "tok/s" in stats
    _, content, stats_json = last_reply(server.user_data, "What is the capital of France? Tell me about it.")
    assert "Paris" in content and json.loads(stats_json)["params"]["temperature"] == 0.0
    screenshot(page, "chat")
    page.close()


def test_enter_sends_and_shift_enter_adds_a_line(server, browser):
    """The Message box does what its placeholder says (a new user's first try)."""
    page = ready_page(browser, server.url, max_new_tokens=2)
    box = page.locator("#chat-message textarea")
    box.click()
    box.type("first line")
    box.press("Shift+Enter")
    box.type("second line")
    assert box.input_value() == "first line\nsecond line"
    box.press("Enter")
    wait_text(page, "#chat-log", "second line")
    wait_reply_done(page)
    assert box.input_value() == ""
    assert any("first line" in m and "second line" in m
               for m in page.locator("#chat-log [data-testid='user']").all_inner_texts())
    page.close()


def test_stop_cancels_only_this_generation(server, browser):
    page = ready_page(browser, server.url, max_new_tokens=2000)
    tab(page, "Parameters")
    page.locator("#params-ban_eos input").check()
    send(page, "Tell me a very long story about a dragon.")
    wait_streaming(page, 40)
    page.locator("#chat-stop").click()
    stats = wait_reply_done(page, 60_000)
    assert "finish: cancelled" in stats and int(stats.split(" tokens")[0]) < 2000
    tab(page, "Parameters")
    page.locator("#params-ban_eos input").uncheck()
    page.close()


def test_regenerate_at_temperature_zero_gives_the_same_reply(server, browser):
    page = ready_page(browser, server.url, max_new_tokens=16)
    send(page, "Name three colors.")
    wait_reply_done(page)
    first_id, first_text, _ = last_reply(server.user_data, "Name three colors.")
    page.locator("#chat-regenerate").click()
    reply = reply_when(server.user_data, "Name three colors.", lambda r: r[0] != first_id and r[2] is not None)
    assert reply[0] != first_id and reply[1] == first_text
    wait_reply_done(page)
    assert len(bot_messages(page)) == 1
    page.close()


def test_preset_moves_the_sliders_and_the_next_reply_uses_them(server, browser):
    page = ready_page(browser, server.url, preset="Precise", temperature="0.3", max_new_tokens=6)
    tab(page, "Parameters")
    assert page.locator("#params-top_k input[data-testid=number-input]").input_value() == "40"
    screenshot(page, "parameters")
    send(page, "Say hello.")
    wait_reply_done(page)
    params = json.loads(last_reply(server.user_data, "Say hello.")[2])["params"]
    assert (params["temperature"], params["top_k"], params["top_p"], params["max_new_tokens"]) == (0.3, 40, 0.85, 6)
    page.close()


def test_parameters_persist_across_reload(server, browser):
    page = ready_page(browser, server.url, max_new_tokens=33)
    reload_parameters(page, "33")
    assert page.locator(TEMPERATURE).input_value() == "0"
    stop = page.locator("#params-stop textarea")
    stop.focus()
    page.keyboard.insert_text("END")  # what a paste does: no key presses
    bias = page.locator("#params-logit_bias textarea, #params-logit_bias input").first
    bias.fill('{"2": -100}')
    bias.press("Control+a")
    bias.press("Delete")
    page.wait_for_function("() => !document.querySelector('#preset input').value", timeout=30_000)  # edited
    page.wait_for_timeout(1000)
    reload(page)
    tab(page, "Parameters")
    page.wait_for_function("() => document.querySelector('#params-stop textarea').value === 'END'", timeout=30_000)
    assert bias.input_value() == ""
    stop.fill("")
    page.close()


def test_the_sampler_order_is_shown_and_a_new_order_is_kept(server, browser):
    page = ready_page(browser, server.url, max_new_tokens=4)
    choose_preset(page, "Balanced", "0.7")
    wait_text(page, "#params-running", "repetition_penalty → temperature → top_p → min_p", 30_000)
    page.locator("#params-group-temperature-shaping").get_by_text("Temperature shaping").first.click()  # unfold
    page.locator("#params-dynamic_temperature input").wait_for(state="visible", timeout=10_000)
    order = page.locator("#params-sampler_priority textarea")
    order.fill("min_p\ntemperature")
    wait_text(page, "#params-running", "repetition_penalty → top_p → min_p → temperature", 30_000)
    bans = page.locator("#params-custom_token_bans textarea, #params-custom_token_bans input").first
    bans.focus()
    page.keyboard.insert_text("9, 5")  # a paste: no key presses
    wait_text(page, "#params-running", "token_bans → repetition_penalty", 30_000)
    screenshot(page, "parameters-order")
    page.wait_for_timeout(1000)
    reload(page)
    tab(page, "Parameters")
    wait_text(page, "#params-running", "repetition_penalty → top_p → min_p → temperature", 30_000)
    assert order.input_value().splitlines()[-2:] == ["min_p", "temperature"]
    assert bans.input_value() == "5, 9"
    page.close()


def test_constrain_output_holds_the_reply_and_a_bad_one_loses_nothing(server, browser):
    page = ready_page(browser, server.url, max_new_tokens=8)
    tab(page, "Parameters")
    choose(page, "params-constraint-form", "choice (one a line)")
    text = page.locator("#params-constraint-text textarea")
    text.wait_for(state="visible", timeout=10_000)
    text.fill("Rome\nLondon\nParis")
    wait_text(page, "#params-running", "structured_outputs", 30_000)
    screenshot(page, "parameters-constraint")
    question = "What is the capital of France? One word."
    send(page, question)
    wait_reply_done(page)
    _, content, stats = last_reply(server.user_data, question)
    assert content in ("Rome", "London", "Paris")
    assert json.loads(stats)["params"]["structured_outputs"] == {"choice": ["Rome", "London", "Paris"]}
    tab(page, "Parameters")
    choose(page, "params-constraint-form", "JSON schema")  # the text is read as a schema now: not one
    wait_text(page, "#params-constraint-text", "structured_outputs: the JSON schema is not valid JSON", 30_000)
    page.wait_for_timeout(1000)
    reload(page)
    tab(page, "Parameters")  # the choice is what was kept
    page.wait_for_function("() => document.querySelector('#params-constraint-text textarea')?.value === "
                           "'Rome\\nLondon\\nParis'", timeout=30_000)
    page.wait_for_function("() => document.querySelector('#params-constraint-form input')?.value === "
                           "'choice (one a line)'", timeout=30_000)
    choose(page, "params-constraint-form", "none")
    page.wait_for_function("() => !document.querySelector('#params-running').innerText.includes('structured')",
                           timeout=30_000)
    page.close()


def test_an_instruction_template_is_chosen_previewed_saved_and_used(server, browser):
    page = ready_page(browser, server.url, max_new_tokens=4)
    page.locator("#chat-template-panel").get_by_text("Instruction template and context").first.click()  # unfold
    wait_text(page, "#chat-template-note", "own template", 30_000)
    choose(page, "chat-template", "User/Assistant")
    wait_text(page, "#chat-template-note", "Chats use the template 'User/Assistant'", 30_000)
    page.locator("#chat-message textarea").fill("Name a color.")
    page.locator("#chat-template-preview-button").click()
    page.wait_for_function("() => document.querySelector('#chat-template-preview').innerText.includes("
                           "'User: Name a color.')", timeout=30_000)
    assert code_text(page, "chat-template-preview").endswith("User: Name a color.\nAssistant:")
    screenshot(page, "chat-template")
    page.locator("#chat-send").click()
    wait_reply_done(page)
    stats = json.loads(last_reply(server.user_data, "Name a color.")[2])
    assert stats["chat_template"]["name"] == "User/Assistant" and "\nUser:" in stats["params"]["stop"]
    page.locator("#chat-template-name input, #chat-template-name textarea").first.fill("My plain")
    page.locator("#chat-template-save").click()  # the editor's text (the built-in's) as a template of my own
    wait_text(page, "#chat-template-note", "Chats use the template 'My plain'", 30_000)
    assert (server.user_data / "templates" / "My plain.jinja").is_file()
    reload(page)
    page.locator("#chat-template-panel").get_by_text("Instruction template and context").first.click()
    page.wait_for_function("() => document.querySelector('#chat-template input')?.value === 'My plain'",
                           timeout=30_000)
    page.locator("#chat-template-delete").click()
    wait_text(page, "#chat-template-note", "own template", 30_000)
    assert not (server.user_data / "templates" / "My plain.jinja").exists()
    page.locator("#chat-context-policy").get_by_text("refuse", exact=True).click()
    settings = server.user_data / "settings.json"
    deadline = time.monotonic() + 30
    while json.loads(settings.read_text())["context_policy"] != "refuse" and time.monotonic() < deadline:
        time.sleep(0.2)
    assert json.loads(settings.read_text())["context_policy"] == "refuse"
    page.locator("#chat-context-policy").get_by_text("drop oldest messages", exact=True).click()
    deadline = time.monotonic() + 30  # saved before the page goes: later tests fit chats by dropping turns
    while json.loads(settings.read_text())["context_policy"] != "drop oldest messages" and time.monotonic() < deadline:
        time.sleep(0.2)
    assert json.loads(settings.read_text())["context_policy"] == "drop oldest messages"
    page.close()


def test_start_reply_with_impersonate_and_send_to_notebook(server, browser):
    page = ready_page(browser, server.url, max_new_tokens=4)
    page.locator("#chat-start textarea, #chat-start input").first.fill("Blue is")
    send(page, "What color is the sky?")
    wait_reply_done(page)
    assert last_reply(server.user_data, "What color is the sky?")[1].startswith("Blue is")
    page.locator("#chat-start textarea, #chat-start input").first.fill("")
    page.locator("#chat-impersonate").click()
    page.wait_for_function("() => document.querySelector('#chat-message textarea').value.length > 0",
                           timeout=LONG)
    page.locator("#chat-use-params").click()
    wait_text(page, "#preset-note", "Parameters taken from a chat's last reply.", 30_000)
    assert json.loads((server.user_data / "settings.json").read_text())["params"]["max_new_tokens"] == 4
    page.locator("#chat-to-notebook").click()
    page.wait_for_function("() => { const t = document.querySelector('#notebook-text textarea');"  # the tab shows
                           " return t && t.value.includes('<|im_start|>assistant\\nBlue is'); }", timeout=30_000)
    # #30 (5): the text ends with the last reply itself, so Generate continues it (no second, empty reply opened)
    reply = last_reply(server.user_data, "What color is the sky?")[1]
    sent = page.locator("#notebook-text textarea").input_value()
    assert sent.endswith(reply) and sent.count("<|im_start|>assistant") == 1, sent[-200:]
    page.locator("#notebook-generate").click()
    wait_text(page, "#notebook-stats", "finish:")
    grown = page.locator("#notebook-text textarea").input_value()
    assert grown.startswith(sent) and grown.count("<|im_start|>assistant") == 1, grown[-200:]
    page.close()


def test_rename_search_and_delete(server, browser):
    page = ready_page(browser, server.url, max_new_tokens=4)
    send(page, "Where do penguins live?")
    wait_reply_done(page)
    page.locator("#chat-title textarea, #chat-title input").first.fill("Birds ../x")
    page.locator("#chat-rename").click()
    wait_text(page, "#chat-list", "Birds ../x", 30_000)
    search = page.locator("#chat-search textarea, #chat-search input").first
    search.fill("penguins")
    wait_text(page, "#chat-list", "Birds ../x", 30_000)
    search.fill("no-such-words-anywhere")
    page.wait_for_function("() => !document.querySelector('#chat-list').innerText.includes('Birds')",
                           timeout=30_000)
    search.fill("")
    wait_text(page, "#chat-list", "Birds ../x", 30_000)
    page.locator("#chat-delete").click()
    wait_text(page, "#chat-stats", "Confirm delete", 30_000)
    assert rows(server.user_data, "SELECT count(*) FROM chats WHERE title='Birds ../x'")[0][0] == 1
    page.locator("#chat-delete").click()
    page.wait_for_function("() => !document.querySelector('#chat-list').innerText.includes('Birds')",
                           timeout=30_000)
    assert rows(server.user_data, "SELECT count(*) FROM chats WHERE title='Birds ../x'")[0][0] == 0
    assert not list(server.user_data.rglob("x"))  # a title is never a path
    page.close()


def test_notebook_generates_undo_and_save(server, browser):
    page = ready_page(browser, server.url, max_new_tokens=8)
    tab(page, "Notebook")
    text = page.locator("#notebook-text textarea")
    text.fill("The capital of France is")
    page.locator("#notebook-generate").click()
    wait_text(page, "#notebook-stats", "finish:")
    generated = text.input_value()
    assert generated.startswith("The capital of France is") and len(generated) > len("The capital of France is")
    screenshot(page, "notebook")
    page.locator("#notebook-undo").click()
    page.wait_for_function("() => document.querySelector('#notebook-text textarea').value === "
                           "'The capital of France is'", timeout=30_000)
    name = page.locator("#notebook-name input")
    name.fill("geo")
    page.locator("#notebook-save").click()
    wait_text(page, "#notebook-stats", "Saved 'geo'", 30_000)
    reload(page)
    tab(page, "Notebook")
    choose(page, "notebook-name", "geo")
    page.wait_for_function("() => document.querySelector('#notebook-text textarea').value === "
                           "'The capital of France is'", timeout=30_000)
    page.close()


def test_two_pages_keep_separate_chats_and_stop_buttons(server, browser):
    a = ready_page(browser, server.url, max_new_tokens=300)
    b = open_page(browser, server.url)
    b.locator("#chat-new").click()
    send(a, "Write a long poem about the sea.")
    send(b, "What is the capital of France?")
    wait_streaming(a, 10)
    a.locator("#chat-stop").click()
    assert "finish: cancelled" in wait_reply_done(a, 60_000)
    b_stats = wait_reply_done(b)
    assert "cancelled" not in b_stats
    assert "sea" in a.locator("#chat-log").inner_text() and "sea" not in b.locator("#chat-log").inner_text()
    assert "France" in b.locator("#chat-log").inner_text() and "France" not in a.locator("#chat-log").inner_text()
    a.close()
    b.close()


def test_edit_a_past_message_and_regenerate_from_there(server, browser):
    page = ready_page(browser, server.url, max_new_tokens=10)
    send(page, "What is the capital of Spain?")
    wait_new_reply(page, 0)
    send(page, "And of Italy?")
    wait_new_reply(page, 1)  # (the first reply's stats say "finish:" until the second send's first update lands)
    page.locator("#chat-log [data-testid='user']").first.hover()
    page.locator("#chat-log button[aria-label='Edit']").first.click()
    page.locator("#chat-log textarea.edit-textarea").fill("What is the capital of France?")
    page.locator("#chat-log button[aria-label='Submit']").click()
    wait_text(page, "#chat-log", "Paris")
    wait_reply_done(page)
    chat = rows(server.user_data, "SELECT chat_id FROM messages WHERE content = 'What is the capital of France?' "
                                  "ORDER BY id DESC LIMIT 1")[0][0]
    stored = shown_path(server.user_data, chat)
    assert [r for r, _ in stored] == ["user", "assistant"] and "Paris" in stored[1][1]
    assert len(rows(server.user_data, "SELECT id FROM messages WHERE chat_id = ?", chat)) == 6  # nothing lost
    page.locator("#chat-log [data-testid='user']").first.click()  # select it: its versions show
    wait_text(page, "#chat-version", "Message 1: version 2 of 2", 30_000)
    page.locator("#chat-version-prev").click()
    wait_text(page, "#chat-log", "And of Italy?", 30_000)  # the first version, with the conversation after it
    assert [c for _, c in shown_path(server.user_data, chat)][::2] == ["What is the capital of Spain?",
                                                                      "And of Italy?"]
    screenshot(page, "chat-versions")
    page.locator("#chat-branch-new").click()
    wait_text(page, "#chat-list", "What is the capital of Spain? (branch)", 30_000)
    page.wait_for_function("() => document.querySelectorAll('#chat-log [data-testid=bot]').length === 0",
                           timeout=30_000)  # the new chat holds the chat up to the selected (first) message
    page.close()


def shown_path(user_data: Path, chat: int) -> list[tuple[str, str]]:
    """(role, content) of the chat's shown path (from its current leaf up)."""
    return rows(user_data, """WITH RECURSIVE path(id) AS (
                                  SELECT current_leaf FROM chats WHERE id = ? UNION ALL
                                  SELECT m.parent_id FROM messages m JOIN path ON m.id = path.id
                                  WHERE m.parent_id IS NOT NULL)
                              SELECT role, content FROM messages WHERE id IN (SELECT id FROM path)
                              ORDER BY position""", chat)


def test_continue_extends_the_last_reply(server, browser):
    page = ready_page(browser, server.url, max_new_tokens=5)
    send(page, "Write a story about a cat.")
    wait_reply_done(page)
    first = last_reply(server.user_data, "Write a story about a cat.")[1]
    page.locator("#chat-continue").click()
    reply = reply_when(server.user_data, "Write a story about a cat.", lambda r: r[2] and "continue_from" in r[2]
                       and json.loads(r[2])["completion_tokens"] == 5)  # the continued reply's own stats
    assert reply[1].startswith(first) and len(reply[1]) > len(first)
    page.wait_for_function("""() => !document.querySelector('#chat-log .chat-live') &&
        document.querySelectorAll("#chat-log [data-testid='bot']").length === 1""", timeout=30_000)
    assert bot_messages(page)[0].strip() == reply[1].strip()  # the continued reply, shown once
    page.close()


def test_export_and_import_a_chat(server, browser, tmp_path):
    page = ready_page(browser, server.url, max_new_tokens=4)
    send(page, "Export me please.")
    wait_reply_done(page)
    saved = export_file(page, "chat-export", "chat-export-file", tmp_path / "chat.json")
    data = json.loads(saved.read_text())
    assert data["format"] == "llm-workbench.chat" and data["messages"][0]["content"] == "Export me please."
    upload_file(page, "chat-import", saved)
    page.wait_for_function("() => document.querySelector('#chat-list').innerText.split('Export me please.').length > 2",
                           timeout=30_000)
    # #30 (7): the two chats of one title can be told apart in the list
    labels = [t.strip() for t in page.locator("#chat-list label").all_inner_texts() if "Export me please." in t]
    assert len(labels) == 2 and labels[0] != labels[1], labels
    page.close()


def test_bad_input_gets_a_clear_message(server, browser, tmp_path):
    page = ready_page(browser, server.url)
    tab(page, "Parameters")
    choose(page, "preset", "Broken")
    toast(page, "unknown sampling parameter 'top_q'")
    page.locator("#preset-name textarea, #preset-name input").first.fill("../x")
    page.locator("#preset-save").click()
    toast(page, "must be a plain name")
    tab(page, "Chat")
    before = rows(server.user_data, "SELECT count(*) FROM chats")[0][0]
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "llm-workbench.chat", "version": 1, "title": "x", "messages": [{"role": "bot"}]}')
    upload_file(page, "chat-import", bad)
    toast(page, "cannot import chat")
    assert rows(server.user_data, "SELECT count(*) FROM chats")[0][0] == before
    page.close()


def test_model_tab_unload_load_and_a_failed_load_keeps_the_model(server, browser):
    page = ready_page(browser, server.url, max_new_tokens=4)
    tab(page, "Model")
    wait_text(page, "#model-info", "context length: 8192")
    screenshot(page, "model")
    page.locator("#model-unload").click()
    wait_text(page, "#status-line", "No model loaded", 30_000)
    send(page, "Hello?")
    toast(page, "No model is loaded")
    assert page.locator("#chat-message textarea").input_value() == "Hello?"  # the message is a toast, not a badge
    tab(page, "Model")
    choose(page, "model-name", "SmolLM2-135M-Instruct")
    page.locator("#model-load").click()
    wait_text(page, "#status-line", "SmolLM2-135M-Instruct", LONG)
    choose(page, "model-name", "broken")
    page.locator("#model-load").click()
    toast(page, "Still loaded: SmolLM2-135M-Instruct")
    assert "SmolLM2-135M-Instruct" in page.locator("#status-line").inner_text()
    send(page, "Hello?")
    assert "finish:" in wait_reply_done(page)
    page.close()


def test_attach_and_detach_a_lora_in_the_model_tab(server, browser):
    page = ready_page(browser, server.url, max_new_tokens=8)
    send(page, "What is the capital of France?")
    wait_reply_done(page)
    base = last_reply(server.user_data, "What is the capital of France?")[1]
    tab(page, "Model")
    choose(page, "lora-pick", "noisy")
    page.locator("#lora-attach").click()
    wait_text(page, "#lora-active", "noisy", 60_000)
    wait_text(page, "#status-line", "LoRA: noisy", 30_000)
    tab(page, "Chat")
    page.locator("#chat-new").click()
    page.wait_for_function("() => document.querySelectorAll('#chat-log [data-testid=bot]').length === 0",
                           timeout=30_000)  # the new chat is shown: the last reply's "finish:" stats are gone
    send(page, "What is the capital of France?")
    wait_new_reply(page, 0)
    adapted = last_reply(server.user_data, "What is the capital of France?")[1]
    assert adapted != base
    tab(page, "Model")
    page.locator("#lora-detach").click()
    wait_text(page, "#lora-active", "No adapter attached", 60_000)
    page.wait_for_function("() => !document.querySelector('#status-line').innerText.includes('LoRA')",
                           timeout=30_000)
    page.close()


def test_chat_survives_a_kill_9(tmp_path, default_model_dir, browser):
    user_data = make_user_data(tmp_path, default_model_dir)
    with running_server(user_data) as srv:
        page = ready_page(browser, srv.url, max_new_tokens=12)
        send(page, "What is the capital of France?")
        wait_reply_done(page)
        shown = bot_messages(page)[-1]
        page.close()
        srv.proc.send_signal(signal.SIGKILL)
        srv.proc.wait(10)
    with running_server(user_data) as srv:
        page = open_page(browser, srv.url)
        page.get_by_label("What is the capital of France?").first.check()
        wait_text(page, "#chat-log", "Paris", 30_000)
        assert bot_messages(page)[-1].split("\n")[0] == shown.split("\n")[0]
        page.close()
