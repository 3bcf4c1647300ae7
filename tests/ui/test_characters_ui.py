"""Browser tests of the Chat tab's "Character and mode" panel (#35): create, start a chat, modes, import, delete."""

from __future__ import annotations

import json
import time

import yaml

import pytest
from playwright.sync_api import expect

from tests.conftest import ROOT
from tests.ui.pages import (bot_messages, choose, code_text, export_file, ready_page, reload, rows, send, tab, toast,
                            upload_file, wait_new_reply, wait_text, wait_until)

pytestmark = [pytest.mark.real_model, pytest.mark.browser]
OWN_SERVER = True  # it changes the chat mode and chat-instruct command the next new chats get

CARDS = ROOT / "tests" / "data" / "characters"


def unfold(page) -> None:
    tab(page, "Chat")
    page.locator("#chat-character-panel").get_by_text("Character and mode").first.click()
    page.locator("#chat-character-name textarea").wait_for(timeout=30_000)


def type_into(page, elem_id: str, text: str) -> None:
    """Type as a person does (a key at a time)."""
    box = page.locator(f"#{elem_id} textarea")
    box.click()
    box.press("Control+a")
    box.press("Backspace")
    box.press_sequentially(text, delay=20)


def preview_has(page, text: str, absent: str | None = None, elem_id: str = "chat-mode-preview") -> str:
    """The mode's preview (or another Code, ``elem_id``) once it shows ``text`` (and not ``absent``)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        shown = code_text(page, elem_id)
        if text in shown and (absent is None or absent not in shown):
            return shown
        time.sleep(0.2)
    raise AssertionError(f"the preview never showed {text!r} (without {absent!r}): {shown!r}")


def field(page, elem_id: str) -> str:
    return page.locator(f"#{elem_id} textarea").input_value()


def make_character(page, name: str, greeting: str, context: str) -> None:
    """New character in the panel, its fields typed as a person does, saved."""
    page.locator("#chat-character-new").click()
    type_into(page, "chat-character-name", name)
    type_into(page, "chat-character-greeting", greeting)
    type_into(page, "chat-character-context", context)
    page.locator("#chat-character-save").click()
    wait_text(page, "#chat-character-note", f"Saved '{name}'", 30_000)


def test_create_start_switch_modes_reload_and_delete_a_character(server, browser):
    page = ready_page(browser, server.url, max_new_tokens=2)
    unfold(page)
    make_character(page, "Mira", "Hello {{user}}, I am {{char}}.", "{{char}} keeps the lighthouse.")
    assert (server.user_data / "characters" / "Mira.yaml").is_file()

    page.get_by_role("radio", name="chat", exact=True).check()  # no chat open: Mira's greeting opens one
    page.wait_for_function("() => document.querySelectorAll('#chat-log [data-testid=bot]').length === 1",
                           timeout=30_000)
    assert bot_messages(page) == ["Hello You, I am Mira."]
    mira_chats = "SELECT count(*) FROM chats WHERE title = 'Mira'"
    wait_until(page, lambda: rows(server.user_data, mira_chats) == [(1,)])
    page.locator("#chat-character-start").click()  # another, the greeting its first message, in view
    wait_until(page, lambda: rows(server.user_data, mira_chats) == [(2,)])
    expect(page.locator("#chat-log [data-testid=bot]").first).to_be_in_viewport(timeout=30_000)
    assert bot_messages(page) == ["Hello You, I am Mira."]
    shown = preview_has(page, "Mira: Hello You, I am Mira.", absent="<|im_start|>")  # a plain transcript
    assert "Mira keeps the lighthouse." in shown
    page.locator("#chat-character-panel").scroll_into_view_if_needed()
    page.get_by_role("radio", name="instruct", exact=True).check()
    wait_text(page, "#chat-character-note", "now in instruct mode", 30_000)
    wait_text(page, "#chat-character-note", "leaves Mira's greeting and context out", 30_000)
    # instruct: the template's markup around the greeting the chat holds, and no context
    preview_has(page, "<|im_start|>assistant\nHello You, I am Mira.", absent="lighthouse")
    page.get_by_role("radio", name="chat", exact=True).check()
    wait_text(page, "#chat-character-note", "now in chat mode", 30_000)

    reload(page)  # the open chat's mode and character come back
    unfold(page)
    page.wait_for_function("() => document.querySelector('#chat-character input').value === 'Mira'",
                           timeout=30_000)
    assert page.get_by_role("radio", name="chat", exact=True).is_checked()
    assert field(page, "chat-character-greeting") == "Hello {{user}}, I am {{char}}."
    assert bot_messages(page) == ["Hello You, I am Mira."]
    preview_has(page, "Mira: Hello You, I am Mira.", absent="<|im_start|>")

    page.locator("#chat-character-delete").click()  # asks first
    wait_text(page, "#chat-character-delete", "Confirm delete", 30_000)
    assert (server.user_data / "characters" / "Mira.yaml").is_file()
    page.locator("#chat-character-delete").click()
    wait_text(page, "#chat-character-note", "Deleted 'Mira'", 30_000)
    assert not (server.user_data / "characters" / "Mira.yaml").exists()
    page.close()


def test_import_a_png_card_and_start_a_chat_with_it(server, browser):
    page = ready_page(browser, server.url, max_new_tokens=2)
    unfold(page)
    upload_file(page, "chat-character-import", CARDS / "Seraphina.png")
    wait_text(page, "#chat-character-note", "Imported 'Seraphina'", 30_000)
    assert field(page, "chat-character-name") == "Seraphina"
    assert field(page, "chat-character-greeting").startswith("*You wake with a start")
    page.get_by_role("radio", name="chat-instruct", exact=True).check()
    preview_has(page, 'Write a single reply for the character "Seraphina"')
    page.locator("#chat-character-start").click()
    page.wait_for_function("() => document.querySelectorAll('#chat-log [data-testid=bot]').length === 1",
                           timeout=30_000)
    assert "You wake with a start" in bot_messages(page)[0]
    choose(page, "chat-character", "(no character)")
    wait_text(page, "#chat-character-note", "now in chat-instruct mode", 30_000)
    page.close()


def test_the_chat_instruct_command_is_saved_as_typed_and_shown_in_the_preview(server, browser):
    page = ready_page(browser, server.url, max_new_tokens=2)
    page.locator("#chat-message textarea").fill("Hello there")  # a new chat's preview: the message typed
    unfold(page)
    page.get_by_role("radio", name="chat-instruct", exact=True).check()
    command = "Reply as <|character|>: <|prompt|>"
    settings = server.user_data / "settings.json"
    type_into(page, "chat-instruct-command", command)
    wait_until(page, lambda: json.loads(settings.read_text()).get("chat_instruct_command") == command)
    preview_has(page, "Reply as Assistant: You: Hello there", absent="Continue the chat dialogue")
    type_into(page, "chat-instruct-command", "No place for the chat")  # named beside the box, kept as typed
    wait_text(page, "#chat-instruct-command-note", "must contain <|prompt|>", 30_000)
    wait_until(page, lambda: json.loads(settings.read_text()).get("chat_instruct_command") == "No place for the chat")
    page.get_by_role("radio", name="chat", exact=True).check()
    wait_text(page, "#chat-character-note", "next new chat starts in chat mode", 30_000)
    page.locator("#chat-character-start").click()  # a chat in chat mode, with no character
    wait_text(page, "#chat-list", "New chat chat", 30_000)
    page.get_by_role("radio", name="chat-instruct", exact=True).check()  # refused: the radio shows the chat's mode
    wait_text(page, "#chat-character-note", "this chat stays in chat mode", 30_000)
    assert page.get_by_role("radio", name="chat", exact=True).is_checked()
    page.get_by_role("radio", name="chat-instruct", exact=True).check()
    type_into(page, "chat-instruct-command", command)
    wait_until(page, lambda: json.loads(settings.read_text()).get("chat_instruct_command") == command)
    reload(page)
    unfold(page)
    assert page.locator("#chat-instruct-command textarea").input_value() == command
    page.close()


def test_duplicate_export_picture_a_wrong_name_and_the_next_new_chats_mode(server, browser, tmp_path):
    page = ready_page(browser, server.url, max_new_tokens=2)
    unfold(page)
    page.locator("#chat-character-new").click()
    type_into(page, "chat-character-name", "Bo")
    page.locator("#chat-character-save").click()
    wait_text(page, "#chat-character-note", "Saved 'Bo'", 30_000)
    page.locator("#chat-character-new").click()
    type_into(page, "chat-character-name", "Bo")
    page.locator("#chat-character-save").click()
    toast(page, "a character named 'Bo' exists")
    assert field(page, "chat-character-name") == "Bo"  # what was typed stays
    choose(page, "chat-character", "Bo")
    page.locator("#chat-character-duplicate").click()
    wait_text(page, "#chat-character-note", "Duplicated 'Bo' as 'Bo (copy)'", 30_000)
    assert field(page, "chat-character-name") == "Bo (copy)"
    exported = export_file(page, "chat-character-export-yaml", "chat-character-export-file", tmp_path / "bo.yaml")
    assert yaml.safe_load(exported.read_text(encoding="utf-8"))["name"] == "Bo (copy)"
    page.locator("#chat-character-picture input[type=file]").set_input_files(str(CARDS / "Seraphina.png"))
    wait_text(page, "#chat-character-note", "Picture saved.", 30_000)
    assert (server.user_data / "characters" / "Bo (copy).png").is_file()

    page.get_by_role("radio", name="instruct", exact=True).check()  # (the last chat's mode is shown until changed)
    wait_text(page, "#chat-character-note", "next new chat starts in instruct mode", 30_000)
    page.get_by_role("radio", name="chat", exact=True).check()  # no chat open: the next new chat's mode
    wait_text(page, "#chat-character-note", "next new chat starts in chat mode with Bo (copy)", 30_000)
    send(page, "Hi Bo")
    wait_new_reply(page, 0)
    assert rows(server.user_data, "SELECT mode, character FROM chats WHERE title='Hi Bo'") == [("chat", "Bo (copy)")]
    page.close()


def chat_rows(server) -> list[tuple[str, str]]:
    """(role, content) of the newest chat's messages, in order."""
    return rows(server.user_data, "SELECT role, content FROM messages WHERE chat_id = (SELECT max(id) FROM chats) "
                                  "ORDER BY position")


