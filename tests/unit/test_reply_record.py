"""ReplyRecord: a chat reply's stats as a type, read from and written to the JSON replies were always stored with."""

from __future__ import annotations

import json

from webui.chat.reply import GivenStart, ReplyRecord, RunStats, reply_summary
from webui.store import ChatStore, Database

# A continued reply that left two messages out, exactly as the code before ReplyRecord stored it (the parameters
# shortened: the record keeps them as they are).
STORED = {
    "model": "tiny", "loader": "transformers", "load_options": {"n_ctx": 256},
    "chat_template": {"name": "ChatML", "source": "{{x}}"}, "loras": [["a", 0.5]],
    "completion_tokens": 4, "prompt_tokens": 12, "cached_tokens": 3, "guidance_tokens": 0,
    "time_to_first_token": 0.0512, "tokens_per_second": 33.333, "finish_reason": "stop", "stop_string": "\nUser:",
    "seed": 11, "params": {"temperature": 0.0, "max_new_tokens": 4, "stop": [], "seed": None},
    "summary": "4 tokens, 2 new · prompt 12 (3 cached) · first token 0.05s · 33.3 tok/s · "
               "finish: stop ('\\nUser:') · seed 11 · by tiny (transformers) · "
               "2 oldest messages were not sent (over truncation_length 80)",
    "token_ids": [5, 6, 7, 8], "tokens": [{"id": i, "p": 0.5} for i in (5, 6, 7, 8)],
    "continue_from": {"token_ids": [5, 6], "text": "Hello"}, "dropped": 2, "dropped_over": 80}
EDITED = {"edited": True, "summary": "edited by hand"}
BRANCHED = {"model": "tiny", "loader": "transformers", "chat_template": None, "loras": [],
            "token_ids": [5, 9], "tokens": [{"id": 5}, {"id": 9}], "summary": "2 tokens · branched at the last token"}


def dumped(value) -> str:
    return json.dumps(value, allow_nan=False, ensure_ascii=False)  # as the store writes a message's stats


def test_a_stored_run_record_reads_as_a_typed_record_and_writes_back_byte_for_byte():
    record = ReplyRecord.from_json(STORED)
    assert record.run == RunStats({"temperature": 0.0, "max_new_tokens": 4, "stop": [], "seed": None}, "stop", 11,
                                  4, 12, 3, 0, 0.0512, 33.333, "\nUser:")
    assert (record.model, record.loader, record.loras, record.load_options) == (
        "tiny", "transformers", (("a", 0.5),), {"n_ctx": 256})
    assert record.given == GivenStart("Hello", (5, 6)) and (record.dropped, record.dropped_over) == (2, 80)
    assert record.token_ids == (5, 6, 7, 8) and record.tokens[0] == {"id": 5, "p": 0.5}
    assert dumped(record.to_json()) == dumped(STORED)
    assert record.summary == reply_summary(record) == STORED["summary"]  # formatted from the fields, not kept


def test_edited_and_branched_records_keep_their_shapes():
    for stored in (EDITED, BRANCHED):
        record = ReplyRecord.from_json(stored)
        assert dumped(record.to_json()) == dumped(stored) and record.summary == stored["summary"]
        assert record.run is None
    assert ReplyRecord.from_json(EDITED).edited and ReplyRecord(edited=True).to_json() == EDITED


def test_missing_keys_get_defaults_and_unknown_keys_are_kept():
    record = ReplyRecord.from_json({"model": "tiny", "params": {"temperature": 0.7, "seed": 5}, "rating": 4})
    assert record.loader == "" and record.chat_template is None and record.loras == () and record.token_ids == ()
    assert record.run is not None and record.run.seed == 5  # a record without "seed" ran with its parameters' seed
    assert record.run.finish_reason == "" and record.run.time_to_first_token is None and record.extra == {"rating": 4}
    assert list(record.to_json())[-1] == "rating" and record.to_json()["rating"] == 4
    assert ReplyRecord.from_json(None) == ReplyRecord.from_json({}) == ReplyRecord() and ReplyRecord().summary == ""


def test_values_of_the_wrong_type_read_as_defaults_and_a_record_with_nothing_to_format_shows_its_own_line():
    record = ReplyRecord.from_json({"tokens": 3, "ttft": 0.05, "token_ids": "x", "dropped": "2", "loras": {},
                                    "continue_from": [1], "summary": "3 tokens · 0.05s"})
    assert (record.tokens, record.token_ids, record.dropped, record.loras, record.given) == ((), (), 0, (), None)
    assert record.summary == "3 tokens · 0.05s" and record.extra == {"ttft": 0.05, "summary": "3 tokens · 0.05s"}


def test_the_store_writes_a_record_as_its_json_and_reads_it_back(tmp_path):
    chats = ChatStore(Database(tmp_path / "db.sqlite3"))
    chat = chats.create("t")
    chats.append(chat.id, "user", "Hi")
    reply = chats.append(chat.id, "assistant", "Hello there", stats=ReplyRecord.from_json(STORED))
    row = chats._db.query_one("SELECT stats FROM messages WHERE id = ?", (reply.id,))
    assert row is not None and row["stats"] == dumped(STORED)
    assert chats.messages(chat.id)[-1].record == ReplyRecord.from_json(STORED)
    assert chats.messages(chat.id)[0].record == ReplyRecord()  # a message without stats: an empty record
    done = chats.update(reply.id, stats=ReplyRecord(edited=True))
    assert done.stats == EDITED and json.loads(chats.export_json(chat.id))["messages"][1]["stats"] == EDITED


def test_a_reply_in_a_chat_mode_keeps_the_mode_and_character_and_old_records_read_as_instruct():
    mode = {"mode": "chat", "character": {"name": "Ann", "greeting": "Hi", "context": "A pirate.",
                                          "user_name": "Zed", "user_bio": ""}}
    stored = {**STORED, "chat_mode": mode}
    record = ReplyRecord.from_json(json.loads(dumped(stored)))
    assert record.chat_mode == mode and "chat_mode" not in record.extra
    assert dumped(record.to_json()) == dumped(stored)
    assert ReplyRecord.from_json(STORED).chat_mode is None
    assert "chat_mode" not in ReplyRecord.from_json(STORED).to_json()
    assert ReplyRecord.from_json({**STORED, "chat_mode": "chat"}).chat_mode is None  # a wrong type: the default
