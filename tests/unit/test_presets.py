"""Preset files: built-ins load, user presets save atomically, bad files give clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from webui.engine.params import SamplingParams
from webui.names import InvalidName
from webui.presets import BUILTIN_PRESETS_DIR, PresetError, PresetStore, load_preset_file


@pytest.fixture
def store(tmp_path: Path) -> PresetStore:
    return PresetStore(tmp_path / "presets")


def test_builtin_presets_load_and_differ_from_neutral(store):
    names = store.names()
    assert {"Deterministic", "Balanced", "Creative", "Precise"} <= set(names)
    for name in names:
        preset = store.get(name)
        assert preset.builtin and preset.params.changed(), name
    assert store.get("Deterministic").params.greedy


def test_unknown_key_names_key_and_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("temperature: 0.5\ntop_q: 0.9\n")
    with pytest.raises(PresetError, match=r"unknown sampling parameter 'top_q' in .*bad.yaml"):
        load_preset_file(bad)


def test_bad_value_names_file_and_range(tmp_path):
    bad = tmp_path / "hot.yaml"
    bad.write_text("temperature: 9\n")
    with pytest.raises(PresetError, match=r"hot.yaml: temperature must be in \[0, 5\], got 9.0"):
        load_preset_file(bad)


@pytest.mark.parametrize("text,message", [("- a\n- b\n", "must be a mapping"), ("a: [\n", "not valid YAML")])
def test_malformed_files(tmp_path, text, message):
    bad = tmp_path / "x.yaml"
    bad.write_text(text)
    with pytest.raises(PresetError, match=message):
        load_preset_file(bad)


def test_text_generation_webui_preset_loads_its_keys_and_old_names(tmp_path):
    tgwui = tmp_path / "tgwui.yaml"
    tgwui.write_text("temperature: 0.7\ntop_p: 0.9\ntop_k: 20\nrepetition_penalty: 1.15\n"
                     "mirostat_mode: 2\ntfs: 1\ntop_a: 0\nban_eos_token: false\nnum_beams: 1\n")
    params, ignored = load_preset_file(tgwui)
    assert (params.temperature, params.top_p, params.top_k, params.repetition_penalty) == (0.7, 0.9, 20, 1.15)
    assert ignored == {}  # num_beams 1 is no beam search; mirostat, tfs and top_a are ours too
    assert (params.mirostat_mode, params.tfs, params.top_a) == (2, 1.0, 0.0)


def test_save_get_delete_roundtrip(store):
    path = store.save("mine", SamplingParams(temperature=0.4, stop=("\n\n",)))
    assert path.read_text().startswith("temperature: 0.4")
    got = store.get("mine")
    assert not got.builtin and got.params.temperature == 0.4 and got.params.stop == ("\n\n",)
    assert "mine" in store.names()
    store.delete("mine")
    assert "mine" not in store.names()


def test_user_preset_shadows_builtin_and_builtin_cannot_be_deleted(store):
    store.save("Balanced", SamplingParams(temperature=0.1))
    assert store.get("Balanced").params.temperature == 0.1
    store.delete("Balanced")
    assert store.get("Balanced").builtin
    with pytest.raises(PresetError, match="built-in preset"):
        store.delete("Balanced")


@pytest.mark.parametrize("name", ["../x", "a/b", "..", ".hidden", "", "c:\\x"])
def test_names_with_path_characters_are_refused(store, name):
    with pytest.raises(InvalidName):
        store.save(name, SamplingParams())
    assert not any(store.user_dir.parent.rglob("x.yaml"))


def test_failed_save_keeps_the_old_file(store, monkeypatch):
    store.save("keep", SamplingParams(temperature=0.2))
    import webui.fsutil as fsutil

    def full_disk(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(fsutil.os, "fsync", full_disk)
    with pytest.raises(OSError, match="No space"):
        store.save("keep", SamplingParams(temperature=0.9))
    assert store.get("keep").params.temperature == 0.2
    assert [p.name for p in store.user_dir.iterdir()] == ["keep.yaml"]


def test_unknown_preset(store):
    with pytest.raises(PresetError, match="unknown preset 'nope'"):
        store.get("nope")


def test_builtin_dir_is_the_repository_presets_folder():
    assert BUILTIN_PRESETS_DIR.name == "presets" and (BUILTIN_PRESETS_DIR / "Balanced.yaml").is_file()
