"""With a UI login each user's chats, notebooks, batch runs, perplexity results, cached responses, presets and
settings are their own: another user can never read, list, search, export, change or delete them. Every store
operation is tried as the other user on a real SQLite file."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest

from webui.batch.run.cache import ResponseCache
from webui.batch.run.results import Generated
from webui.store.batch_runs import BatchStore, RunNotFound, StoredRun
from webui.engine import SamplingParams
from webui.owner import as_owner
from webui.presets import PresetError, PresetStore
from webui.settings import SettingsStore
from webui.store.chats import ChatStore
from webui.store.db import Database
from webui.store.errors import ChatNotFound, MessageNotFound, NotebookNotFound
from webui.store.notebooks import NotebookStore
from webui.store.perplexity import PerplexityStore
from webui.store.schema import MIGRATIONS


@pytest.fixture
def db(tmp_path: Path):
    with Database(tmp_path / "workbench.sqlite3") as database:
        yield database


def test_chats_are_their_owners(db):
    chats = ChatStore(db)
    with as_owner("alice"):
        chat = chats.create("Alice's plans", "be brief")
        first = chats.append(chat.id, "user", "the secret is 42")
        reply = chats.append(chat.id, "assistant", "noted")
    with as_owner("bob"):
        assert chats.list() == [] and chats.list("secret") == [] and chats.list("Alice") == []
        for call in (lambda: chats.get(chat.id), lambda: chats.messages(chat.id), lambda: chats.export_json(chat.id),
                     lambda: chats.export_tgwui(chat.id), lambda: chats.rename(chat.id, "mine"),
                     lambda: chats.set_system_prompt(chat.id, "x"), lambda: chats.append(chat.id, "user", "hi"),
                     lambda: chats.rewind(chat.id, 0), lambda: chats.truncate(chat.id, 0),
                     lambda: chats.version_numbers(chat.id), lambda: chats.delete(chat.id)):
            with pytest.raises(ChatNotFound):
                call()
        for call in (lambda: chats.update(reply.id, "changed"), lambda: chats.versions(first.id),
                     lambda: chats.show(first.id), lambda: chats.branch(reply.id, "stolen")):
            with pytest.raises(MessageNotFound):
                call()
        mine = chats.create("Bob's")
        assert [c.title for c in chats.list()] == ["Bob's"]
    with as_owner("alice"):
        assert [c.title for c in chats.list("secret")] == ["Alice's plans"]
        assert [m.content for m in chats.messages(chat.id)] == ["the secret is 42", "noted"]
        assert chats.get(chat.id).system_prompt == "be brief"
        with pytest.raises(ChatNotFound):
            chats.get(mine.id)
    assert chats.list() == []  # without a login: the shared workspace, which holds neither


def test_notebooks_are_their_owners_and_names_are_per_owner(db):
    notebooks = NotebookStore(db)
    with as_owner("alice"):
        notebooks.save("draft", "alice's text")
    with as_owner("bob"):
        assert notebooks.list() == []
        for call in (lambda: notebooks.get("draft"), lambda: notebooks.delete("draft"),
                     lambda: notebooks.rename("draft", "mine")):
            with pytest.raises(NotebookNotFound):
                call()
        notebooks.save("draft", "bob's text")  # the same name: bob's own notebook
        assert notebooks.get("draft") == "bob's text"
    with as_owner("alice"):
        assert notebooks.list() == ["draft"] and notebooks.get("draft") == "alice's text"


def test_batch_runs_are_their_owners(db):
    runs = BatchStore(db)
    with as_owner("alice"):
        run = runs.create("alice's run", StoredRun(), "m", 1)
        runs.add_result(run.id, 0, {"prompt_index": 0, "setting": "s", "sample": 0, "output": "secret"})
    with as_owner("bob"):
        assert runs.list() == []
        for call in (lambda: runs.get(run.id), lambda: runs.results(run.id), lambda: runs.rename(run.id, "x"),
                     lambda: runs.delete(run.id), lambda: runs.add_result(run.id, 1, {"output": "forged"}),
                     lambda: runs.set_review(run.id, 0, "s", 0, {"verdict": "bad", "note": ""}),
                     lambda: runs.finish(run.id, "done")):
            with pytest.raises(RunNotFound):
                call()
    with as_owner("alice"):
        assert [r["output"] for r in runs.results(run.id)] == ["secret"] and runs.get(run.id).status == "running"


def test_batch_runs_are_numbered_per_owner_and_the_number_tells_nothing_of_others(db, tmp_path):
    runs = BatchStore(db)
    with as_owner("alice"):
        first, second = (runs.create(f"a{n}", StoredRun(), "m", 1) for n in (1, 2))
    with as_owner("bob"):
        bobs = runs.create("b1", StoredRun(), "m", 1)
        assert bobs.number == 1 and runs.list()[0].number == 1
        with pytest.raises(RunNotFound) as refused:
            runs.get(first.id)
        assert str(first.id) not in str(refused.value)  # the shared key is never said
    with as_owner("alice"):
        runs.delete(second.id)
        assert [r.number for r in runs.list()] == [1] and runs.create("a3", StoredRun(), "m", 1).number == 2
    path = tmp_path / "old.sqlite3"  # runs made before the numbers: numbered per owner in the order they were made
    with Database(path, MIGRATIONS[:9]) as old:
        with old.transaction() as conn:
            for owner in ("alice", "bob", "alice", ""):
                conn.execute("INSERT INTO batch_runs (name, spec, model, status, total, created, updated, owner) "
                             "VALUES ('r', '{}', 'm', 'done', 1, 0, 0, ?)", (owner,))
    with Database(path) as migrated:
        stored = migrated.query("SELECT owner, number FROM batch_runs ORDER BY id")
        assert [(r["owner"], r["number"]) for r in stored] == [("alice", 1), ("bob", 1), ("alice", 2), ("", 1)]


def test_perplexity_results_and_cached_responses_are_their_owners(db):
    ppl, cache = PerplexityStore(db), ResponseCache(db)
    response = Generated("o", "stop", 1, 1, 0, 0.1, 1.0)
    with as_owner("alice"):
        ppl.add("m", "transformers", [], "wiki", 10, 2.0, 7.4, 512)
        cache.put("k" * 64, response)
    with as_owner("bob"):
        assert ppl.list() == [] and cache.get("k" * 64) is None
        cache.put("k" * 64, replace(response, output="bob's"))
        assert cache.clear() == 1
    with as_owner("alice"):
        assert len(ppl.list()) == 1 and cache.get("k" * 64) == response
    assert cache.get("k" * 64) is None and cache.clear() == 0


def test_presets_and_settings_are_their_owners_but_the_startup_model_is_shared(tmp_path):
    presets = PresetStore(tmp_path / "presets")
    settings = SettingsStore(tmp_path / "settings.json")
    with as_owner("alice"):
        presets.save("Mine", SamplingParams(temperature=0.3))
        settings.update(system_prompt="alice's prompt", last_model="tiny")
        assert "Mine" in presets.names()
    with as_owner("bob"):
        assert "Mine" not in presets.names()
        with pytest.raises(PresetError):
            presets.get("Mine")
        with pytest.raises(PresetError):
            presets.delete("Mine")
        assert settings.get().system_prompt == "" and settings.get().last_model == "tiny"
    assert "Mine" not in presets.names() and settings.get().system_prompt == ""
    assert settings.get().last_model == "tiny"  # what loads at start is one for everybody
    assert SettingsStore(tmp_path / "settings.json").get().last_model == "tiny"
    with as_owner("alice"):
        assert presets.get("Mine").params.temperature == 0.3
        assert SettingsStore(tmp_path / "settings.json").get().system_prompt == "alice's prompt"  # on disk
    with as_owner("../evil"):  # a user name is never a path
        presets.save("P", SamplingParams())
    assert all(p.resolve().is_relative_to(tmp_path.resolve()) for p in tmp_path.rglob("*"))
    assert (tmp_path / "users").is_dir() and not (tmp_path.parent / "evil").exists()


def test_data_from_before_logins_stays_in_the_shared_workspace(tmp_path):
    path = tmp_path / "old.sqlite3"
    with Database(path, MIGRATIONS[:5]) as old:  # a database as the previous release left it
        with old.transaction() as conn:
            conn.execute("INSERT INTO notebooks (name, text, created, updated) VALUES ('n', 'kept', 1, 1)")
            conn.execute("INSERT INTO chats (title, created, updated) VALUES ('kept chat', 1, 1)")
    with Database(path) as db:
        assert NotebookStore(db).get("n") == "kept" and [c.title for c in ChatStore(db).list()] == ["kept chat"]
        with as_owner("alice"):
            assert NotebookStore(db).list() == [] and ChatStore(db).list() == []
    raw = sqlite3.connect(path)
    assert raw.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)
    assert json.dumps(raw.execute("SELECT owner FROM chats").fetchall()) == '[[""]]'
