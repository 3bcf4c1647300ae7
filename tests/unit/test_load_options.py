"""Load options declared per loader (loaders/options.py): reading and checking values, refusing what cannot apply,
and each loader's declarations being usable as they stand."""

from __future__ import annotations

import logging

import pytest

from loaders.hf import hf_load_kwargs, max_memory
from loaders.llamacpp_loader import context_tokens, kv_bytes_per_token
from loaders.options import (LoadOption, LoadOptionError, changed, check_options, options_of, parse_assignments,
                             refuse_off_device)
from loaders.registry import default_registry

N_CTX = LoadOption("n_ctx", int, 0, "tokens", minimum=0, maximum=1 << 20)
FLASH = LoadOption("flash_attn", str, "auto", "fa", choices=("auto", "on", "off"))
TRUST = LoadOption("trust_remote_code", bool, False, "run code")
SCALE = LoadOption("scale", float, 1.0, "a factor", minimum=0.5, maximum=2.0)
LAYERS = LoadOption("n_gpu_layers", int, 0, "layers", minimum=-1, maximum=1000, devices=("cuda",))


class Loader:
    name = "test"
    options = (N_CTX, FLASH, TRUST, SCALE, LAYERS)


@pytest.mark.parametrize("spec, given, value", [
    (N_CTX, "4096", 4096), (N_CTX, 4096.0, 4096), (N_CTX, " 512 ", 512), (N_CTX, None, 0),
    (FLASH, "on", "on"), (TRUST, "yes", True), (TRUST, "0", False), (TRUST, True, True),
    (SCALE, "1.5", 1.5), (SCALE, 2, 2.0)])
def test_values_from_a_command_line_a_form_or_json_are_read_as_the_options_type(spec, given, value):
    assert spec.parse(given) == value and type(spec.parse(given)) is type(value)


@pytest.mark.parametrize("spec, given, says", [
    (N_CTX, "abc", "takes an integer from 0 to 1048576; got 'abc'"),
    (N_CTX, 1.5, "takes an integer from 0 to 1048576"), (N_CTX, -1, "got -1"), (N_CTX, True, "got True"),
    (FLASH, "maybe", "takes one of auto, on, off; got 'maybe'"), (FLASH, 1, "got 1"),
    (TRUST, "sure", "takes true or false"), (SCALE, 3, "takes a number from 0.5 to 2.0; got 3")])
def test_a_bad_value_is_refused_naming_the_option_and_what_it_takes(spec, given, says):
    with pytest.raises(LoadOptionError, match=f"test load option '{spec.name}'") as info:
        spec.parse(given, "test")
    assert says in str(info.value) and info.value.option == spec.name


def test_every_option_gets_its_value_and_an_unknown_name_lists_the_loaders_options():
    values = check_options(Loader, {"n_ctx": "2048"})
    assert values == {"n_ctx": 2048, "flash_attn": "auto", "trust_remote_code": False, "scale": 1.0,
                      "n_gpu_layers": 0}
    assert changed(Loader, values) == {"n_ctx": 2048}
    with pytest.raises(LoadOptionError, match=r"the test loader has no load option 'nctx' \(its options: n_ctx, "
                                              r"flash_attn, trust_remote_code, scale, n_gpu_layers\)"):
        check_options(Loader, {"nctx": 1})


def test_a_value_for_another_device_is_refused_never_ignored():
    refuse_off_device(Loader, {"n_gpu_layers": 0}, "cpu")  # the default applies anywhere
    refuse_off_device(Loader, {"n_gpu_layers": 8}, "cuda:1")
    with pytest.raises(LoadOptionError, match=r"test load option n_gpu_layers=8 needs a CUDA device, but this load "
                                              r"runs on cpu \(no GPU here\); set n_gpu_layers back to 0"):
        refuse_off_device(Loader, {"n_gpu_layers": 8}, "cpu", "no GPU here")


