"""Tests for webui.store.chats.ChatStore: CRUD, search, truncate, updated timestamps."""

from __future__ import annotations

from pathlib import Path

import pytest

from webui.store import ChatNotFound, ChatStore, Database, MessageNotFound, StoreError


@pytest.fixture
def chats(tmp_path: Path):
    db = Database(tmp_path / "workbench.sqlite3")
    yield ChatStore(db)
    db.close()


def test_create_and_get(chats: ChatStore) -> None:
    chat = chats.create()
    assert chat.title == "New chat" and chat.system_prompt == ""
    assert chat.created == chat.updated
    other = chats.create("  Trip plans  ", system_prompt="Be brief.")
    assert other.title == "Trip plans" and other.system_prompt == "Be brief."
    assert chats.get(other.id) == other


def test_get_missing_chat(chats: ChatStore) -> None:
    with pytest.raises(ChatNotFound, match="chat 42 does not exist"):
        chats.get(42)
    assert issubclass(ChatNotFound, StoreError)


def test_list_most_recently_updated_first(chats: ChatStore) -> None:
    a, b, c = (chats.create(t) for t in "abc")
    assert [x.title for x in chats.list()] == ["c", "b", "a"]
    chats.append(a.id, "user", "hi")
    assert [x.title for x in chats.list()] == ["a", "c", "b"]
    chats.rename(b.id, "b2")
    assert [x.title for x in chats.list()] == ["b2", "a", "c"]


def test_every_write_touches_updated(chats: ChatStore) -> None:
    chat = chats.create()
    last = chat.updated

    def newer() -> float:
        nonlocal last
        now = chats.get(chat.id).updated
        assert now > last
        last = now
        return now

    message = chats.append(chat.id, "user", "a")
    newer()
    chats.update(message.id, content="b")
    newer()
    chats.rename(chat.id, "t")
    newer()
    chats.set_system_prompt(chat.id, "s")
    newer()
    chats.truncate(chat.id, 0)
    newer()


def test_rename_and_title_rules(chats: ChatStore) -> None:
    chat = chats.create()
    assert chats.rename(chat.id, " a/b\\c:d ").title == "a/b\\c:d"  # path characters are fine
    for bad, why in [("", "empty"), ("   ", "empty"), ("x" * 201, "too long"),
                     ("two\nlines", "control characters"), ("tab\there", "control characters"),
                     (None, "must be a string")]:
        with pytest.raises(StoreError, match=why):
            chats.rename(chat.id, bad)
    assert chats.rename(chat.id, "x" * 200).title == "x" * 200
    with pytest.raises(StoreError, match="control characters"):
        chats.create("bell\x07")
    with pytest.raises(ChatNotFound):
        chats.rename(999, "t")


def test_set_system_prompt(chats: ChatStore) -> None:
    chat = chats.create()
    assert chats.set_system_prompt(chat.id, "line 1\nline 2").system_prompt == "line 1\nline 2"
    assert chats.get(chat.id).system_prompt == "line 1\nline 2"
    with pytest.raises(ChatNotFound):
        chats.set_system_prompt(999, "x")


def test_append_messages_in_order(chats: ChatStore) -> None:
    chat = chats.create()
    first = chats.append(chat.id, "system", "sys")
    second = chats.append(chat.id, "user", "question")
    stats = {"tokens": 5, "ttft": 0.12, "tokens_per_s": 41.5, "finish_reason": "stop",
             "seed": 7, "params": {"temperature": 0.7}}
    third = chats.append(chat.id, "assistant", "answer ✓", stats=stats)
    assert (first.position, second.position, third.position) == (0, 1, 2)
    assert chats.messages(chat.id) == [first, second, third]
    assert chats.messages(chat.id)[2].stats == stats
    assert third.chat_id == chat.id


def test_append_refuses_bad_input(chats: ChatStore) -> None:
    chat = chats.create()
    with pytest.raises(StoreError, match="role must be one of system, user, assistant, got 'bot'"):
        chats.append(chat.id, "bot", "x")
    with pytest.raises(StoreError, match="content must be a string"):
        chats.append(chat.id, "user", 42)
    with pytest.raises(StoreError, match="stats must be a dict"):
        chats.append(chat.id, "user", "x", stats=[1])
    with pytest.raises(StoreError, match="stats must be plain JSON"):
        chats.append(chat.id, "user", "x", stats={"tokens_per_s": float("inf")})
    with pytest.raises(StoreError, match="stats must be plain JSON"):
        chats.append(chat.id, "user", "x", stats={"when": object()})
    with pytest.raises(ChatNotFound):
        chats.append(999, "user", "x")
    assert chats.messages(chat.id) == []


def test_update_streams_into_a_message(chats: ChatStore) -> None:
    chat = chats.create()
    reply = chats.append(chat.id, "assistant", "He")
    assert chats.update(reply.id, content="Hello").content == "Hello"
    done = chats.update(reply.id, stats={"finish_reason": "stop"})
    assert (done.content, done.stats) == ("Hello", {"finish_reason": "stop"})
    assert chats.update(reply.id, content="Hello!").stats == {"finish_reason": "stop"}
    assert chats.messages(chat.id) == [chats.update(reply.id)]
    with pytest.raises(MessageNotFound, match="message 999 does not exist"):
        chats.update(999, content="x")


