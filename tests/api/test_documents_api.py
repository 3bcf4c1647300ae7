"""Documents over /v1/chat/completions with the official openai client (#44): OpenAI's ``file`` content parts
(``file_data`` as base64, with a filename) carrying a real PDF and a real .docx reach the default model as text in
their message (text-generation-webui's ATTACHMENTS section, in order with the text parts), count in
usage.prompt_tokens, and are what the model saw (the kept request's rendered prompt); a document longer than the
context is the usual context_length_exceeded error with the document's token count; each problem is a 400 naming
the part. Hostile files are in tests/security/test_documents.py."""

from __future__ import annotations

import base64
import json
import re
import sqlite3

import httpx
import openai
import pytest

from tests.documents import docx_bytes, pdf_bytes, pdf_of_streams
from tests.vision_models import png
from webui.documents import attachments_text, read_document

MODEL = "SmolLM2-135M-Instruct"
PDF = pdf_bytes("Field notes (spring)\nThe heron count was 41 at the north pond.", "Page two: the ice left on 3 March.")
DOCX = docx_bytes("Minutes of the boat club", "The budget for the new sail is 7,300 euros.",
                  table=[["Task", "Owner"], ["Varnish the hull", "Ana"]])
DOCX_TYPE = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
QUESTION = {"type": "text", "text": "What does the document say?"}


@pytest.fixture
def client(api):
    with openai.OpenAI(base_url=api.base_url, api_key=api.key, max_retries=0, timeout=120) as c:
        yield c


def file_part(data: bytes, filename: str | None, media_type: str = "text/plain") -> dict:
    file = {"file_data": f"data:{media_type};base64,{base64.b64encode(data).decode()}"}
    return {"type": "file", "file": file if filename is None else {**file, "filename": filename}}


def ask(client, content: list[dict], **extra):
    return client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": content}], max_tokens=1,
                                          temperature=0, **extra)


def tokenize(api, **body) -> dict:
    answer = httpx.post(api.root + "/tokenize", json={"model": MODEL, **body},
                        headers={"Authorization": f"Bearer {api.key}"}, timeout=60)
    assert answer.status_code == 200, answer.text
    return answer.json()


def seen_prompt(api, completion_id: str) -> str:
    """The prompt as the model saw it, from the request the server kept (store: true)."""
    with sqlite3.connect(api.server.log.parent / "workbench.sqlite3") as db:
        row = db.execute("SELECT details FROM api_requests WHERE id = ?", (completion_id,)).fetchone()
    return json.loads(row[0])["prompt"]


@pytest.mark.parametrize("data, filename, media_type, says", [
    (PDF, "field-notes.pdf", "application/pdf", "The heron count was 41 at the north pond."),
    (DOCX, "minutes.docx", DOCX_TYPE,
     "The budget for the new sail is 7,300 euros.\nTask\tOwner\nVarnish the hull\tAna"),
], ids=["pdf", "docx"])
def test_a_pdf_and_a_docx_as_file_parts_reach_the_model_as_text_and_count_in_usage(api, client, data, filename,
                                                                                  media_type, says):
    plain = ask(client, [QUESTION])
    content = [QUESTION, file_part(data, filename, media_type)]
    made = ask(client, content, store=True)
    document = read_document(data, filename)
    assert says in document.text
    document_tokens = tokenize(api, prompt=document.text, add_special_tokens=False)["count"]
    assert made.usage.prompt_tokens >= plain.usage.prompt_tokens + document_tokens
    # /tokenize reads file parts the same way: the same count, token for token
    assert made.usage.prompt_tokens == tokenize(api, messages=[{"role": "user", "content": content}])["count"]
    seen = seen_prompt(api, made.id)
    assert f"<|im_start|>user\nWhat does the document say?\n\n{attachments_text([document])}<|im_end|>" in seen
    assert f"Name: {filename}\nContents:\n\n=====\n" in seen and says in seen


def test_file_parts_stand_in_order_with_the_text_parts_and_without_a_filename_the_type_names_the_kind(api, client):
    content = [{"type": "text", "text": "Before."}, file_part(b"# Notes\nbuy milk\n", "notes.md"),
               file_part(PDF, None, "application/pdf"), {"type": "text", "text": "After."}]
    made = ask(client, content, store=True)
    notes, pdf = read_document(b"# Notes\nbuy milk\n", "notes.md"), read_document(PDF, "document.pdf")
    assert f"Before.\n\n{attachments_text([notes, pdf])}After.<|im_end|>" in seen_prompt(api, made.id)


def test_a_streamed_answer_counts_the_document_too(api, client):
    content = [QUESTION, file_part(DOCX, "minutes.docx", DOCX_TYPE)]
    whole = ask(client, content)
    chunks = list(ask(client, content, stream=True, stream_options={"include_usage": True}))
    assert chunks[-1].usage.prompt_tokens == whole.usage.prompt_tokens


def test_a_document_longer_than_the_context_is_refused_with_its_token_count(api, client):
    context = tokenize(api, prompt="x")["max_model_len"]
    text = "The heron stood in the reeds and watched the water for a long time. " * (context // 8)
    document_tokens = tokenize(api, prompt=text, add_special_tokens=False)["count"]
    assert document_tokens > context
    with pytest.raises(openai.BadRequestError) as refused:
        ask(client, [QUESTION, file_part(text.encode(), "long.txt")])
    error = refused.value
    assert error.code == "context_length_exceeded" and error.param == "messages[0].content[1].file"
    assert re.search(rf"the prompt has \d+ tokens, which leaves no room in the model's context of {context} tokens.*"
                     rf"messages\[0\]\.content\[1\]\.file \('long.txt'\) {document_tokens:,} tokens: attach a shorter "
                     r"part", error.message), error.message
    assert ask(client, [QUESTION]).usage.prompt_tokens > 0  # and the server goes on serving


@pytest.mark.parametrize("part, code, said", [
    ({"type": "file", "file": {"file_id": "file-abc123"}}, "file_id_not_supported",
     "file_id refers to OpenAI's Files API, which this server does not have; send the file itself as file_data"),
    (file_part(png((200, 30, 30)), "photo.pdf", "application/pdf"), "invalid_file",
     "is not a PDF: its bytes are a PNG image"),
    (file_part(b"%PDF-1.4\n" + bytes(range(256)), "broken.pdf", "application/pdf"), "invalid_file",
     "could not be read as a PDF"),
    (file_part(pdf_of_streams([b"BT " + bytes(64 * 2**20) + b" ET"], flate=True), "bomb.pdf", "application/pdf"),
     "invalid_file", "PDF bomb"),
    (file_part("Привет".encode("cp1251") * 20, "ru.txt"), "invalid_file", "is not UTF-8 text"),
    (file_part(b"hi", None, "application/octet-stream"), "invalid_file", "needs its filename"),
], ids=["file_id", "png-as-pdf", "corrupt-pdf", "pdf-bomb", "cp1251", "no-filename"])
def test_each_problem_is_a_400_naming_the_part(api, part, code, said):
    with openai.OpenAI(base_url=api.base_url, api_key=api.key, max_retries=0, timeout=120) as fresh:
        with pytest.raises(openai.BadRequestError) as refused:
            ask(fresh, [QUESTION, part])
    error = refused.value
    assert error.code == code and error.param == "messages[0].content[1].file"
    message = error.body["message"]  # the error object as the server sent it (error.message adds "Error code")
    assert said in message and message.startswith("messages[0].content[1].file: ")