def test_name_value_pairs_from_the_command_line():
    assert parse_assignments(["n_ctx=4096", " cache_type = q8_0", "max_memory=0=20GiB,cpu=8GiB"]) == {
        "n_ctx": "4096", "cache_type": "q8_0", "max_memory": "0=20GiB,cpu=8GiB"}
    for bad in ("n_ctx", "=4096"):
        with pytest.raises(LoadOptionError, match="a load option is NAME=VALUE"):
            parse_assignments([bad])


@pytest.mark.parametrize("name", ["transformers", "llamacpp", "gptq", "exllamav2"])
def test_each_loaders_declarations_hold_their_own_defaults(name):
    loader = default_registry().get(name)
    specs = options_of(loader)
    assert specs and len({s.name for s in specs}) == len(specs)
    for spec in specs:
        assert spec.help and spec.kind in (int, float, bool, str)
        assert spec.parse(spec.default) == spec.default and (not spec.choices or spec.default in spec.choices)
    assert changed(loader, check_options(loader, {})) == {}


def test_transformers_keyword_arguments_from_its_options(caplog):
    assert hf_load_kwargs({"attn_implementation": "auto"}, "cpu", "float32") == {}
    assert hf_load_kwargs({"attn_implementation": "eager"}, "cpu", "float32") == {"attn_implementation": "eager"}
    with caplog.at_level(logging.WARNING):
        assert hf_load_kwargs({"trust_remote_code": True}, "cpu", "float32") == {"trust_remote_code": True}
    assert "trust_remote_code is on: Python code from the model folder will run" in caplog.text
    assert hf_load_kwargs({"device_map": "balanced", "max_memory": "0=20GiB, cpu=64GiB"}, "cuda", "bfloat16") == {
        "device_map": "balanced", "max_memory": {0: "20GiB", "cpu": "64GiB"}}
    with pytest.raises(LoadOptionError, match="max_memory applies with a device map"):
        hf_load_kwargs({"device_map": "single", "max_memory": "0=20GiB"}, "cuda", "bfloat16")
    with pytest.raises(LoadOptionError, match="flash_attention_2 runs on CUDA only, but this load runs on cpu"):
        hf_load_kwargs({"attn_implementation": "flash_attention_2"}, "cpu", "float32")
    for bad in ("0:20GiB", "gpu0=20GiB", "0=lots"):
        with pytest.raises(LoadOptionError, match="max_memory is DEVICE=AMOUNT pairs"):
            max_memory(bad)


def test_llama_cpp_context_defaults_to_the_training_context_capped_by_memory():
    per_token = kv_bytes_per_token(n_layer=30, n_head=9, n_head_kv=3, n_embd=576, cache_type="f16")
    assert per_token == 2 * 30 * 3 * 64 * 2  # keys and values, every layer, 3 KV heads of 64
    assert kv_bytes_per_token(30, 9, 3, 576, "q8_0") < per_token and kv_bytes_per_token(30, 9, 3, 576, "q4_0") < \
        kv_bytes_per_token(30, 9, 3, 576, "q8_0")
    assert context_tokens(0, 8192, per_token, available=2**34) == 8192  # room: the whole training context
    assert context_tokens(0, 131072, per_token, available=2**30) == 16384  # halved until it fits half of 1 GiB
    assert context_tokens(0, 131072, per_token, available=2**20) == 512  # never below 512
    assert context_tokens(4096, 8192, per_token, available=1) == 4096  # asked for: as asked


def test_the_user_guide_lists_every_loaders_options_as_declared():
    from pathlib import Path

    guide = (Path(__file__).resolve().parents[2] / "docs" / "user-guide.md").read_text()
    section = guide[guide.index("### Load options"):guide.index("\n## Models")]
    registry = default_registry()
    for name in registry.names():
        specs = options_of(registry.get(name))
        if not specs:
            continue
        table = section[section.index(f"**{name}**"):]
        for spec in specs:
            row = next((line for line in table.splitlines() if line.startswith(f"| `{spec.name}` |")), None)
            assert row is not None and spec.describe() in row and spec.help in row, (name, spec.name)
