"""The Chat tab with a tiny random vision model: attach an image to a message, get a reply; the image shows as a
thumbnail, and survives a reload and an export and import of the chat."""

from __future__ import annotations

import json

import pytest

from tests.e2e.server import running_server, user_data_with_default_model
from tests.ui.pages import LONG, export_file, ready_page, reload, rows, upload_file, wait_reply_done, wait_text
from tests.vision_models import png

pytestmark = pytest.mark.browser
QUESTION = "What is in this picture?"


@pytest.fixture(scope="module")
def vision_server(tmp_path_factory, default_model_dir, tiny_llava_dir):
    root = tmp_path_factory.mktemp("chat-images")
    models = root / "models"
    models.mkdir()
    (models / "tiny-llava").symlink_to(tiny_llava_dir, target_is_directory=True)
    user_data = user_data_with_default_model(root / "data", default_model_dir)
    with running_server(user_data, "--models-dir", str(models), "--model", "tiny-llava") as srv:
        srv.user_data = user_data
        yield srv


def thumbnails(page) -> int:
    return page.locator("#chat-log [data-testid='user'] img").count()


def test_an_image_in_a_message_gets_a_reply_and_stays(vision_server, browser, tmp_path):
    picture = tmp_path / "red.png"
    picture.write_bytes(png((200, 30, 30), stripe=5))
    page = ready_page(browser, vision_server.url, max_new_tokens=5)
    page.locator("#chat-images input[type=file]").set_input_files(str(picture))  # as the file chooser does
    page.locator("#chat-images").get_by_text("red.png").wait_for(timeout=LONG)  # uploaded
    page.locator("#chat-message textarea").press_sequentially(QUESTION, delay=15)
    page.locator("#chat-send").click()
    assert "finish:" in wait_reply_done(page)
    page.wait_for_function("() => document.querySelectorAll('#chat-log [data-testid=user] img').length === 1",
                           timeout=30_000)
    assert page.locator("#chat-images").get_by_text("red.png").count() == 0  # sent: the attachment is cleared
    (stored,) = rows(vision_server.user_data, "SELECT COUNT(*) FROM message_images")
    assert stored == (1,)
    (prompt_tokens,) = rows(vision_server.user_data, "SELECT json_extract(stats, '$.prompt_tokens') FROM messages "
                                                     "WHERE role = 'assistant'")
    assert prompt_tokens[0] > 16  # the image's tokens were read
    reload(page)
    page.wait_for_function("() => document.querySelectorAll('#chat-log [data-testid=user] img').length === 1",
                           timeout=LONG)
    saved = export_file(page, "chat-export", "chat-export-file", tmp_path / "chat.json")
    data = json.loads(saved.read_text())
    assert len(data["messages"][0]["images"]) == 1 and len(data["images"]) == 1
    page.locator("#chat-delete").click()
    wait_text(page, "#chat-delete", "Confirm delete", 30_000)
    page.locator("#chat-delete").click()  # the second click confirms
    page.wait_for_function("q => !document.querySelector('#chat-list').innerText.includes(q)", arg=QUESTION,
                           timeout=30_000)
    assert rows(vision_server.user_data, "SELECT COUNT(*) FROM images") == [(0,)]
    upload_file(page, "chat-import", saved)
    page.wait_for_function("q => document.querySelector('#chat-list').innerText.includes(q)", arg=QUESTION,
                           timeout=30_000)
    page.locator("#chat-list label", has_text=QUESTION).click()
    page.wait_for_function("() => document.querySelectorAll('#chat-log [data-testid=user] img').length === 1",
                           timeout=30_000)
    assert rows(vision_server.user_data, "SELECT COUNT(*) FROM images") == [(1,)]
    page.close()


def test_an_image_pasted_into_the_message_box_is_attached(vision_server, browser):
    page = ready_page(browser, vision_server.url, max_new_tokens=3)
    box = page.locator("#chat-message textarea")
    box.click()
    page.evaluate("""async (bytes) => {  // what the browser hands the page when a person pastes an image
        const data = new DataTransfer();
        data.items.add(new File([new Uint8Array(bytes)], "pasted.png", {type: "image/png"}));
        document.querySelector('#chat-message textarea').dispatchEvent(
            new ClipboardEvent("paste", {clipboardData: data, bubbles: true, cancelable: true}));
    }""", list(png((20, 40, 220), stripe=3)))
    page.locator("#chat-images").get_by_text("pasted.png").wait_for(timeout=LONG)  # uploaded
    box.press_sequentially("And this?", delay=15)
    box.press("Enter")
    wait_reply_done(page)
    page.wait_for_function("() => document.querySelectorAll('#chat-log [data-testid=user] img').length === 1",
                           timeout=30_000)
    page.close()



def test_a_message_with_an_image_is_edited_by_its_text_and_keeps_the_image(vision_server, browser, tmp_path):
    """#46 (2, 4, 8): the log shows a message's image as a row of its own; its Edit opened no text box and its
    Submit failed in the page (nothing sent), and its Share needs Hugging Face Spaces. The message has one Edit,
    under its text: the edit is a new version with the image kept, and the version line says so at once."""
    picture = tmp_path / "green.png"
    picture.write_bytes(png((30, 200, 30), stripe=4))
    question, edited = "Which colour is this?", "Which colour is this, in one word?"
    page = ready_page(browser, vision_server.url, max_new_tokens=3)
    page.locator("#chat-images input[type=file]").set_input_files(str(picture))
    page.locator("#chat-images").get_by_text("green.png").wait_for(timeout=LONG)  # uploaded
    page.locator("#chat-message textarea").press_sequentially(question, delay=15)
    page.locator("#chat-send").click()
    wait_reply_done(page)
    page.wait_for_function("() => document.querySelectorAll('#chat-log [data-testid=user] img').length === 1",
                           timeout=30_000)
    page.locator("#chat-log [data-testid='user'] img").hover()
    assert not [b for b in page.locator("#chat-log button[aria-label='Share']").all() if b.is_visible()]
    page.locator("#chat-log [data-testid='user']").last.hover()
    [b for b in page.locator("#chat-log button[aria-label='Edit']").all() if b.is_visible()][0].click()
    box = page.locator("#chat-log textarea.edit-textarea")
    box.wait_for(timeout=10_000)  # the message's first Edit edits its text
    assert box.input_value() == question
    box.fill("")
    box.press_sequentially(edited, delay=15)
    page.locator("#chat-log button[aria-label='Submit']").click()
    page.wait_for_function("q => document.querySelector('#chat-log').innerText.includes(q)", arg=edited,
                           timeout=30_000)
    wait_reply_done(page)
    page.wait_for_function("() => document.querySelectorAll('#chat-log [data-testid=user] img').length === 1",
                           timeout=30_000)
    assert rows(vision_server.user_data, "SELECT COUNT(*) FROM message_images i JOIN messages m "
                                         "ON m.id = i.message_id WHERE m.content = ?", edited) == [(1,)]
    wait_text(page, "#chat-version", "Message 1: version 2 of 2", 30_000)  # the edited one, without a click
    page.locator("#chat-version-prev").click()
    wait_text(page, "#chat-log", question, 30_000)
    page.wait_for_function("() => document.querySelectorAll('#chat-log [data-testid=user] img').length === 1",
                           timeout=30_000)
    page.close()
