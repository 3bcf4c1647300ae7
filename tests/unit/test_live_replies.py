"""The Chat tab's own stream of a reply's text (webui.ui.live): what a reader gets, and when its page counts as
gone."""

from __future__ import annotations

import asyncio
import json

from webui.ui import live as live_module
from webui.ui.live import LiveReplies


def read(replies: LiveReplies, token: str, steps, leave_after: int | None = None) -> list[str]:
    """The texts a reader gets while ``steps`` (functions) run one per event it receives."""

    async def go() -> list[str]:
        got: list[str] = []
        reads = 0

        async def disconnected() -> bool:
            return leave_after is not None and reads >= leave_after

        async for event in replies.follow(token, disconnected):
            reads += 1
            if event.startswith("data: "):
                got.append(json.loads(event[6:])["text"])
            else:
                got.append(event.split("\n")[0])
            if steps:
                steps.pop(0)()
        return got

    return asyncio.run(go())


def test_a_reader_gets_each_new_text_and_the_end(monkeypatch):
    monkeypatch.setattr(live_module, "VIEW_INTERVAL", 0.001)
    replies = LiveReplies()
    token = replies.open()
    replies.put(token, "Hel")
    steps = [lambda: replies.put(token, "Hello"), lambda: (replies.put(token, "Hello, world"), replies.close(token))]
    assert read(replies, token, steps) == ["Hel", "Hello", "Hello, world", "event: done"]
    assert read(replies, token, []) == []  # done: nothing to follow (the log has the reply)


def test_the_page_counts_as_gone_only_when_its_reader_left_and_none_came_back(monkeypatch):
    monkeypatch.setattr(live_module, "VIEW_INTERVAL", 0.001)
    clock = [100.0]
    monkeypatch.setattr(live_module.time, "monotonic", lambda: clock[0])
    replies = LiveReplies()
    token = replies.open()
    assert not replies.gone(token)  # no reader yet: the page has not followed it (yet)
    read(replies, token, [], leave_after=1)  # a reader came and left mid-reply (a reload)
    assert not replies.gone(token)  # within GONE_AFTER it may come back
    clock[0] += live_module.GONE_AFTER + 0.1
    assert replies.gone(token)
    replies.close(token)
    assert not replies.gone(token)  # ended: nothing to stop
    assert not replies.gone("no-such-token")


def test_tokens_are_unguessable_and_apart():
    replies = LiveReplies()
    a, b = replies.open(), replies.open()
    assert a != b and len(a) >= 24
    replies.put(a, "for a")
    replies.close(a)
    replies.put(b, "for b")
    replies.close(b)


def test_following_views_closes_them_when_the_page_goes_and_always_ends_the_stream(monkeypatch):
    clock = [100.0]
    monkeypatch.setattr(live_module.time, "monotonic", lambda: clock[0])
    replies, closed = LiveReplies(), []

    def views():
        try:
            yield from range(10)
        finally:
            closed.append(True)  # (GeneratorExit: a reply is stored as Stop stores it)

    seen = []
    for token, view in replies.following(views()):
        seen.append(view)
        if view == 2:  # the page's reader came and left
            read(replies, token, [], leave_after=1)
            clock[0] += live_module.GONE_AFTER + 0.1
    assert seen == [0, 1, 2] and closed == [True]
    assert not replies.gone(token) and read(replies, token, []) == []  # its stream is closed
