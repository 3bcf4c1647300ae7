"""ModelManager: discovery, load / unload / switch, and failures that keep the old model."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from loaders.base import LoadOptions, ModelLoadError
from loaders.registry import UnknownLoader, default_registry
from tests.conftest import TEST_THREADS
from webui.config import AppConfig
from webui.engine import Engine, GenerationRequest, NoModelLoaded, SamplingParams
from loaders.hf import ensure_converted
from webui.catalog import DEFAULT_MODEL, default_model_gguf
from webui.models import ModelManager
from webui.names import InvalidName
from webui.owner import as_owner

ROOT = Path(__file__).resolve().parents[2]
GREEDY = SamplingParams(temperature=0, max_new_tokens=4, ban_eos=True)


def loaded(manager, owner=""):
    """The model ``owner`` uses ("": the shared choice)."""
    slot = manager.in_use(owner)
    return slot.model if slot else None


@pytest.fixture
def manager(tmp_path: Path, tiny_model_dir: Path):
    config = AppConfig(user_data_dir=tmp_path / "data", threads=TEST_THREADS, device="cpu")
    config.make_dirs()
    (config.models_dir / "tiny").symlink_to(tiny_model_dir, target_is_directory=True)
    (config.models_dir / "tiny-copy").symlink_to(tiny_model_dir, target_is_directory=True)
    broken = config.models_dir / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{}")
    (config.models_dir / "notes").mkdir()  # not a model: no config.json, not listed
    engine = Engine()
    manager = ModelManager(config, engine, default_registry())
    yield manager
    manager.unload()
    engine.close()


def test_available_lists_default_and_models_dir(manager):
    entries = {e.name: e for e in manager.catalog.available()}
    assert entries[DEFAULT_MODEL].default and entries[DEFAULT_MODEL].format == "gguf"
    assert entries["tiny"].format == "hf-folder"
    assert "notes" not in entries and "broken" in entries


@pytest.mark.parametrize("name", ["../tiny", "/etc", "tiny/../tiny", ".."])
def test_names_with_path_characters_are_refused(manager, name):
    with pytest.raises(InvalidName, match="plain name"):
        manager.catalog.resolve(name)


def test_unknown_model_says_where_to_put_it(manager):
    with pytest.raises(ModelLoadError, match=r"unknown model 'nope'; put it in .*models"):
        manager.catalog.resolve("nope")


def test_load_generate_switch_unload(manager):
    model = manager.load("tiny")
    assert loaded(manager) is model and manager.engine_for("").model is model
    assert manager.engine_for("").generate(GenerationRequest("hi", GREEDY)).usage.completion_tokens == 4
    other = manager.load("tiny-copy", keep_others=False)
    assert loaded(manager) is other and other.name == "tiny-copy" and manager.names() == ["tiny-copy"]
    assert model.model is None  # the old one was closed
    manager.unload()
    assert loaded(manager) is None
    with pytest.raises(NoModelLoaded):
        manager.engine_for("").submit(GenerationRequest("hi"))


def test_two_models_loaded_side_by_side_each_with_its_engine(manager):
    a = manager.load("tiny")
    b = manager.load("tiny-copy")
    assert manager.names() == ["tiny", "tiny-copy"] and loaded(manager) is b  # the last loaded is current
    ea, eb = manager.slot("tiny").engine, manager.slot("tiny-copy").engine
    assert ea is not eb and ea.model is a and eb.model is b
    streams = [ea.submit(GenerationRequest("hi", GREEDY)), eb.submit(GenerationRequest("hi", GREEDY))]
    one, two = [s.result() for s in streams]
    assert one.token_ids == two.token_ids and len(one.token_ids) == 4  # same weights, same greedy tokens
    assert manager.use("tiny", "").model is a and loaded(manager) is a and manager.engine_for("") is ea
    manager.unload("tiny")
    assert manager.names() == ["tiny-copy"] and loaded(manager) is b and a.model is None
    assert eb.generate(GenerationRequest("hi", GREEDY)).token_ids == one.token_ids
    with pytest.raises(ModelLoadError, match=r"the model 'tiny' is not loaded; loaded: tiny-copy"):
        manager.slot("tiny")


def test_each_logged_in_user_has_their_own_model_in_use(manager):
    a = manager.load("tiny")
    b = manager.load("tiny-copy", make_current=False)
    assert loaded(manager) is a
    assert loaded(manager, "alice") is a  # until she picks one: the shared choice
    manager.use("tiny-copy", "alice")
    assert loaded(manager, "alice") is b and manager.engine_for("alice") is manager.slot("tiny-copy").engine
    assert loaded(manager, "bob") is a and manager.loras_of(None, "bob") == ()
    assert loaded(manager) is a  # without a login (and for the API): the shared choice, unchanged
    manager.unload("tiny-copy")
    assert loaded(manager, "alice") is a  # her model went: the shared choice again
    manager.unload("tiny")
    assert loaded(manager, "alice") is None


def test_the_model_in_use_follows_who_is_calling_at_the_edge(manager):
    """Services reads who is calling (webui.owner) once and hands it to the ModelManager, which never asks."""
    from webui.services import Services

    a = manager.load("tiny")
    b = manager.load("tiny-copy", make_current=False)
    edge = Services.__new__(Services)  # only its models: the edge helpers need nothing else
    edge.models = manager
    with as_owner("alice"):
        manager.use("tiny-copy", edge.owner)
        assert edge.loaded is b and edge.engine is manager.slot("tiny-copy").engine
    assert edge.loaded is a and edge.active_loras == () and edge.in_use().model is a


def test_loading_a_loaded_model_again_replaces_it_in_place(manager):
    first = manager.load("tiny")
    engine = manager.engine_for("")
    again = manager.load("tiny")
    assert manager.names() == ["tiny"] and first.model is None and manager.engine_for("") is engine
    assert engine.model is again


def test_the_same_model_on_another_loader_gets_its_own_id(manager):
    from loaders.transformers_loader import TransformersLoader

    class Other(TransformersLoader):
        name = "other"

    manager.registry.register(Other())
    manager.load("tiny")
    second = manager.load("tiny", loader="other")
    assert manager.names() == ["tiny", "tiny@other"] and second.name == "tiny@other"
    assert manager.load("tiny", loader="other").name == "tiny@other" and len(manager.names()) == 2
    manager.unload()
    assert manager.load("tiny", loader="other").name == "tiny@other"  # loaded first, it still says its loader
    with pytest.raises(ModelLoadError, match=r"'tiny' means it on its default loader: name tiny@other for the one"):
        manager.slot("tiny")  # a bare name is the model on its default loader, never another loader's
    assert manager.ensure("tiny").model.loader == "transformers" and manager.names() == ["tiny@other", "tiny"]


def test_memory_budget_refuses_a_load_naming_what_is_loaded(tmp_path, tiny_model_dir):
    config = AppConfig(user_data_dir=tmp_path / "data", threads=TEST_THREADS, device="cpu", memory_budget_mb=10)
    config.make_dirs()
    for name in ("tiny", "tiny-copy"):
        (config.models_dir / name).symlink_to(tiny_model_dir, target_is_directory=True)
    engine = Engine()
    manager = ModelManager(config, engine, default_registry())
    try:
        tiny = manager.load("tiny")
        assert 5 * 2**20 < tiny.memory_bytes() < 10 * 2**20  # a 49152-token vocabulary x 32 in fp32, tied
        with pytest.raises(ModelLoadError, match=r"loading tiny-copy needs about [\d,]+ MiB, but the models loaded "
                                                 r"\(tiny \([\d,]+ MiB\)\) already take [\d,]+ MiB of the 10 MiB "
                                                 r"memory budget; unload one"):
            manager.load("tiny-copy")
        assert manager.names() == ["tiny"] and manager.engine_for("").generate(GenerationRequest("hi", GREEDY)).token_ids
        assert manager.load("tiny-copy", keep_others=False).name == "tiny-copy"  # instead of it: fits
    finally:
        manager.unload()
        engine.close()


def test_failed_load_keeps_the_previous_model(manager):
    manager.load("tiny")
    with pytest.raises(ModelLoadError, match="could not load"):
        manager.load("broken")
    assert loaded(manager).name == "tiny"
    assert manager.engine_for("").generate(GenerationRequest("hi", GREEDY)).finish_reason == "length"


def test_load_options_are_applied_remembered_per_model_and_a_bad_one_keeps_the_model(tmp_path, manager):
    from webui.settings import SettingsStore

    manager.settings = SettingsStore(tmp_path / "settings.json")
    cpu = LoadOptions("cpu", threads=TEST_THREADS)
    manager.load("tiny", options=LoadOptions("cpu", threads=TEST_THREADS, extra={"attn_implementation": "eager"}))
    model = loaded(manager)
    assert model.model.config._attn_implementation == "eager"  # transformers got it
    assert model.load_options["attn_implementation"] == "eager" and model.load_options["load_in"] == "full"
    saved = json.loads((tmp_path / "settings.json").read_text())["model_options"]
    assert saved == {"tiny@transformers": {"attn_implementation": "eager"}}  # only what differs from the default
    manager.load("tiny-copy", options=cpu)
    assert loaded(manager).model.config._attn_implementation != "eager"  # another model: its own (none yet)
    manager.load("tiny", options=cpu)  # nothing given: what tiny was last loaded with
    assert manager.slot("tiny").model.model.config._attn_implementation == "eager"
    for extra, message in [({"load_in": "4bit"}, "load_in=4bit needs a CUDA device, but this load runs on cpu"),
                           ({"attn_implementation": "fast"}, "takes one of auto, sdpa, eager, flash_attention_2"),
                           ({"n_ctx": 4096}, "the transformers loader has no load option 'n_ctx'")]:
        with pytest.raises(ModelLoadError, match=message):
            manager.load("tiny", options=LoadOptions("cpu", extra=extra), keep_others=False)
        assert manager.names() == ["tiny", "tiny-copy"] and loaded(manager).name == "tiny"


def test_a_settings_file_that_cannot_be_written_costs_only_the_remembering(tmp_path, manager, monkeypatch, caplog):
    import errno

    import webui.settings
    from webui.settings import SettingsStore

    manager.settings = SettingsStore(tmp_path / "settings.json")

    def full_disk(path, text):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(webui.settings, "atomic_write_text", full_disk)
    manager.load("tiny", options=LoadOptions("cpu", threads=TEST_THREADS, extra={"attn_implementation": "eager"}))
    assert loaded(manager).name == "tiny" and loaded(manager).load_options["attn_implementation"] == "eager"
    assert "could not save its load options" in caplog.text and "No space left on device" in caplog.text


def test_unknown_loader(manager):
    with pytest.raises(UnknownLoader, match="unknown loader 'nope'"):
        manager.load("tiny", loader="nope")


def test_switch_while_generating_ends_the_request_clearly(manager):
    from webui.engine import GenerationError

    manager.load("tiny")
    stream = manager.engine_for("").submit(GenerationRequest("hi", SamplingParams(max_new_tokens=200, ban_eos=True)))
    events = iter(stream)
    next(events)
    manager.load("tiny-copy", keep_others=False)
    with pytest.raises(GenerationError, match="the model was unloaded while this request was running"):
        list(events)
    assert manager.engine_for("").generate(GenerationRequest("hi", GREEDY)).finish_reason == "length"


def test_reload(manager):
    with pytest.raises(ModelLoadError, match="nothing to reload"):
        manager.reload()
    manager.load("tiny", options=LoadOptions(device="cpu", threads=TEST_THREADS))
    assert manager.reload().name == "tiny"


@pytest.mark.real_model
def test_default_model_is_converted_once(tmp_path):
    gguf = default_model_gguf()
    out = tmp_path / "converted" / DEFAULT_MODEL
    ensure_converted(gguf, out)
    assert (out / "model.safetensors").is_file() and (out / "config.json").is_file()
    assert (out / "tokenizer.json").is_file() and (out / "converted_from.json").is_file()
    stamp = (out / "model.safetensors").stat().st_mtime
    started = time.perf_counter()
    ensure_converted(gguf, out)
    assert time.perf_counter() - started < 1.0 and (out / "model.safetensors").stat().st_mtime == stamp
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".") and p.is_dir()]  # no temp folder left


@pytest.mark.real_model
def test_the_conversion_is_keyed_by_content_and_two_processes_convert_once(tmp_path):
    """Two checkouts (or venvs) sharing a user data dir each have their own copy of the .gguf, with its own path and
    mtime: the same content is converted once; two processes starting at once take turns, and one converts."""
    copies = [tmp_path / f"venv{i}" / "SmolLM2.gguf" for i in (1, 2)]
    for copy in copies:
        copy.parent.mkdir()
        shutil.copy(default_model_gguf(), copy)  # a new mtime each
    out = tmp_path / "shared" / "converted" / DEFAULT_MODEL
    code = ("import logging, sys; logging.basicConfig(level=logging.WARNING); from loaders.hf import ensure_converted;"
            " from pathlib import Path; ensure_converted(Path(sys.argv[1]), Path(sys.argv[2]))")
    runs = [subprocess.Popen([sys.executable, "-c", code, str(c), str(out)], cwd=ROOT, stderr=subprocess.PIPE,
                             text=True) for c in copies]
    logs = [r.communicate(timeout=600)[1] for r in runs]
    assert [r.returncode for r in runs] == [0, 0], logs
    assert sum("converting SmolLM2.gguf" in log for log in logs) == 1, logs
    assert json.loads((out / "converted_from.json").read_text())["size"] == copies[0].stat().st_size
    stamp = (out / "model.safetensors").stat().st_mtime_ns
    os.utime(copies[1], ns=(1, 1))  # touched, same content: still converted
    ensure_converted(copies[1], out)
    assert (out / "model.safetensors").stat().st_mtime_ns == stamp
    with copies[1].open("r+b") as f:  # other content (cut short): converted again, which fails here
        f.truncate(copies[1].stat().st_size - 4096)
    with pytest.raises(ModelLoadError):  # and leaves the folder made before whole
        ensure_converted(copies[1], out)
    assert (out / "model.safetensors").stat().st_mtime_ns == stamp
