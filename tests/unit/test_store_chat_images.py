"""Images carried by chat messages: stored once by content, kept by versions and branches, exported and imported
with the chat JSON (bytes checked against their SHA-256 names), gone with the last message that carries them."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from tests.vision_models import png
from webui.store import ChatStore, Database, StoreError

RED, BLUE = png((200, 30, 30)), png((20, 40, 220), stripe=3)


@pytest.fixture
def db(tmp_path: Path):
    made = Database(tmp_path / "workbench.sqlite3")
    yield made
    made.close()


def name(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def images_stored(db: Database) -> int:
    return db.query_one("SELECT COUNT(*) AS n FROM images")["n"]


def test_messages_carry_images_stored_once(db):
    chats = ChatStore(db)
    chat = chats.create()
    first = chats.append(chat.id, "user", "What is this?", images=[RED, BLUE])
    chats.append(chat.id, "assistant", "A red square.")
    chats.append(chat.id, "user", "And this one again?", images=[RED])
    shown = chats.messages(chat.id)
    assert [m.images for m in shown] == [(name(RED), name(BLUE)), (), (name(RED),)]
    assert first.images == (name(RED), name(BLUE)) and chats.image(name(BLUE)) == BLUE
    assert images_stored(db) == 2  # the same picture twice is one row
    chats.rewind(chat.id, 1)  # a new version of the reply: the message before keeps its images
    chats.append(chat.id, "assistant", "Two squares.")
    assert chats.messages(chat.id)[0].images == (name(RED), name(BLUE))
    branch = chats.branch(first.id, "Branch")
    assert chats.messages(branch.id)[0].images == (name(RED), name(BLUE))
    with pytest.raises(StoreError, match="images must be the bytes"):
        chats.append(chat.id, "user", "x", images=["not bytes"])  # type: ignore[list-item]


def test_export_and_import_keep_the_images(db):
    chats = ChatStore(db)
    chat = chats.create("Pictures")
    chats.append(chat.id, "user", "Look", images=[BLUE])
    chats.append(chat.id, "assistant", "Blue.")
    text = chats.export_json(chat.id)
    document = json.loads(text)
    assert document["messages"][0]["images"] == [name(BLUE)] and list(document["images"]) == [name(BLUE)]
    chats.delete(chat.id)
    assert images_stored(db) == 0  # no message carries it any more
    again = chats.import_json(text)
    assert [m.images for m in chats.messages(again.id)] == [(name(BLUE),), ()]
    assert chats.image(name(BLUE)) == BLUE
    document["images"][name(BLUE)] = document["images"][name(BLUE)][:-8] + "AAAAAAA="
    with pytest.raises(StoreError, match="do not hash to its name"):
        chats.import_json(json.dumps(document))
    del document["images"]
    with pytest.raises(StoreError, match="whose bytes are not in 'images'"):
        chats.import_json(json.dumps(document))


def test_truncating_drops_images_no_message_carries(db):
    chats = ChatStore(db)
    chat = chats.create()
    chats.append(chat.id, "user", "one", images=[RED])
    chats.append(chat.id, "user", "two", images=[BLUE])
    chats.truncate(chat.id, 1)
    assert images_stored(db) == 1 and chats.image(name(RED)) == RED
    with pytest.raises(StoreError, match="no chat holds"):
        chats.image(name(BLUE))