def type_message(page, text: str) -> None:
    box = page.locator("#chat-message textarea")
    box.click()
    box.press_sequentially(text, delay=20)


def test_new_chat_opens_with_the_greeting_in_chat_modes_and_without_it_in_instruct(server, browser):
    page = ready_page(browser, server.url, max_new_tokens=2)
    page.get_by_text("Prompt and reproduce record (click a message; default: the last reply)").click()
    unfold(page)
    page.get_by_role("radio", name="instruct", exact=True).check()
    make_character(page, "Tova", "Welcome aboard, {{user}}.", "{{char}} sails the fjords.")
    choose(page, "chat-character", "(no character)")
    choose(page, "chat-character", "Tova")  # in instruct mode: no greeting, and the panel says so
    wait_text(page, "#chat-character-note", "leaves Tova's greeting and context out", 30_000)
    page.locator("#chat-new").click()
    type_message(page, "Ahoy")
    page.locator("#chat-send").click()
    wait_new_reply(page, 0)
    assert len(bot_messages(page)) == 1 and "Welcome aboard" not in bot_messages(page)[0]
    assert [role for role, _ in chat_rows(server)] == ["user", "assistant"]  # no greeting stored
    read = preview_has(page, "<|im_start|>user\nAhoy", elem_id="chat-inspect-rendered")  # what the model read
    assert "Welcome aboard" not in read and "fjords" not in read

    page.get_by_role("radio", name="chat", exact=True).check()  # this chat's mode: it keeps its messages
    wait_text(page, "#chat-character-note", "This chat is now in chat mode with Tova", 30_000)
    page.locator("#chat-new").click()  # a new chat with Tova in chat mode: her greeting, before anything is typed
    page.wait_for_function("() => [...document.querySelectorAll('#chat-log [data-testid=bot]')].map("
                           "b => b.innerText.trim()).join('|') === 'Welcome aboard, You.'", timeout=30_000)
    assert chat_rows(server) == [("assistant", "Welcome aboard, You.")]
    shown = preview_has(page, "Tova: Welcome aboard, You.\nTova:")  # the prompt a reply would be written from
    assert "Tova sails the fjords." in shown
    type_message(page, "Where to?")
    page.locator("#chat-send").click()
    wait_new_reply(page, 1)
    assert bot_messages(page)[0] == "Welcome aboard, You."
    assert [r for r, _ in chat_rows(server)] == ["assistant", "user", "assistant"]
    assert chat_rows(server)[:2] == [("assistant", "Welcome aboard, You."), ("user", "Where to?")]
    read = preview_has(page, "Tova: Welcome aboard, You.\nYou: Where to?\nTova:", elem_id="chat-inspect-rendered")
    assert read.startswith("Tova sails the fjords.")  # the model read the greeting shown, after the context
    page.close()
