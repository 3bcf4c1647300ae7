"""Documents read as text (#44): text, Markdown, code, CSV and JSON as UTF-8, PDFs through pypdf, Word .docx files
through python-docx, each made here as a real small file; how a document goes into a message (text-generation-
webui's ATTACHMENTS section); and how an API message's file parts become that text, in order with its other parts.
Hostile files are in tests/security/test_documents.py."""

from __future__ import annotations

import hashlib

import pytest

from tests.documents import docx_bytes, encrypted_pdf, pdf_bytes, pdf_of_streams
from webui.api.documents import documents_as_text, file_parts
from webui.api.protocol import ChatMessage, chat_rows
from webui.documents import (Document, DocumentError, DocumentLimits, attachments_text, document_kind, read_document,
                             with_documents)


@pytest.mark.parametrize("name, data, text", [
    ("notes.md", b"# Title\r\n\r\n- one\r\n- two\n", "# Title\n\n- one\n- two\n"),
    ("main.py", b"def f():\n    return 1\n", "def f():\n    return 1\n"),
    ("table.csv", "name,city\nZo\u00eb,K\u00f6ln\n".encode(), "name,city\nZo\u00eb,K\u00f6ln\n"),
    ("data.json", b'{"a": [1, 2]}', '{"a": [1, 2]}'),
    ("Makefile", b"all:\n\techo hi\n", "all:\n\techo hi\n"),
    ("bom.txt", b"\xef\xbb\xbfwith a BOM", "with a BOM"),
    ("empty.txt", b"", ""),
])
def test_text_files_are_read_as_utf8_with_line_ends_made_newlines(name, data, text):
    document = read_document(data, name)
    assert document == Document(name, hashlib.sha256(data).hexdigest(), text, "text")


def test_a_pdf_gives_the_text_of_each_page_with_a_blank_line_between():
    data = pdf_bytes("Quarterly report (draft)\nRevenue grew 12%.", "Page two: costs fell.")
    document = read_document(data, "report.pdf")
    assert document.kind == "pdf" and document.name == "report.pdf"
    assert document.text == "Quarterly report (draft)\nRevenue grew 12%.\n\nPage two: costs fell."
    assert document.digest == hashlib.sha256(data).hexdigest()


def test_a_pdf_encrypted_without_a_user_password_is_read():
    """Restrictions only (printing, copying): every reader opens it, and so do we."""
    data = encrypted_pdf(pdf_bytes("Open to all"), user_password="")
    assert read_document(data, "restricted.pdf").text == "Open to all"


def test_a_pdf_without_text_is_refused_saying_to_run_ocr():
    with pytest.raises(DocumentError, match=r"'scan.pdf' has no text layer .*OCR"):
        read_document(pdf_of_streams([b"0 0 m 100 100 l S"]), "scan.pdf")


def test_a_docx_gives_header_body_paragraphs_and_table_rows_in_order_then_footer():
    data = docx_bytes("Minutes of the meeting", "Decisions below.", table=[["Item", "Owner"], ["Budget", "Ana"]],
                      header="ACME internal", footer="Page footer")
    document = read_document(data, "minutes.docx")
    assert document.kind == "docx"
    assert document.text == ("ACME internal\nMinutes of the meeting\nDecisions below.\nItem\tOwner\nBudget\tAna\n"
                             "Page footer")


def test_names_lose_folders_and_control_characters():
    document = read_document(b"x", "C:\\Users\\me\\..\\notes\n=====\nName: evil.txt")
    assert document.name == "notes ===== Name: evil.txt" and "\n" not in document.name


@pytest.mark.parametrize("name, hint", [
    ("old.doc", "save it as .docx"), ("sheet.xlsx", "save the sheet as .csv"), ("deck.pptx", "export it as PDF"),
    ("letter.odt", "save it as .docx"),
])
def test_office_formats_not_read_are_refused_by_name_with_what_to_do(name, hint):
    with pytest.raises(DocumentError, match=hint):
        document_kind(name)
    with pytest.raises(DocumentError, match=hint):
        read_document(b"anything", name)


def test_text_in_another_encoding_is_refused_naming_it():
    cyrillic = "Привет, как дела? Это длинный текст в кодировке Windows-1251, а не UTF-8.".encode("cp1251")
    with pytest.raises(DocumentError, match=r"'ru.txt' is not UTF-8 text \(byte 0x.. at offset 0\); it looks like "
                                            r"\S+ text.*save it as UTF-8"):
        read_document(cyrillic, "ru.txt")
    with pytest.raises(DocumentError, match="'wide.txt' is UTF-16 text; save it as UTF-8"):
        read_document("hi".encode("utf-16"), "wide.txt")


def test_limits_on_bytes_and_characters_say_the_sizes():
    limits = DocumentLimits(max_bytes=1000, max_chars=100)
    with pytest.raises(DocumentError, match=r"'big.txt' is 0.00105 MB, over the limit of 0.000954 MB"):
        read_document(b"x" * 1100, "big.txt", limits)
    with pytest.raises(DocumentError, match=r"'long.md' has 500 characters of text, over the limit of 100"):
        read_document(b"y" * 500, "long.md", limits)
    with pytest.raises(DocumentError, match=r"'long.pdf' has over 100 characters of text by page 2 of 2"):
        read_document(pdf_bytes("a" * 60, "b" * 60), "long.pdf", limits)


NOTES = Document("notes.md", "d1", "# Notes\nbuy milk", "text")
REPORT = Document("report.pdf", "d2", "Revenue grew.", "pdf")


def test_documents_follow_the_message_as_text_generation_webui_writes_them():
    assert attachments_text([NOTES]) == ("ATTACHMENTS:\n\nName: notes.md\nContents:\n\n=====\n# Notes\nbuy milk\n"
                                         "=====\n\n")
    assert with_documents("Summarise these.", [NOTES, REPORT]) == (
        "Summarise these.\n\nATTACHMENTS:\n"
        "\nName: notes.md\nContents:\n\n=====\n# Notes\nbuy milk\n=====\n\n"
        "\nName: report.pdf\nContents:\n\n=====\nRevenue grew.\n=====\n\n")
    assert with_documents("", [REPORT]) == attachments_text([REPORT])
    assert with_documents("Just text", []) == "Just text"


def _file(name: str) -> dict:
    return {"type": "file", "file": {"file_data": "data:text/plain;base64,eA==", "filename": name}}


def test_an_api_messages_file_parts_become_text_where_they_stand():
    messages = [ChatMessage.model_validate(m) for m in [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "Compare"}, _file("notes.md"),
                                     _file("report.pdf"), {"type": "text", "text": "Which is longer?"}]},
        {"role": "user", "content": [_file("notes.md"), {"type": "text", "text": "And this?"}]}]]
    assert [index for index, _ in file_parts(messages)] == [(1, 1), (1, 2), (2, 0)]
    read = documents_as_text(messages, {(1, 1): NOTES, (1, 2): REPORT, (2, 0): NOTES})
    rows = chat_rows(read)
    assert rows[0] == {"role": "system", "content": "Be brief."}
    assert rows[1]["content"] == "Compare\n\n" + attachments_text([NOTES, REPORT]) + "Which is longer?"
    assert rows[2]["content"] == attachments_text([NOTES]) + "And this?"  # nothing before it: no blank line
    with pytest.raises(RuntimeError, match="unread"):  # a file part is never silently dropped
        chat_rows(messages)
