"""#46 (12): a count reads singular for one ("1 token"), everywhere it is shown."""

from __future__ import annotations

from webui.chat.reply import ReplyRecord, RunStats, reply_summary
from webui.counts import counted


def test_a_count_of_one_is_singular():
    assert [counted(n) for n in (0, 1, 2)] == ["0 tokens", "1 token", "2 tokens"]
    assert counted(1, "tool call") == "1 tool call" and counted(2048, grouped=True) == "2,048 tokens"


def test_a_one_token_reply_says_1_token():
    run = RunStats({}, "length", 3, completion_tokens=1, prompt_tokens=5, guidance_tokens=1)
    line = reply_summary(ReplyRecord(run=run, token_ids=(7,)))
    assert line.startswith("1 token · prompt 5 · CFG ran 1 more token ·"), line
    assert reply_summary(ReplyRecord(token_ids=(7,))).startswith("1 token · ")  # branched at its last token
