"""Kept API requests in a real SQLite file (#33): order, pages, filters, scoping by client and the retention
budget (count and bytes, oldest first)."""

from __future__ import annotations

from webui.store import Database
from webui.store.requests import CapturedRequest, RequestStore, Retention


def item(n: int, client: str = "key 1", stored: bool = True, size: int = 10, **extra) -> CapturedRequest:
    return CapturedRequest(f"chatcmpl-{n}", 1000.0 + n, "/v1/chat/completions", 200, client,
                           {"messages": [{"role": "user", "content": "x" * size}]}, {"id": f"chatcmpl-{n}"},
                           model="m", stored=stored, **extra)


def test_pages_follow_the_order_taken_with_after_and_desc(tmp_path):
    store = RequestStore(Database(tmp_path / "w.sqlite3"))
    for n in range(5):
        store.add(item(n))
    first = store.page(limit=2)
    assert [i.id for i in first.items] == ["chatcmpl-0", "chatcmpl-1"] and first.has_more
    assert [i.id for i in store.page(after="chatcmpl-1", limit=10).items] == ["chatcmpl-2", "chatcmpl-3", "chatcmpl-4"]
    newest = store.page(order="desc", limit=2, after="chatcmpl-4")
    assert [i.id for i in newest.items] == ["chatcmpl-3", "chatcmpl-2"] and newest.has_more
    assert not store.page(after="chatcmpl-3", limit=1).has_more


def test_filters_by_client_stored_model_and_metadata(tmp_path):
    store = RequestStore(Database(tmp_path / "w.sqlite3"))
    store.add(item(1, metadata={"topic": "a b", "x": "1"}))
    store.add(item(2, client="key 2", metadata={"topic": "a b"}))
    store.add(item(3, stored=False, metadata={"topic": "a b"}))
    assert [i.id for i in store.page(client="key 1", stored=True).items] == ["chatcmpl-1"]
    assert [i.id for i in store.page(stored=True, metadata={"topic": "a b"}).items] == ["chatcmpl-1", "chatcmpl-2"]
    assert [i.id for i in store.page(metadata={"topic": "a b", "x": "1"}).items] == ["chatcmpl-1"]
    assert store.page(model="other").items == []
    assert store.get("chatcmpl-2", client="key 1") is None and store.get("chatcmpl-2").client == "key 2"
    store.set_metadata("chatcmpl-1", {"topic": "c"})
    assert store.get("chatcmpl-1").metadata == {"topic": "c"}
    assert store.delete("chatcmpl-1") and not store.delete("chatcmpl-1")


def test_the_oldest_go_first_past_the_count_or_the_bytes(tmp_path):
    db = Database(tmp_path / "w.sqlite3")
    store = RequestStore(db, Retention(max_requests=3, max_bytes=10**9))
    for n in range(5):
        store.add(item(n))
    assert [i.id for i in store.page().items] == ["chatcmpl-2", "chatcmpl-3", "chatcmpl-4"]
    store.retention = Retention(max_requests=100, max_bytes=3000)
    store.add(item(5, size=1200))
    store.add(item(6, size=1200))
    count, size = store.count()
    assert size <= 3000 and [i.id for i in store.page().items][-2:] == ["chatcmpl-5", "chatcmpl-6"]
    store.add(item(7, size=5000))  # larger than the whole budget: nothing is kept, not even it
    assert store.count() == (0, 0)


def test_a_body_that_was_not_json_is_kept_as_the_text_sent(tmp_path):
    store = RequestStore(Database(tmp_path / "w.sqlite3"))
    store.add(CapturedRequest("req-1", 1.0, "/v1/completions", 400, "", '{"prompt": "cut', {"error": {}}))
    assert store.get("req-1").request == '{"prompt": "cut'
