"""Two models loaded at once (`--also-load`), each picked by its id through the official `openai` client."""

from __future__ import annotations

import asyncio
import urllib.request

import httpx
import openai
import pytest

from tests.api.conftest import API_KEY, start_api
from tests.conftest import run_async

pytestmark = pytest.mark.real_model
DEFAULT = "SmolLM2-135M-Instruct"
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def api(tmp_path_factory, default_model_dir, tiny_model_dir):
    """The default model in use, the tiny random model loaded beside it, and the alias 'gpt-test' for the one
    in use."""
    root = tmp_path_factory.mktemp("two-models")
    models = root / "models"
    models.mkdir()
    (models / "tiny").symlink_to(tiny_model_dir, target_is_directory=True)
    ctx, base, key = start_api(tmp_path_factory, default_model_dir, "--models-dir", str(models), "--also-load",
                               "tiny", "--served-model-name", "gpt-test", DEFAULT)
    with ctx:
        with urllib.request.urlopen(base.removesuffix("/v1") + "/health", timeout=10):
            pass
        yield base


def ask(client, model: str) -> str:
    reply = client.chat.completions.create(model=model, messages=QUESTION, max_tokens=6, temperature=0)
    assert reply.model == (DEFAULT if model == "gpt-test" else model)  # an alias answers as the model it names
    return reply.choices[0].message.content


def test_each_model_answers_by_its_id_and_both_are_listed(api):
    client = openai.OpenAI(base_url=api, api_key=API_KEY)
    ids = [m.id for m in client.models.list().data]
    assert ids[:3] == [DEFAULT, "tiny", "gpt-test"]  # loaded first; the alias that repeats a name is listed once
    default, tiny = ask(client, DEFAULT), ask(client, "tiny")
    assert "Paris" in default and tiny != default  # random weights say something else
    assert ask(client, "tiny") == tiny and ask(client, "gpt-test") == default  # the alias: the model in use
    health = httpx.get(api.removesuffix("/v1") + "/health", timeout=10).json()
    assert health["model"] == DEFAULT and health["models"] == [DEFAULT, "tiny"]


def test_both_models_generate_at_the_same_time(api):
    client = openai.AsyncOpenAI(base_url=api, api_key=API_KEY)

    async def both():
        return await asyncio.gather(*(client.chat.completions.create(model=m, messages=QUESTION, max_tokens=6,
                                                                     temperature=0) for m in (DEFAULT, "tiny") * 2))

    replies = run_async(both())
    assert [r.model for r in replies] == [DEFAULT, "tiny"] * 2
    assert replies[0].choices[0].message.content == replies[2].choices[0].message.content
    assert replies[1].choices[0].message.content == replies[3].choices[0].message.content


def test_a_model_that_is_not_loaded_is_a_404_naming_the_loaded_ones(api):
    client = openai.OpenAI(base_url=api, api_key=API_KEY)
    with pytest.raises(openai.NotFoundError, match=rf"the model 'nope' does not exist; available: {DEFAULT}, tiny"):
        ask(client, "nope")


def test_without_an_admin_key_the_management_endpoints_are_off(api):
    """API keys but no --admin-key: loading over the API is refused, saying how to turn it on."""
    r = httpx.post(api.removesuffix("/v1") + "/v1/internal/model/unload", json={"model_name": "tiny"},
                   headers={"Authorization": f"Bearer {API_KEY}"}, timeout=30)
    assert r.status_code == 403 and "start it with --admin-key" in r.json()["error"]["message"]
    assert httpx.get(api.removesuffix("/v1") + "/health", timeout=10).json()["models"] == [DEFAULT, "tiny"]
