"""Documents in the Chat tab (#44), with the default model: attach a PDF and a .docx to a message, send it, and both
show as files in the log while their text reaches the model (the inspector shows the prompt with it); a reload
keeps them."""

from __future__ import annotations

import pytest

from tests.documents import docx_bytes, pdf_bytes
from tests.ui.pages import LONG, ready_page, reload, rows, screenshot, wait_reply_done, wait_text

pytestmark = pytest.mark.browser
QUESTION = "What is the launch code?"


def shows_file(page, selector: str, name: str, shown: bool = True) -> None:
    """Wait until ``selector`` shows (or no longer shows) a file named ``name`` (Gradio writes a file's name as its
    stem and its extension, apart)."""
    page.wait_for_function("([sel, name, shown]) => { const el = document.querySelector(sel);"
                           " return !!el && el.innerText.replace(/\\n/g, '').includes(name) === shown; }",
                           arg=[selector, name, shown], timeout=LONG)


def test_a_pdf_and_a_docx_reach_the_model_as_text(server, browser, tmp_path):
    pdf, docx = tmp_path / "report.pdf", tmp_path / "minutes.docx"
    pdf.write_bytes(pdf_bytes("The launch code is PELICAN-7."))
    docx.write_bytes(docx_bytes("Minutes: the budget was approved."))
    page = ready_page(browser, server.url, max_new_tokens=8)
    page.locator("#chat-documents input[type=file]").set_input_files([str(pdf), str(docx)])
    shows_file(page, "#chat-documents", "minutes.docx")  # both uploaded
    page.locator("#chat-message textarea").press_sequentially(QUESTION, delay=15)
    page.locator("#chat-send").click()
    assert "finish:" in wait_reply_done(page)
    shows_file(page, "#chat-log", "report.pdf")  # each document shows as a file in the message
    shows_file(page, "#chat-log", "minutes.docx")
    shows_file(page, "#chat-documents", "report.pdf", shown=False)  # sent: cleared
    assert rows(server.user_data, "SELECT kind FROM documents ORDER BY kind") == [("docx",), ("pdf",)]
    page.get_by_text("Prompt and reproduce record (click a message; default: the last reply)").click()
    page.locator("#chat-log [data-testid='user']").last.click()
    wait_text(page, "#chat-inspect-rendered", "The launch code is PELICAN-7.")  # what the model read
    wait_text(page, "#chat-inspect-rendered", "Minutes: the budget was approved.")
    screenshot(page, "chat-documents")
    reload(page)
    shows_file(page, "#chat-log", "minutes.docx")
    page.close()