def test_truncate(chats: ChatStore) -> None:
    chat = chats.create()
    for i in range(5):
        chats.append(chat.id, "user" if i % 2 == 0 else "assistant", f"m{i}")
    assert chats.truncate(chat.id, 3) == 2
    assert [m.content for m in chats.messages(chat.id)] == ["m0", "m1", "m2"]
    # Appending after a truncate continues the positions without gaps.
    assert chats.append(chat.id, "assistant", "again").position == 3
    assert chats.truncate(chat.id, 10) == 0
    assert chats.truncate(chat.id, 0) == 4
    assert chats.messages(chat.id) == []
    with pytest.raises(StoreError, match="from_position"):
        chats.truncate(chat.id, -1)
    with pytest.raises(ChatNotFound):
        chats.truncate(999, 0)


def test_delete_cascades_messages(chats: ChatStore) -> None:
    keep, gone = chats.create("keep"), chats.create("gone")
    chats.append(keep.id, "user", "a")
    message = chats.append(gone.id, "user", "b")
    chats.delete(gone.id)
    with pytest.raises(ChatNotFound):
        chats.get(gone.id)
    with pytest.raises(ChatNotFound):
        chats.messages(gone.id)
    with pytest.raises(MessageNotFound):
        chats.update(message.id, content="c")
    with pytest.raises(ChatNotFound):
        chats.delete(gone.id)
    assert [m.content for m in chats.messages(keep.id)] == ["a"]


def test_search_by_title_and_content(chats: ChatStore) -> None:
    paris = chats.create("Trip to Paris")
    code = chats.create("Python help")
    chats.append(code.id, "user", "How do I sort a dict?")
    chats.create("Empty")
    assert [c.id for c in chats.list("paris")] == [paris.id]
    assert [c.id for c in chats.list("SORT A")] == [code.id]
    assert [c.id for c in chats.list("  dict  ")] == [code.id]
    assert chats.list("nothing like this") == []
    assert len(chats.list("")) == len(chats.list("   ")) == 3


def test_search_is_unicode_case_insensitive(chats: ChatStore) -> None:
    chat = chats.create("Über Straße")
    assert [c.id for c in chats.list("über")] == [chat.id]
    assert [c.id for c in chats.list("STRASSE")] == [chat.id]


def test_search_treats_like_wildcards_literally(chats: ChatStore) -> None:
    percent = chats.create("100% done")
    underscore = chats.create("snake_case")
    backslash = chats.create("C:\\temp")
    plain = chats.create("100 done snakeXcase Ctemp")
    chats.append(plain.id, "user", "abc")
    assert [c.id for c in chats.list("%")] == [percent.id]
    assert [c.id for c in chats.list("0% d")] == [percent.id]
    assert [c.id for c in chats.list("_")] == [underscore.id]
    assert [c.id for c in chats.list("e_c")] == [underscore.id]
    assert [c.id for c in chats.list("\\")] == [backslash.id]
    assert chats.list("a%c") == []
    msg_chat = chats.create("other")
    chats.append(msg_chat.id, "assistant", "50%_off")
    assert [c.id for c in chats.list("%_")] == [msg_chat.id]


def test_a_chat_keeps_its_mode_and_character(chats: ChatStore) -> None:
    plain = chats.create("Plain")
    assert plain.mode == "instruct" and plain.character is None
    chat = chats.create("Ahoy", mode="chat", character="Ann")
    assert chats.get(chat.id).mode == "chat" and chats.get(chat.id).character == "Ann"
    chats.append(chat.id, "assistant", "Hi Zed!")
    changed = chats.set_mode(chat.id, "chat-instruct", None)
    assert (changed.mode, changed.character) == ("chat-instruct", None)
    assert [m.content for m in chats.messages(chat.id)] == ["Hi Zed!"]
    chats.set_mode(chat.id, "chat", "Ann")
    branched = chats.branch(chats.messages(chat.id)[0].id, "Branch")
    assert (branched.mode, branched.character) == ("chat", "Ann")


def test_bad_modes_and_characters_are_refused(chats: ChatStore) -> None:
    with pytest.raises(StoreError, match="mode must be one of instruct, chat, chat-instruct, got 'rp'"):
        chats.create(mode="rp")
    chat = chats.create()
    with pytest.raises(StoreError, match="character must be a character's name or None"):
        chats.set_mode(chat.id, "chat", " ")
    assert chats.get(chat.id).mode == "instruct"


def test_mode_and_character_travel_in_exports(chats: ChatStore) -> None:
    chat = chats.create("Ahoy", mode="chat-instruct", character="Ann")
    chats.append(chat.id, "assistant", "Hi!")
    copy = chats.import_json(chats.export_json(chat.id))
    assert (copy.mode, copy.character) == ("chat-instruct", "Ann")
    plain = chats.create("Plain")
    assert '"mode"' not in chats.export_json(plain.id)  # exports of instruct chats are as they were
    text = chats.export_json(chat.id).replace('"chat-instruct"', '"roleplay"')
    with pytest.raises(StoreError, match="mode must be one of"):
        chats.import_json(text)
    with pytest.raises(StoreError, match="character must be a character's name or null, got a number"):
        chats.import_json(chats.export_json(chat.id).replace('"Ann"', "3"))


def test_chats_made_before_modes_open_as_instruct_chats(tmp_path: Path) -> None:
    from webui.store.schema import MIGRATIONS

    path = tmp_path / "old.sqlite3"
    with Database(path, migrations=MIGRATIONS[:7]) as db:
        with db.transaction() as conn:
            conn.execute("INSERT INTO chats (title, system_prompt, created, updated) VALUES ('Old', '', 1, 1)")
    with Database(path) as db:
        old = ChatStore(db).list()[0]
        assert (old.title, old.mode, old.character) == ("Old", "instruct", None)
