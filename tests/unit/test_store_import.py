"""Tests for chat export/import (webui.store.chat_format through ChatStore)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from webui.store import ChatNotFound, ChatStore, Database, StoreError


@pytest.fixture
def chats(tmp_path: Path):
    db = Database(tmp_path / "workbench.sqlite3")
    yield ChatStore(db)
    db.close()


def sample(chats: ChatStore) -> int:
    chat = chats.create("Ünïcode & 100% title", system_prompt="You are terse.\nVery.")
    chats.append(chat.id, "system", "extra system")
    chats.append(chat.id, "user", "hi 👋")
    chats.append(chat.id, "assistant", "hello", stats={"tokens": 2, "ttft": 0.05,
                                                       "finish_reason": "stop", "seed": 1,
                                                       "params": {"top_p": 0.9}})
    return chat.id


def good_document() -> dict:
    return {"format": "llm-workbench.chat", "version": 1, "title": "T", "system_prompt": "S",
            "created": 1700000000.0,
            "messages": [{"role": "user", "content": "a", "stats": None},
                         {"role": "assistant", "content": "b", "stats": {"tokens": 1}},
                         {"role": "user", "content": "c"}]}


def test_export_format(chats: ChatStore) -> None:
    chat_id = sample(chats)
    data = json.loads(chats.export_json(chat_id))
    assert list(data) == ["format", "version", "title", "system_prompt", "created", "messages", "current"]
    assert data["format"] == "llm-workbench.chat" and data["version"] == 2
    assert data["title"] == "Ünïcode & 100% title"
    assert data["created"] == chats.get(chat_id).created
    assert data["messages"][1] == {"role": "user", "content": "hi 👋", "stats": None, "parent": 0}
    with pytest.raises(ChatNotFound):
        chats.export_json(999)


def test_round_trip(chats: ChatStore) -> None:
    chat_id = sample(chats)
    text = chats.export_json(chat_id)
    copy = chats.import_json(text)
    assert copy.id != chat_id
    assert chats.export_json(copy.id) == text
    original, imported = chats.get(chat_id), chats.get(copy.id)
    assert (imported.title, imported.system_prompt, imported.created) == (
        original.title, original.system_prompt, original.created)
    strip = [(m.position, m.role, m.content, m.stats) for m in chats.messages(chat_id)]
    assert [(m.position, m.role, m.content, m.stats) for m in chats.messages(copy.id)] == strip
    assert chats.list()[0].id == copy.id  # an import is the most recently updated chat


def test_optional_fields_have_defaults(chats: ChatStore) -> None:
    doc = {"format": "llm-workbench.chat", "version": 1, "title": "Bare",
           "messages": [{"role": "user", "content": "x"}], "future_key": [1, 2]}
    chat = chats.import_json(json.dumps(doc))
    assert chat.system_prompt == "" and chat.created > 0
    assert [(m.role, m.content, m.stats) for m in chats.messages(chat.id)] == [("user", "x", None)]


def _mutate(path: tuple, value: object) -> str:
    doc = good_document()
    target = doc
    for key in path[:-1]:
        target = target[key]
    if value is _DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return json.dumps(doc)


_DELETE = object()

MALFORMED = [
    ("{not json", r"not valid JSON \(line 1 column 2"),
    ("", "not valid JSON"),
    ('{"format": "llm-workbench.chat", "version": 1, "title": "t", "created": NaN, '
     '"messages": []}', "NaN is not allowed"),
    ("[1, 2]", "expected a JSON object at the top level, got a list"),
    (_mutate(("format",), _DELETE), "missing field 'format'"),
    (_mutate(("format",), "other.app"), "format must be 'llm-workbench.chat', got 'other.app'"),
    (_mutate(("version",), _DELETE), "missing field 'version'"),
    (_mutate(("version",), 3), "version 3 was written by a newer workbench.*upgrade"),
    (_mutate(("version",), "1"), "version must be 1 or 2, got '1'"),
    (_mutate(("version",), True), "version must be 1 or 2, got True"),
    (_mutate(("title",), _DELETE), "missing field 'title'"),
    (_mutate(("title",), 5), r"title must be a string, got a number \(5\)"),
    (_mutate(("title",), "  "), "title must not be empty"),
    (_mutate(("title",), "a\nb"), "title must not contain control characters"),
    (_mutate(("system_prompt",), None), "system_prompt must be a string, got null"),
    (_mutate(("created",), "yesterday"), "created must be a number"),
    (_mutate(("created",), -5), "created must be a time"),
    (_mutate(("messages",), _DELETE), "missing field 'messages'"),
    (_mutate(("messages",), {"role": "user"}), "messages must be a list, got an object"),
    (_mutate(("messages", 2), "hello"), r"messages\[2\] must be an object, got a string"),
    (_mutate(("messages", 2, "role"), "bot"),
     r"messages\[2\]\.role must be one of system, user, assistant, got 'bot'"),
    (_mutate(("messages", 1, "role"), _DELETE), r"messages\[1\] is missing field 'role'"),
    (_mutate(("messages", 2, "content"), _DELETE), r"messages\[2\] is missing field 'content'"),
    (_mutate(("messages", 0, "content"), ["a"]),
     r"messages\[0\]\.content must be a string, got a list"),
    (_mutate(("messages", 2, "content"), None),
     r"messages\[2\]\.content must be a string, got null"),
    (_mutate(("messages", 1, "stats"), [1]), r"messages\[1\]\.stats must be an object or null"),
]


@pytest.mark.parametrize(("text", "message"), MALFORMED)
def test_malformed_import_is_refused_and_writes_nothing(chats: ChatStore, text: str,
                                                        message: str) -> None:
    chat_id = sample(chats)
    before = chats.list()
    with pytest.raises(StoreError, match=message) as info:
        chats.import_json(text)
    assert str(info.value).startswith("cannot import chat: ")
    assert chats.list() == before
    assert len(chats.messages(chat_id)) == 3


def test_good_document_imports(chats: ChatStore) -> None:
    chat = chats.import_json(json.dumps(good_document()))
    assert (chat.title, chat.system_prompt, chat.created) == ("T", "S", 1700000000.0)
    assert [m.content for m in chats.messages(chat.id)] == ["a", "b", "c"]


def test_failure_while_writing_rolls_back(chats: ChatStore, monkeypatch) -> None:
    """A failure after the chat row is inserted leaves no chat behind."""
    import webui.store.chats as module

    real = module._stats_json
    calls = 0

    def failing(stats):
        nonlocal calls
        calls += 1
        if calls == 3:
            raise StoreError("disk on fire")
        return real(stats)

    monkeypatch.setattr(module, "_stats_json", failing)
    with pytest.raises(StoreError, match="disk on fire"):
        chats.import_json(json.dumps(good_document()))
    assert chats.list() == []


text_st = st.text(st.characters(blacklist_categories=("Cs",)), max_size=30)
json_scalar = st.none() | st.booleans() | st.integers(-10**6, 10**6) | \
    st.floats(allow_nan=False, allow_infinity=False) | text_st
stats_st = st.none() | st.dictionaries(text_st, json_scalar | st.lists(json_scalar, max_size=3),
                                       max_size=4)
message_st = st.tuples(st.sampled_from(["system", "user", "assistant"]), text_st, stats_st)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(title=st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=50)
       .filter(lambda t: t.strip() == t and t),
       system_prompt=text_st, messages=st.lists(message_st, max_size=6))
def test_round_trip_property(chats: ChatStore, title: str, system_prompt: str,
                             messages: list) -> None:
    chat = chats.create(title, system_prompt=system_prompt)
    for role, content, stats in messages:
        chats.append(chat.id, role, content, stats=stats)
    text = chats.export_json(chat.id)
    copy = chats.import_json(text)
    assert chats.export_json(copy.id) == text
    assert [(m.role, m.content, m.stats) for m in chats.messages(copy.id)] == messages
