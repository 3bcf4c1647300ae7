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
    page.locator("#chat-images").get_by_text("red.png").wait_for(timeout=30_000)
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
    page.locator("#chat-images").get_by_text("pasted.png").wait_for(timeout=30_000)
    box.press_sequentially("And this?", delay=15)
    box.press("Enter")
    wait_reply_done(page)
    page.wait_for_function("() => document.querySelectorAll('#chat-log [data-testid=user] img').length === 1",
                           timeout=30_000)
    page.close()
