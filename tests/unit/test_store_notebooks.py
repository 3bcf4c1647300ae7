"""Tests for webui.store.notebooks.NotebookStore."""

from __future__ import annotations

from pathlib import Path

import pytest

from webui.names import InvalidName
from webui.store import Database, NotebookExists, NotebookNotFound, NotebookStore, StoreError


@pytest.fixture
def notebooks(tmp_path: Path):
    db = Database(tmp_path / "workbench.sqlite3")
    yield NotebookStore(db)
    db.close()


def test_save_get_upsert(notebooks: NotebookStore) -> None:
    assert notebooks.save(" story ", "Once upon") == "story"
    assert notebooks.get("story") == "Once upon"
    notebooks.save("story", "Once upon a time")
    assert notebooks.get("story") == "Once upon a time"
    assert notebooks.list() == ["story"]
    notebooks.save("empty", "")
    assert notebooks.get("empty") == ""


def test_list_most_recently_saved_first(notebooks: NotebookStore) -> None:
    for name in ("a", "b", "c"):
        notebooks.save(name, name)
    assert notebooks.list() == ["c", "b", "a"]
    notebooks.save("a", "again")
    assert notebooks.list() == ["a", "c", "b"]


def test_missing_notebook(notebooks: NotebookStore) -> None:
    with pytest.raises(NotebookNotFound, match="notebook 'nope' does not exist"):
        notebooks.get("nope")
    with pytest.raises(NotebookNotFound):
        notebooks.delete("nope")
    assert issubclass(NotebookNotFound, StoreError)


def test_delete(notebooks: NotebookStore) -> None:
    notebooks.save("a", "x")
    notebooks.save("b", "y")
    notebooks.delete("a")
    assert notebooks.list() == ["b"]
    with pytest.raises(NotebookNotFound):
        notebooks.get("a")


def test_rename(notebooks: NotebookStore) -> None:
    notebooks.save("draft", "text")
    notebooks.save("other", "other text")
    assert notebooks.rename("draft", "final") == "final"
    assert notebooks.get("final") == "text"
    assert sorted(notebooks.list()) == ["final", "other"]
    with pytest.raises(NotebookExists, match="'other' already exists"):
        notebooks.rename("final", "other")
    assert notebooks.get("other") == "other text" and notebooks.get("final") == "text"
    assert notebooks.rename("final", "final") == "final"
    with pytest.raises(NotebookNotFound, match="'draft'"):
        notebooks.rename("draft", "x")


@pytest.mark.parametrize("bad", ["", "   ", "../etc", "a/b", "a\\b", ".hidden", "x" * 121])
def test_names_are_checked(notebooks: NotebookStore, bad: str) -> None:
    with pytest.raises(InvalidName):
        notebooks.save(bad, "text")
    with pytest.raises(InvalidName):
        notebooks.rename("whatever", bad)
    assert notebooks.list() == []


def test_text_must_be_a_string(notebooks: NotebookStore) -> None:
    with pytest.raises(StoreError, match="text must be a string"):
        notebooks.save("a", None)
