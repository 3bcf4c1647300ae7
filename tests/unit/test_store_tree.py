"""Messages as a tree: versions kept by rewind + append, switching the shown path, branching to a new chat,
exports that keep every version, and databases from before the tree moved into it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from webui.store import ChatStore, Database, MessageNotFound, StoreError
from webui.store.schema import MIGRATIONS


@pytest.fixture
def chats(tmp_path: Path):
    db = Database(tmp_path / "workbench.sqlite3")
    yield ChatStore(db)
    db.close()


def contents(chats: ChatStore, chat_id: int) -> list[str]:
    return [m.content for m in chats.messages(chat_id)]


def test_a_regenerated_reply_is_a_new_version_and_the_old_one_stays(chats):
    chat = chats.create()
    chats.append(chat.id, "user", "Hi")
    first = chats.append(chat.id, "assistant", "Hello")
    chats.rewind(chat.id, 1)
    assert contents(chats, chat.id) == ["Hi"]
    second = chats.append(chat.id, "assistant", "Hey")
    assert contents(chats, chat.id) == ["Hi", "Hey"] and second.parent_id == first.parent_id
    assert chats.versions(second.id) == [first.id, second.id]
    later = chats.append(chat.id, "user", "How are you?")
    assert chats.show(first.id)[-1].id == first.id and contents(chats, chat.id) == ["Hi", "Hello"]
    assert [m.content for m in chats.show(second.id)] == ["Hi", "Hey", "How are you?"]  # its own continuation
    assert chats.messages(chat.id)[-1].id == later.id
    with pytest.raises(MessageNotFound):
        chats.versions(999)


def test_an_edited_first_message_is_a_new_branch_from_the_start(chats):
    chat = chats.create()
    chats.append(chat.id, "user", "one")
    chats.append(chat.id, "assistant", "two")
    chats.rewind(chat.id, 0)
    edited = chats.append(chat.id, "user", "one, edited")
    assert edited.parent_id is None and edited.position == 0 and len(chats.versions(edited.id)) == 2
    assert contents(chats, chat.id) == ["one, edited"]


def test_truncate_deletes_the_shown_messages_and_what_followed_them(chats):
    chat = chats.create()
    chats.append(chat.id, "user", "a")
    reply = chats.append(chat.id, "assistant", "b")
    chats.rewind(chat.id, 1)
    chats.append(chat.id, "assistant", "b2")
    chats.append(chat.id, "user", "c")
    assert chats.truncate(chat.id, 1) == 2  # b2 and c; b (another version) stays
    assert contents(chats, chat.id) == ["a"] and chats.versions(reply.id) == [reply.id]


def test_branch_to_a_new_chat_copies_the_path_up_to_a_message(chats):
    chat = chats.create("Original", system_prompt="Be brief.")
    chats.append(chat.id, "user", "a")
    middle = chats.append(chat.id, "assistant", "b", stats={"seed": 3})
    chats.append(chat.id, "user", "c")
    copy = chats.branch(middle.id, "Original (branch)")
    assert copy.id != chat.id and copy.system_prompt == "Be brief." and contents(chats, copy.id) == ["a", "b"]
    assert chats.messages(copy.id)[-1].stats == {"seed": 3} and contents(chats, chat.id) == ["a", "b", "c"]


def test_export_and_import_keep_every_version_and_the_shown_path(chats):
    chat = chats.create()
    chats.append(chat.id, "user", "Hi")
    chats.append(chat.id, "assistant", "Hello")
    chats.rewind(chat.id, 1)
    chats.append(chat.id, "assistant", "Hey")
    first = chats.messages(chat.id)[0]
    chats.show(chats.versions(chats.messages(chat.id)[1].id)[0])  # back to "Hello"
    data = json.loads(chats.export_json(chat.id))
    assert [m["parent"] for m in data["messages"]] == [None, 0, 0] and data["current"] == 1
    copy = chats.import_json(json.dumps(data))
    assert contents(chats, copy.id) == ["Hi", "Hello"]
    shown = chats.messages(copy.id)
    assert len(chats.versions(shown[1].id)) == 2 and first.id != shown[0].id


def test_a_database_from_before_the_tree_keeps_its_chats(tmp_path):
    path = tmp_path / "old.sqlite3"
    old = Database(path, MIGRATIONS[:3])
    with old.transaction() as conn:
        conn.execute("INSERT INTO chats (id, title, system_prompt, created, updated) VALUES (1, 't', '', 0, 0)")
        for i, (role, text) in enumerate([("user", "a"), ("assistant", "b"), ("user", "c")]):
            conn.execute("INSERT INTO messages (chat_id, position, role, content, created) VALUES (1, ?, ?, ?, 0)",
                         (i, role, text))
    old.close()
    db = Database(path)
    try:
        chats = ChatStore(db)
        shown = chats.messages(1)
        assert [m.content for m in shown] == ["a", "b", "c"] and [m.parent_id for m in shown] == [
            None, shown[0].id, shown[1].id]
        assert chats.append(1, "assistant", "d").position == 3
    finally:
        db.close()


TGWUI_HISTORY = {  # the shape text-generation-webui saves in logs/chat/<character>/<id>.json
    "internal": [["<|BEGIN-VISIBLE-CHAT|>", "How can I help you today?"],
                 ["What is 2 < 3?", "True: 2 is less than 3."],
                 ["Thanks", ""]],
    "visible": [["", "How can I help you today?"], ["What is 2 &lt; 3?", "True: 2 is less than 3."],
                ["Thanks", ""]],
    "metadata": {"assistant_0": {"timestamp": "Dec 03, 2026 10:00"}},
}


def test_a_text_generation_webui_history_imports_and_exports_back(chats):
    chat = chats.import_json(json.dumps(TGWUI_HISTORY))
    assert chat.title == "Imported from text-generation-webui"
    assert [(m.role, m.content) for m in chats.messages(chat.id)] == [
        ("assistant", "How can I help you today?"), ("user", "What is 2 < 3?"),
        ("assistant", "True: 2 is less than 3."), ("user", "Thanks")]
    back = json.loads(chats.export_tgwui(chat.id))
    assert back["internal"] == TGWUI_HISTORY["internal"] and back["visible"] == TGWUI_HISTORY["visible"]


@pytest.mark.parametrize("history, said", [
    ({"internal": "nope"}, "internal must be a list"),
    ({"internal": [["only one"]]}, r"internal\[0\] must be a \[user message, reply\] pair"),
    ({"internal": []}, "holds no messages"),
])
def test_a_bad_text_generation_webui_history_is_named_and_nothing_is_written(chats, history, said):
    with pytest.raises(StoreError, match=said):
        chats.import_json(json.dumps(history))
    assert chats.list() == []
