"""Stored responses of the Responses API (#45) in a real SQLite file: those a stopped process was generating are
failed at the next start, saying why, and nothing else changes."""

from __future__ import annotations

from pathlib import Path

from webui.store import Database
from webui.store.responses import ResponseStore, StoredResponse


def test_responses_a_stopped_server_was_generating_are_failed_saying_why(tmp_path: Path) -> None:
    db = Database(tmp_path / "workbench.sqlite3")
    try:
        store = ResponseStore(db)
        for rid, status, background in (("resp_a", "queued", True), ("resp_b", "in_progress", False),
                                        ("resp_c", "completed", False), ("resp_d", "cancelled", True)):
            store.add(StoredResponse(rid, "key 1", 1.0, {"id": rid, "status": status, "output": []},
                                     background=background))
        assert store.mark_interrupted() == 2
        for rid in ("resp_a", "resp_b"):
            failed = store.get(rid)
            assert failed is not None and failed.status == "failed"
            assert failed.response["error"]["code"] == "server_error"
            assert "send the request again" in failed.response["error"]["message"]
        assert [store.get(r).status for r in ("resp_c", "resp_d")] == ["completed", "cancelled"]
        assert store.mark_interrupted() == 0
    finally:
        db.close()
