"""LoRA over the API: --lora at start, `base:adapter` model ids, and mixed adapters in one batch."""

from __future__ import annotations

import concurrent.futures

import httpx
import pytest

from tests.api.conftest import API_KEY
from tests.conftest import random_lora
from tests.e2e.server import free_port, running_server, user_data_with_default_model

pytestmark = pytest.mark.real_model
BASE = "SmolLM2-135M-Instruct"


@pytest.fixture(scope="module")
def lora_server(tmp_path_factory, default_model_dir):
    """The default model with a random (untrained, non-zero) LoRA 'noisy' attached at start with --lora."""
    user_data = user_data_with_default_model(tmp_path_factory.mktemp("lora-api") / "data", default_model_dir)
    random_lora(default_model_dir, user_data / "loras" / "noisy")
    port = free_port()
    with running_server(user_data, "--nowebui", "--api-port", str(port), "--api-key", API_KEY,
                        "--lora", "noisy") as srv:
        yield httpx.Client(base_url=f"http://127.0.0.1:{port}/v1", headers={"Authorization": f"Bearer {API_KEY}"},
                           timeout=120), srv


def chat(client, model: str) -> str:
    r = client.post("/chat/completions", json={"model": model, "max_tokens": 8, "temperature": 0, "ignore_eos": True,
                                               "messages": [{"role": "user", "content": "What is the capital of France?"}]})
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["message"]["content"]


def test_models_list_the_adapter_and_requests_choose_it(lora_server):
    client, srv = lora_server
    ids = [m["id"] for m in client.get("/models").json()["data"]]
    assert BASE in ids and f"{BASE}:noisy" in ids
    assert "attached LoRA adapter noisy" in srv.log.read_text()
    base, adapted = chat(client, BASE), chat(client, f"{BASE}:noisy")
    assert base != adapted
    with concurrent.futures.ThreadPoolExecutor(4) as pool:  # mixed adapters batched together
        together = list(pool.map(lambda m: chat(client, m), [BASE, f"{BASE}:noisy", BASE, f"{BASE}:noisy"]))
    assert together == [base, adapted, base, adapted]


def test_an_adapter_that_is_not_attached_is_a_404(lora_server):
    client, _ = lora_server
    r = client.post("/chat/completions", json={"model": f"{BASE}:nope", "messages": [{"role": "user", "content": "x"}]})
    assert r.status_code == 404 and "not attached" in r.json()["error"]["message"]


def test_loras_field_sets_every_adapter_at_its_own_weight(lora_server):
    """What a reproduce record sends: the adapters with the record's weights, not the weights attached now."""
    client, _ = lora_server
    base, adapted = chat(client, BASE), chat(client, f"{BASE}:noisy")

    def with_loras(loras, model=BASE):
        return client.post("/chat/completions", json={
            "model": model, "loras": loras, "max_tokens": 8, "temperature": 0, "ignore_eos": True,
            "messages": [{"role": "user", "content": "What is the capital of France?"}]})

    assert with_loras([["noisy", 1.0]]).json()["choices"][0]["message"]["content"] == adapted
    assert with_loras([["noisy", 0.0]]).json()["choices"][0]["message"]["content"] == base
    assert with_loras([]).json()["choices"][0]["message"]["content"] == base
    r = with_loras([["nope", 1.0]])
    assert r.status_code == 404 and r.json()["error"]["param"] == "loras" and "not attached" in r.text
    r = with_loras([["noisy", 1.0]], model=f"{BASE}:noisy")
    assert r.status_code == 400 and "not both" in r.json()["error"]["message"]
    assert with_loras([["noisy", 50]]).status_code == 400
