"""Documents attached to a Chat message (#44), without a browser: a PDF and a .docx reach the model as text (the
inspector shows it, after the message, as text-generation-webui writes attachments), the log shows each as a file,
each is stored once per content, an edit, a branch, an export and an import keep them, and a file that cannot be
read or does not fit the context is a UserError that stores nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import last
from tests.documents import docx_bytes, pdf_bytes
from webui.controllers import UserError
from webui.controllers.chat import ChatSession
from webui.engine import SamplingParams

GREEDY = SamplingParams(temperature=0, max_new_tokens=3)
KEY = ("tab-1", "chat")
PDF = pdf_bytes("The launch code is PELICAN-7.")
DOCX = docx_bytes("Minutes: the budget was approved.", table=[["item", "cost"], ["tea", "4"]])


@pytest.fixture
def session(services, active):
    return ChatSession(services, active)


def stored(services, sql: str) -> list:
    return [tuple(row) for row in services.db.query(sql)]


def test_a_pdf_and_a_docx_reach_the_model_as_text_and_show_as_files(services, session):
    view = last(session.send(None, "Summarize these.", "", GREEDY, KEY,
                             documents=[(PDF, "report.pdf"), (DOCX, "minutes.docx")]))
    [message, _] = services.chats.messages(view.chat_id)
    assert [(d.name, d.kind) for d in message.documents] == [("report.pdf", "pdf"), ("minutes.docx", "docx")]
    assert message.content == "Summarize these."  # the message as typed; the documents beside it
    seen = session.inspect(view.chat_id).seen
    assert seen is not None
    assert "Summarize these.\n\nATTACHMENTS:\n\nName: report.pdf\nContents:\n\n=====\nThe launch code is PELICAN-7." \
        in seen.text
    assert "Name: minutes.docx" in seen.text and "Minutes: the budget was approved." in seen.text \
        and "tea\t4" in seen.text
    content = view.messages[0]["content"]  # the log: the files, then the text
    assert [Path(part["path"]).name for part in content[:2]] == ["report.pdf", "minutes.docx"]
    assert Path(content[0]["path"]).read_bytes() == PDF and content[2] == "Summarize these."
    record = session.inspect(view.chat_id).record
    assert record is not None and "PELICAN-7" in json.dumps(record.messages)  # reproduce sends the same text


def test_a_document_is_stored_once_and_edits_branches_exports_and_imports_keep_it(services, session, tmp_path):
    view = last(session.send(None, "Read this.", "", GREEDY, KEY, documents=[(PDF, "report.pdf")]))
    cid = view.chat_id
    last(session.send(cid, "And this again.", "", GREEDY, KEY, documents=[(PDF, "same.pdf")]))
    assert stored(services, "SELECT COUNT(*) FROM documents") == [(1,)]
    assert [d.name for d in services.chats.messages(cid)[2].documents] == ["same.pdf"]
    last(session.edit(cid, 0, "Read this, please.", GREEDY, KEY))
    [edited, _] = services.chats.messages(cid)
    assert edited.content == "Read this, please." and [d.name for d in edited.documents] == ["report.pdf"]
    path = session.library.export(cid)
    imported = session.library.import_file(path)
    assert [d.text for d in services.chats.messages(imported.chat_id)[0].documents] == \
        [d.text for d in edited.documents]
    copy = session.library.branch_chat(cid, 0)
    assert [d.name for d in services.chats.messages(copy.chat_id)[0].documents] == ["report.pdf"]
    for chat in (cid, imported.chat_id, copy.chat_id):
        session.library.delete(chat)
    assert stored(services, "SELECT COUNT(*) FROM documents") == [(0,)]  # no message holds it: gone


def test_a_file_that_cannot_be_read_or_does_not_fit_stores_nothing(services, session):
    with pytest.raises(UserError, match=r"Document 2: .*zip archive"):
        last(session.send(None, "Read.", "", GREEDY, KEY,
                          documents=[(b"notes", "notes.txt"), (b"PK\x03\x04rest", "notes.md")]))
    long = ("word " * 20_000).encode()
    with pytest.raises(UserError, match=r"the last message \(with the system prompt\) is \d+ tokens"):
        last(session.send(None, "Read.", "", GREEDY, KEY, documents=[(long, "long.txt")]))
    assert services.chats.list() == [] and stored(services, "SELECT COUNT(*) FROM documents") == [(0,)]


def test_a_malformed_document_in_an_import_is_refused(services, session, tmp_path):
    view = last(session.send(None, "Read this.", "", GREEDY, KEY, documents=[(PDF, "report.pdf")]))
    data = json.loads(session.library.export(view.chat_id).read_text())
    [(digest, entry)] = data["documents"].items()
    entry["data"] = entry["data"][:-8] + "AAAAAAA="  # other bytes under the same name
    (tmp_path / "bad.json").write_text(json.dumps(data))
    with pytest.raises(UserError, match="do not hash to its name"):
        session.library.import_file(tmp_path / "bad.json")
