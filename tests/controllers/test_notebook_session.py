"""NotebookSession without a browser: generate, stop, undo, branch, save/open/delete."""

from __future__ import annotations

import pytest

from tests.conftest import last
from webui.controllers import UserError
from webui.controllers.notebook import MAX_UNDO, NotebookSession
from webui.engine import SamplingParams

GREEDY = SamplingParams(temperature=0, max_new_tokens=4, ban_eos=True)
KEY = ("tab-1", "notebook")


@pytest.fixture
def session(services, active):
    return NotebookSession(services, active)



def test_generate_continues_the_text_and_undo_brings_it_back(session):
    done = last(session.generate(None, "Once upon a time", [], GREEDY, KEY))
    assert done.text.startswith("Once upon a time") and len(done.text) > len("Once upon a time")
    assert "finish: length" in done.stats and done.undo == ["Once upon a time"] and done.branchable
    assert len(done.last.token_ids) == 4 and len(done.last.tokens) == 4
    text, history = session.undo(done.undo)
    assert (text, history) == ("Once upon a time", [])
    with pytest.raises(UserError, match="Nothing to undo"):
        session.undo(history)


def test_undo_keeps_only_the_last_generations(session):
    history = [f"v{i}" for i in range(MAX_UNDO)]
    done = last(session.generate(None, "Newest", history, GREEDY, KEY))
    assert len(done.undo) == MAX_UNDO and done.undo[-1] == "Newest" and done.undo[0] == "v1"


def test_a_named_notebook_is_saved_when_the_generation_ends(session):
    done = last(session.generate("story", "The dragon", [], GREEDY, KEY))
    assert session.names() == ["story"] and session.open("story") == done.text
    assert session.open("not saved yet") is None


def test_mistakes_are_user_errors(session, services):
    with pytest.raises(UserError, match="empty"):
        list(session.generate(None, "   ", [], GREEDY, KEY))
    with pytest.raises(UserError, match="generate something first"):
        list(session.branch(None, "x", [], None, 0, 5, GREEDY, KEY))
    for bad in ("", None):
        with pytest.raises(UserError, match="Type a name"):
            session.save(bad, "x")
    with pytest.raises(UserError, match="plain name"):
        session.save("../x", "x")
    with pytest.raises(UserError, match="Choose a notebook"):
        session.delete(None)
    services.models.unload()
    with pytest.raises(UserError, match="No model is loaded"):
        list(session.generate(None, "Hello", [], GREEDY, KEY))


def test_stop_ends_only_this_tabs_generation(session):
    running = session.generate(None, "A long tale", [], GREEDY.replace(max_new_tokens=200), KEY)
    next(running)
    with pytest.raises(UserError, match="still running"):
        next(session.generate(None, "Another", [], GREEDY, KEY))
    assert not session.stop(("tab-2", "notebook"))
    assert session.stop(KEY)
    assert "finish: cancelled" in last(running).stats


def test_branch_replaces_a_token_and_continues(session):
    done = last(session.generate(None, "The capital of France is", [], GREEDY, KEY))
    rows = done.last.tokens
    alternative = next(a[0] for a in rows[0]["alts"] if a[0] != rows[0]["id"])
    branched = last(session.branch(None, done.text, done.undo, done.last, 0, alternative, GREEDY, KEY))
    assert branched.last.token_ids[0] == alternative and branched.text.startswith("The capital of France is")
    assert branched.text != done.text and branched.undo[-1] == done.text


def test_save_open_and_delete(session):
    assert session.save("  notes ", "hello") == "notes"
    assert session.open("notes") == "hello"
    session.delete("notes")
    assert session.names() == []
    with pytest.raises(UserError):
        session.delete("notes")


def test_the_text_and_name_as_they_are_now_are_kept_for_the_next_page_load(session, services):
    assert session.draft() == ("", "")
    session.keep_draft("not saved yet", "Once upon a time, ")
    assert session.draft() == ("not saved yet", "Once upon a time, ") and "not saved yet" not in session.names()
    assert services.settings.get().notebook_text == "Once upon a time, "  # in settings.json, exactly as typed
    session.keep_draft(None, "")
    assert session.draft() == ("", "")
