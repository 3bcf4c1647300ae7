"""The loader registry and the transformers loader's errors."""

from __future__ import annotations

import json
from importlib.metadata import entry_points
from pathlib import Path

import importlib.util

import pytest

from loaders.base import NATIVE, BaseLoader, Capabilities, LoaderUnavailable, LoadOptions, ModelLoadError
from loaders.registry import ENTRY_POINT_GROUP, LoaderRegistry, UnknownLoader, default_registry


class FakeLoader(BaseLoader):
    def __init__(self, name="fake", requires=("json",)):
        self.name, self.requires = name, requires
        self.description = "a test loader"
        self.capabilities = Capabilities(devices=("cpu",))
        self.install_hint = "pip install fake-backend"

    def match(self, path: Path) -> int:
        return NATIVE if path.suffix == ".fake" else 0

    def prepare(self, path: Path, workdir: Path, progress=None) -> Path:
        return path

    def load(self, path, options, progress=None):
        from loaders.base import require_backend

        require_backend(self)
        return object()


def test_builtin_transformers_loader_is_registered_through_the_entry_point():
    assert "transformers" in {ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)}
    registry = default_registry()
    assert registry.names()[0] == "transformers"
    status = {s.name: s for s in registry.status()}
    assert status["transformers"].available and "gguf" in status["transformers"].capabilities.formats


def test_register_get_list_and_duplicates():
    registry = LoaderRegistry()
    registry.register(FakeLoader())
    assert registry.get("fake").name == "fake" and registry.names() == ["fake"]
    with pytest.raises(Exception, match="already registered"):
        registry.register(FakeLoader())
    with pytest.raises(UnknownLoader, match="unknown loader 'nope'; available loaders: fake"):
        registry.get("nope")
    assert registry.for_path(Path("m.fake")).name == "fake"
    with pytest.raises(UnknownLoader, match="no registered loader can read"):
        registry.for_path(Path("m.bin"))
    registry.unregister("fake")
    assert registry.names() == []


def test_missing_backend_is_reported_with_the_install_command():
    registry = LoaderRegistry()
    registry.register(FakeLoader("ghost", requires=("definitely_not_installed_pkg",)))
    status = registry.status()[0]
    assert not status.available and "definitely_not_installed_pkg" in status.reason
    assert status.install_hint == "pip install fake-backend"
    with pytest.raises(LoaderUnavailable, match="install it with: pip install fake-backend"):
        registry.get("ghost").load(Path("x.fake"), LoadOptions())


def test_load_options_are_validated():
    with pytest.raises(ValueError, match="dtype must be one of"):
        LoadOptions(dtype="float64")
    with pytest.raises(ValueError, match="device must be"):
        LoadOptions(device="tpu")
    with pytest.raises(ValueError, match="threads must be"):
        LoadOptions(threads=0)


@pytest.fixture
def transformers_loader():
    return default_registry().get("transformers")


def test_missing_model_path(transformers_loader, tmp_path):
    with pytest.raises(ModelLoadError, match="does not exist"):
        transformers_loader.load(tmp_path / "nowhere", LoadOptions())


def test_folder_that_is_not_a_model(transformers_loader, tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(ModelLoadError, match="not a model folder: it has no config.json"):
        transformers_loader.load(tmp_path, LoadOptions())


def test_config_without_weights(transformers_loader, tmp_path, tiny_model_dir):
    (tmp_path / "config.json").write_text((tiny_model_dir / "config.json").read_text())
    with pytest.raises(ModelLoadError, match="could not load"):
        transformers_loader.load(tmp_path, LoadOptions())


def test_garbage_config(transformers_loader, tmp_path):
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ModelLoadError, match="could not load"):
        transformers_loader.load(tmp_path, LoadOptions())


def test_cuda_requested_without_gpu(transformers_loader, tiny_model_dir):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(ModelLoadError, match="no CUDA GPU here; choose cpu or auto"):
        transformers_loader.load(tiny_model_dir, LoadOptions(device="cuda"))


def test_loaded_model_reports_its_facts(tiny_model, tiny_model_dir):
    assert tiny_model.loader == "transformers" and tiny_model.device == "cpu" and tiny_model.dtype == "float32"
    assert tiny_model.context_length == json.loads((tiny_model_dir / "config.json").read_text())[
        "max_position_embeddings"]
    assert tiny_model.memory_bytes() > 0
    assert 2 in tiny_model.tokenizer.eos_token_ids
    assert "<|im_start|>assistant" in tiny_model.tokenizer.apply_chat_template([{"role": "user", "content": "x"}])


def exl2_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "model-exl2"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "llama", "quantization_config": {
        "quant_method": "exl2", "bits": 4.0}}))
    return folder


