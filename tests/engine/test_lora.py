"""LoRA: a real adapter trained in the test session; attach, detach, mixed batches, and adapters that do not fit."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from loaders.lora import LoRAError
from tests.conftest import SECRET_PROMPT, SECRET_WORD, TEST_THREADS
from tests.engine.scripted import ScriptedModel
from webui.config import AppConfig
from webui.engine import GenerationError, GenerationRequest, InvalidParameter, SamplingParams
from webui.names import InvalidName
from webui.services import Services

GREEDY = SamplingParams(temperature=0, max_new_tokens=6, ban_eos=True)


@pytest.fixture
def services(tmp_path: Path, tiny_model_dir: Path, tiny_lora_dir: Path, mismatched_lora_dir: Path):
    config = AppConfig(user_data_dir=tmp_path / "data", threads=TEST_THREADS, device="cpu")
    config.make_dirs()
    (config.models_dir / "tiny").symlink_to(tiny_model_dir, target_is_directory=True)
    shutil.copytree(tiny_lora_dir, config.loras_dir / "secret")
    shutil.copytree(tiny_lora_dir, config.loras_dir / "secret-copy")
    shutil.copytree(mismatched_lora_dir, config.loras_dir / "other-base")
    (config.loras_dir / "not-an-adapter").mkdir()
    made = Services.create(config)
    made.models.load("tiny")
    yield made
    made.close()


def answer(services, loras=()) -> list[int]:
    return services.engine.generate(GenerationRequest(SECRET_PROMPT, GREEDY, loras=loras)).token_ids


def secret_token(services) -> int:
    return services.loaded.tokenizer.encode(SECRET_WORD, add_special_tokens=False)[0]


def test_attach_changes_the_answer_and_detach_restores_the_base_exactly(services):
    base = answer(services)
    assert base[0] != secret_token(services)
    services.models.attach_lora("secret")
    assert services.active_loras == (("secret", 1.0),)
    assert answer(services, services.active_loras)[0] == secret_token(services)
    assert answer(services) == base  # a request without adapters is untouched while one is attached
    services.models.detach_lora("secret")
    assert services.loaded.loras == {} and services.active_loras == ()
    assert answer(services) == base


def test_one_batch_with_and_without_the_adapter(services):
    base_alone = answer(services)
    services.models.attach_lora("secret")
    lora_alone = answer(services, (("secret", 1.0),))
    streams = [services.engine.submit(GenerationRequest(SECRET_PROMPT, GREEDY, loras=loras))
               for loras in ((("secret", 1.0),), (), (("secret", 1.0),), ())]
    results = [s.result().token_ids for s in streams]
    assert results == [lora_alone, base_alone, lora_alone, base_alone]


def test_weights_and_stacking(services):
    base = answer(services)
    services.models.attach_lora("secret", weight=0.0)
    assert answer(services, services.active_loras) == base  # weight 0: no effect
    services.models.attach_lora("secret-copy")
    stacked = answer(services, (("secret", 1.0), ("secret-copy", 1.0)))
    assert stacked[0] == secret_token(services)


def test_compatible_adapters_are_listed(services):
    assert [e.name for e in services.models.catalog.available_loras()] == ["other-base", "secret", "secret-copy"]
    assert [e.name for e in services.models.compatible_loras()] == ["secret", "secret-copy"]


def test_an_adapter_for_another_base_model_is_refused_and_the_model_is_untouched(services):
    base = answer(services)
    with pytest.raises(LoRAError, match="trained for another base model"):
        services.models.attach_lora("other-base")
    assert services.loaded.loras == {} and services.active_loras == ()
    assert answer(services) == base


@pytest.mark.parametrize("name,error,message", [
    ("not-an-adapter", LoRAError, "no adapter_config.json"),
    ("missing", LoRAError, "does not exist"),
    ("../secret", InvalidName, "plain name"),
])
def test_bad_adapter_names_and_folders(services, name, error, message):
    with pytest.raises(error, match=message):
        services.models.attach_lora(name)
    assert services.active_loras == ()


def test_a_request_for_an_adapter_that_is_not_attached(services):
    with pytest.raises(InvalidParameter, match="not attached") as err:
        services.engine.submit(GenerationRequest(SECRET_PROMPT, GREEDY, loras=(("secret", 1.0),)))
    assert err.value.param == "lora"


def test_a_loader_without_lora_says_which_loaders_can(services):
    scripted = ScriptedModel(services.loaded.tokenizer, [100] * 10)
    services.in_use().model = scripted
    services.engine.set_model(scripted)
    with pytest.raises(LoRAError, match="cannot apply LoRA adapters; loaders that can: transformers"):
        services.models.attach_lora("secret")
    with pytest.raises(InvalidParameter, match="cannot apply LoRA"):
        services.engine.submit(GenerationRequest("hi", GREEDY, loras=(("secret", 1.0),)))


def test_detaching_ends_requests_still_using_it(services):
    services.models.attach_lora("secret")
    stream = services.engine.submit(GenerationRequest(SECRET_PROMPT, SamplingParams(max_new_tokens=250, ban_eos=True),
                                                      loras=(("secret", 1.0),)))
    events = iter(stream)
    next(events)
    services.models.detach_lora("secret")
    with pytest.raises(GenerationError, match="'secret' was detached"):
        list(events)


def test_switching_models_clears_the_adapters(services):
    services.models.attach_lora("secret")
    services.models.load("tiny")
    assert services.active_loras == () and services.loaded.loras == {}


def test_the_batch_grid_can_vary_the_adapter(services):
    from webui.batch.run.grid import GridSpec
    from webui.batch.run.prompts import parse_lines
    from webui.batch.asserts.errors import BatchInputError
    from webui.batch.run.runner import BatchJob

    base = answer(services)
    job = BatchJob("lora grid", parse_lines(SECRET_PROMPT), GridSpec([], {"lora": ["none", "secret"],
                                                                          "max_new_tokens": [6], "ban_eos": [True],
                                                                          "temperature": [0]}), raw=True)
    with pytest.raises(BatchInputError, match="'secret' is not attached"):
        services.batch_runner.start(job)
    services.models.attach_lora("secret")
    handle = services.batch_runner.start(job)
    assert handle.wait(60)
    rows = {r.setting: r for r in handle.rows()}
    assert set(rows) == {"lora=none", "lora=secret"}
    tok = services.loaded.tokenizer
    assert tok.encode(rows["lora=none"].output, add_special_tokens=False)[:1] == base[:1]
    assert rows["lora=secret"].output.startswith(SECRET_WORD)
    again = services.batch_runner.start(BatchJob.from_stored("again", services.batches.get(handle.run_id).spec))
    assert again.wait(60) and [r.output for r in again.rows()] == [r.output for r in handle.rows()]
