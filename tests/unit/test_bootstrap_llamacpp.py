"""bootstrap's llama.cpp steps: a llama-cpp-python without its multimodal library is built again with it (the same
version); llama.cpp's GGUF converter comes from that version's sdist, once."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from webui import bootstrap


@pytest.mark.parametrize("libs, rebuilt", [("libggml.so libllama.so", True),
                                           ("libggml.so libllama.so libmtmd.so", False)])
def test_a_build_without_mtmd_is_built_again_with_it(monkeypatch, libs, rebuilt):
    calls = []
    monkeypatch.setattr(bootstrap, "_venv_answer", lambda code: f"0.3.36 {libs}")
    monkeypatch.setattr(bootstrap, "_pip", lambda *args: calls.append(args))
    bootstrap.ensure_llamacpp_images()
    assert calls == ([("--no-deps", "--force-reinstall", "--no-cache-dir", "llama-cpp-python==0.3.36")]
                     if rebuilt else [])


def test_the_bootstrap_builds_mtmd():
    """No flag turns llama-cpp-python's multimodal library off (it did before the loader read images)."""
    assert "LLAVA_BUILD=OFF" not in bootstrap.LLAMACPP_CMAKE_ARGS


@pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None, reason="the llamacpp extra is not installed")
def test_the_installed_llama_cpp_has_mtmd_and_the_converter_is_there():
    """What the test command prepared: the multimodal library, and the converter of the same version."""
    spec = importlib.util.find_spec("llama_cpp")
    assert spec is not None and spec.origin is not None
    assert any("mtmd" in p.name for p in (Path(spec.origin).parent / "lib").iterdir())
    script = bootstrap.ensure_gguf_converter()
    assert script.name == "convert_hf_to_gguf.py" and (script.parent / "gguf-py" / "gguf").is_dir()
    assert script.parent.name == f"gguf-converter-{bootstrap.llamacpp_version()}"