def test_exllamav2_without_a_gpu_is_listed_unavailable_and_says_why(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU")
    registry = default_registry()
    status = {s.name: s for s in registry.status()}["exllamav2"]
    assert not status.available and "needs an NVIDIA GPU with CUDA" in status.reason
    folder = exl2_folder(tmp_path)
    chosen = registry.for_path(folder)
    assert chosen.name == "exllamav2"  # chosen from what the folder holds, not transformers
    with pytest.raises(LoaderUnavailable, match="needs an NVIDIA GPU with CUDA"):
        chosen.load(folder, LoadOptions())


def test_the_loader_is_chosen_from_what_the_model_holds(tmp_path, tiny_model_dir, monkeypatch):
    import loaders.registry

    registry = default_registry()
    assert registry.for_path(tiny_model_dir).name == "transformers"
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    # llama.cpp runs a .gguf natively; without it, transformers dequantizes it
    native = "llamacpp" if importlib.util.find_spec("llama_cpp") else "transformers"
    assert registry.for_path(gguf).name == native
    real_missing = loaders.registry.missing_module
    monkeypatch.setattr(loaders.registry, "missing_module",
                        lambda mods: "llama_cpp" if "llama_cpp" in mods else real_missing(mods))
    assert registry.for_path(gguf).name == "transformers"
    gptq = tmp_path / "q"
    gptq.mkdir()
    (gptq / "config.json").write_text("{}")
    (gptq / "quantize_config.json").write_text('{"bits": 4}')
    assert registry.for_path(gptq).name == "gptq"  # never transformers, which cannot read it alone


def test_a_folder_written_atomically_is_replaced_only_on_success(tmp_path):
    from loaders.base import atomic_folder

    out = tmp_path / "model"
    out.mkdir()
    (out / "weights").write_text("old")
    with pytest.raises(OSError, match="disk full"):
        with atomic_folder(out) as scratch:
            (scratch / "weights").write_text("half")
            raise OSError("disk full")
    assert (out / "weights").read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["model"]
    with atomic_folder(out) as scratch:
        (scratch / "weights").write_text("new")
    assert (out / "weights").read_text() == "new" and [p.name for p in tmp_path.iterdir()] == ["model"]


def test_the_device_picker_offers_only_what_this_machine_has():
    import torch

    from loaders.base import available_devices

    devices = available_devices()
    assert devices[:2] == ("auto", "cpu")
    assert ("cuda" in devices) == torch.cuda.is_available()
    assert ("mps" in devices) == torch.backends.mps.is_available()


def test_a_registered_loader_adds_a_format_and_prepares_it(tmp_path, tiny_model_dir):
    """A third-party loader says which paths are its own and what to make of them first; ModelManager
    asks the registry for the loader and the loader for the path to load, naming no loader itself."""
    from webui.config import AppConfig
    from webui.engine import Engine
    from webui.models import ModelManager

    class Zipped:
        name, description, install_hint, requires = "zipped", "folders in a .zipmodel file", "", ()
        capabilities = Capabilities(devices=("cpu",), formats=("zipmodel",))
        prepared: list = []

        def match(self, path: Path) -> int:
            return NATIVE if path.suffix == ".zipmodel" else 0

        def prepare(self, path: Path, workdir: Path, progress=None) -> Path:
            self.prepared.append((path.name, workdir.name))
            return tiny_model_dir  # "unpacked" once into workdir; here: an existing folder

        def load(self, path, options, progress=None):
            return default_registry().get("transformers").load(path, LoadOptions(device="cpu"))

    registry = default_registry()
    registry.register(Zipped())
    zipped = registry.get("zipped")  # not a BaseLoader: the registry gives it the contract's defaults
    assert zipped.takes_dtype and zipped.smaller_load == "" and zipped.unavailable_reason() is None
    assert zipped.estimate_bytes(tiny_model_dir, LoadOptions()) > 0 and zipped.options == ()
    config = AppConfig(user_data_dir=tmp_path / "data", device="cpu")
    config.make_dirs()
    (config.models_dir / "packed.zipmodel").write_bytes(b"zip")
    assert registry.for_path(config.models_dir / "packed.zipmodel").name == "zipped"
    engine = Engine()
    manager = ModelManager(config, engine, registry)
    try:
        model = manager.load(manager.catalog.entry_for_path(config.models_dir / "packed.zipmodel"))
        assert Zipped.prepared == [("packed.zipmodel", "packed")] and model.path == tiny_model_dir
        assert model.name == "packed" and [e.name for e in manager.catalog.available()][-1] == "packed.zipmodel"
    finally:
        manager.unload()
        engine.close()


@pytest.mark.real_model
def test_a_gguf_is_sized_from_its_header_before_it_is_converted(default_model_dir, tmp_path):
    from loaders.gguf_header import read_header
    from loaders.hf import loaded_bytes
    from webui.catalog import default_model_gguf

    gguf = default_model_gguf()
    header = read_header(gguf)
    assert header.meta["general.architecture"] == "llama" and header.meta["llama.context_length"] == 8192
    transformers = default_registry().get("transformers")
    # what transformers will hold once it has dequantized the file: exactly its converted folder, in each dtype
    for dtype in ("float32", "bfloat16"):
        assert transformers.estimate_bytes(gguf, LoadOptions("cpu", dtype)) == loaded_bytes(default_model_dir, dtype)
    (tmp_path / "fake.gguf").write_bytes(b"GGUF" + b"\0" * 10)  # a cut-off header: no figures, no exception
    assert read_header(tmp_path / "fake.gguf") is None and read_header(tmp_path / "missing.gguf") is None


def test_a_loaded_model_records_its_checked_load_options_and_its_capabilities_say_what_it_can_do(tiny_model):
    """load_options is part of LoadedModel (no caller probes for it): the loader sets the options as checked."""
    from loaders.base import is_lora_model, is_stepped, is_text_backend
    from loaders.options import check_options
    from loaders.registry import default_registry

    assert tiny_model.load_options == check_options(default_registry().get("transformers"), {})
    caps = tiny_model.capabilities
    assert caps.stepped and caps.tokenizes and not caps.renders_chats and not caps.text_only
    assert is_stepped(tiny_model) and is_lora_model(tiny_model) and not is_text_backend(tiny_model)
    remote = default_registry().get("remote").capabilities
    assert not remote.stepped and not remote.tokenizes and remote.renders_chats
