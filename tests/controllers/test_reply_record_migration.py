"""Chats stored before a reply's stats were a ReplyRecord (#31): a row holding the old stats object, written into
the real SQLite file as the code before stored it, opens, shows the same stats line, reproduces and goes on."""

from __future__ import annotations

import json

import pytest

from tests.conftest import last
from webui.controllers.chat import ChatSession
from webui.controllers.insight import InsightController
from webui.engine import SamplingParams
from webui.reproduce import parse_record

SAMPLED = SamplingParams(temperature=1.0, top_k=40, max_new_tokens=4, ban_eos=True, seed=11)
KEY = ("tab-1", "chat")
SUMMARY = ("4 tokens · prompt 19 · first token 0.01s · 269.9 tok/s · finish: length · seed 11 · "
           "by tiny (transformers)")


@pytest.fixture
def session(services, active):
    return ChatSession(services, active)


def old_stats(token_ids: list[int], rows: list[dict]) -> dict:
    """The stats object of a reply as the code before ReplyRecord stored it (reply_stats + final_stats)."""
    return {"model": "tiny", "loader": "transformers",
            "load_options": {"attn_implementation": "auto", "load_in": "full", "device_map": "single",
                             "max_memory": "", "trust_remote_code": False},
            "chat_template": None, "loras": [], "completion_tokens": 4, "prompt_tokens": 19, "cached_tokens": 0,
            "guidance_tokens": 0, "time_to_first_token": 0.007461762994353194,
            "tokens_per_second": 269.8925482787804, "finish_reason": "length", "stop_string": None, "seed": 11,
            "params": SAMPLED.to_dict(), "summary": SUMMARY, "token_ids": token_ids, "tokens": rows}


def store_old(session: ChatSession, message_id: int, stats: dict) -> None:
    """Write ``stats`` into the message's row with plain SQL, as the old ChatStore did (json.dumps)."""
    with session.services.db.transaction() as conn:
        conn.execute("UPDATE messages SET stats = ? WHERE id = ?",
                     (json.dumps(stats, allow_nan=False, ensure_ascii=False), message_id))


def test_a_chat_stored_with_the_old_stats_object_opens_shows_its_line_and_reproduces(session, services):
    done = last(session.send(None, "Hello there", "Be brief.", SAMPLED, KEY))
    reply = session.chats.messages(done.chat_id)[-1]
    stats = old_stats(reply.stats["token_ids"], reply.stats["tokens"])
    store_old(session, reply.id, stats)
    assert session.chats.messages(done.chat_id)[-1].stats == stats  # the old object, as stored

    assert session.library.view(done.chat_id).stats == SUMMARY
    assert session.library.describe(done.chat_id, 1) == ("Message 2: version 1 of 1 (edit or regenerate it to add "
                                                 f"another) · {SUMMARY}")
    assert session.library.chat_params(done.chat_id).to_dict() == SAMPLED.to_dict()
    assert [r["id"] for r in session.last_tokens(done.chat_id)[0]] == stats["token_ids"]
    export = json.loads(session.chats.export_json(done.chat_id))
    assert export["messages"][1]["stats"] == stats  # exports carry the stored object unchanged

    record = session.inspect(done.chat_id).record
    assert record is not None and (record.model, record.loader, record.params.seed) == ("tiny", "transformers", 11)
    assert record.messages == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello there"}]
    assert record.load_options == stats["load_options"] and record.continue_from is None
    again = services.engine.generate(parse_record(record.to_json()).request(services.loaded.tokenizer))
    assert list(again.token_ids) == stats["token_ids"]  # the old record re-creates the reply
    assert InsightController(services).rerun(record.to_json())[0] == reply.content

    more = last(session.continue_reply(done.chat_id, SAMPLED.replace(seed=12), KEY))
    continued = session.chats.messages(done.chat_id)[-1]
    assert continued.stats["token_ids"][:4] == stats["token_ids"] and "8 tokens, 4 new" in more.stats


def test_an_old_hand_edited_reply_opens_with_its_line_and_no_record(session):
    done = last(session.send(None, "Hello there", "", SAMPLED, KEY))
    reply = session.chats.messages(done.chat_id)[-1]
    store_old(session, reply.id, {"edited": True, "summary": "edited by hand"})
    assert session.library.view(done.chat_id).stats == "edited by hand"
    assert session.library.describe(done.chat_id, 1).endswith(" · edited by hand")
    assert session.inspect(done.chat_id).record is None and session.last_tokens(done.chat_id)[0] == []
