"""The API's management and utility side on a real server: keys from the command line and a file, the admin key,
loading/unloading models and adapters, tokenize/detokenize, the next-token distribution, stats and /metrics."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from tests.conftest import random_lora
from tests.e2e.server import free_port, running_server, user_data_with_default_model

pytestmark = pytest.mark.real_model
BASE = "SmolLM2-135M-Instruct"
USER, FILE_KEY, ADMIN = "user-key-1", "file-key-2", "admin-key-3"
CHAT = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1}
USER_ROUTES = [  # (method, path, body): what any API key opens
    ("GET", "/v1/models", None),
    ("POST", "/v1/chat/completions", CHAT),
    ("POST", "/tokenize", {"prompt": "Hello"}),
    ("POST", "/detokenize", {"tokens": [1, 2]}),
    ("POST", "/v1/internal/logits", {"prompt": "Hello", "top_logits": 3}),
    ("GET", "/v1/internal/stats", None),
    ("GET", "/v1/internal/model/list", None),
    ("GET", "/v1/internal/model/info", None),
    ("GET", "/metrics", None),
]
ADMIN_ROUTES = [  # what only the admin key opens (bodies that fail harmlessly once past the key check)
    ("POST", "/v1/internal/model/load", {"model_name": "no-such-model"}),
    ("POST", "/v1/internal/model/unload", {"model_name": "no-such-model"}),
    ("POST", "/v1/load_lora_adapter", {"lora_name": "no-such-adapter"}),
    ("POST", "/v1/unload_lora_adapter", {"lora_name": "no-such-adapter"}),
]


@pytest.fixture(scope="module")
def api(tmp_path_factory, default_model_dir, tiny_model_dir):
    root = tmp_path_factory.mktemp("manage")
    user_data = user_data_with_default_model(root / "data", default_model_dir)
    (user_data / "models").mkdir(exist_ok=True)
    (user_data / "models" / "tiny").symlink_to(tiny_model_dir, target_is_directory=True)
    random_lora(default_model_dir, user_data / "loras" / "noisy")
    keys = root / "keys.txt"
    keys.write_text(f"# the team's keys\n{FILE_KEY}\n\n")
    port = free_port()
    with running_server(user_data, "--nowebui", "--api-port", str(port), "--api-key", USER, "--api-key-file", str(keys),
                        "--admin-key", ADMIN) as srv:
        yield f"http://127.0.0.1:{port}", srv, user_data


def call(api, method: str, path: str, body=None, key: str | None = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    with httpx.Client(base_url=api[0], timeout=300) as client:
        return client.request(method, path, json=body, headers=headers)


def error_of(r: httpx.Response) -> dict:
    body = r.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}, body
    return body["error"]


@pytest.mark.parametrize("method,path,body", USER_ROUTES + ADMIN_ROUTES, ids=lambda v: v if isinstance(v, str) else "")
def test_every_endpoint_needs_a_key(api, method, path, body):
    for key in (None, "wrong-key"):
        r = call(api, method, path, body, key)
        assert r.status_code == 401, r.text
        assert error_of(r)["code"] == "invalid_api_key"


@pytest.mark.parametrize("method,path,body", USER_ROUTES, ids=lambda v: v if isinstance(v, str) else "")
def test_an_api_key_from_the_command_line_or_the_file_opens_the_user_routes(api, method, path, body):
    for key in (USER, FILE_KEY, ADMIN):
        r = call(api, method, path, body, key)
        assert r.status_code == 200, r.text


@pytest.mark.parametrize("method,path,body", ADMIN_ROUTES, ids=lambda v: v if isinstance(v, str) else "")
def test_only_the_admin_key_opens_the_management_routes(api, method, path, body):
    for key in (USER, FILE_KEY):
        r = call(api, method, path, body, key)
        assert r.status_code == 403, r.text
        error = error_of(r)
        assert error["type"] == "permission_error" and error["code"] == "admin_key_required"
        assert "--admin-key" in error["message"]
    r = call(api, method, path, body, ADMIN)
    assert r.status_code in (400, 404), r.text  # past the key check: the request itself is refused
    assert "no-such" in error_of(r)["message"]


def test_health_needs_no_key_and_keys_never_reach_the_log(api):
    assert call(api, "GET", "/health").status_code == 200
    log = api[1].log.read_text()
    assert all(k not in log for k in (USER, FILE_KEY, ADMIN))


def test_load_a_model_beside_use_it_by_id_and_unload_it(api):
    before = call(api, "GET", "/v1/internal/model/info", key=USER).json()
    assert before["model_name"] == BASE
    r = call(api, "POST", "/v1/internal/model/load", {"model_name": "tiny", "make_current": False}, ADMIN)
    assert r.status_code == 200, r.text
    info = r.json()
    assert info["model_name"] == BASE and [m["model_name"] for m in info["models"]] == [BASE, "tiny"]
    client = openai.OpenAI(base_url=api[0] + "/v1", api_key=USER, max_retries=0)
    assert "tiny" in [m.id for m in client.models.list()]
    reply = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "Hi"}], max_tokens=3,
                                           temperature=0, extra_body={"ignore_eos": True})
    assert reply.model == "tiny" and reply.usage.completion_tokens == 3
    r = call(api, "POST", "/v1/internal/model/unload", {"model_name": "tiny"}, ADMIN)
    assert r.status_code == 200 and [m["model_name"] for m in r.json()["models"]] == [BASE]
    assert "tiny" not in [m.id for m in client.models.list() if m.owned_by == "llm-workbench"]


def test_a_load_that_fails_keeps_what_was_loaded(api):
    before = call(api, "GET", "/v1/internal/model/info", key=USER).json()
    r = call(api, "POST", "/v1/internal/model/load", {"model_name": "no-such-model", "keep_others": False}, ADMIN)
    assert r.status_code == 404 and error_of(r)["code"] == "model_not_found"
    assert "Available:" in error_of(r)["message"]
    r = call(api, "POST", "/v1/internal/model/load", {"model_name": "tiny", "args": {"loader": "nope"}}, ADMIN)
    assert r.status_code == 400 and error_of(r)["param"] == "loader" and "available loaders" in error_of(r)["message"]
    r = call(api, "POST", "/v1/internal/model/load", {"model_name": "../etc"}, ADMIN)
    assert r.status_code == 400
    assert call(api, "GET", "/v1/internal/model/info", key=USER).json() == before


def test_load_options_over_the_api_are_used_remembered_and_refused_clearly(api):
    before = call(api, "GET", "/v1/internal/model/info", key=USER).json()
    body = {"model_name": "tiny", "make_current": False, "options": {"attn_implementation": "eager"},
            "args": {"loader": "transformers", "trust_remote_code": False}}  # text-generation-webui's shape too
    r = call(api, "POST", "/v1/internal/model/load", body, ADMIN)
    assert r.status_code == 200, r.text
    tiny = next(m for m in r.json()["models"] if m["model_name"] == "tiny")
    assert tiny["load_options"]["attn_implementation"] == "eager" and tiny["load_options"]["trust_remote_code"] is False
    settings = json.loads((api[2] / "settings.json").read_text())
    assert settings["model_options"]["tiny@transformers"] == {"attn_implementation": "eager"}
    # loading it again without options uses what it was last loaded with
    r = call(api, "POST", "/v1/internal/model/load", {"model_name": "tiny", "make_current": False}, ADMIN)
    assert next(m for m in r.json()["models"] if m["model_name"] == "tiny")["load_options"]["attn_implementation"] \
        == "eager"
    call(api, "POST", "/v1/internal/model/unload", {"model_name": "tiny"}, ADMIN)
    refusals = [({"n_ctx": 4096}, "options.n_ctx", "the transformers loader has no load option 'n_ctx'"),
                ({"attn_implementation": "fast"}, "options.attn_implementation", "one of auto, sdpa, eager"),
                ({"load_in": "4bit"}, "options.load_in", "needs a CUDA device, but this load runs on cpu"),
                ({"device_map": "auto"}, "options.device_map", "needs a CUDA device")]
    for options, param, message in refusals:
        r = call(api, "POST", "/v1/internal/model/load", {"model_name": "tiny", "options": options,
                                                             "device": "cpu", "keep_others": False}, ADMIN)
        assert r.status_code == 400 and error_of(r)["param"] == param and message in error_of(r)["message"], r.text
    assert call(api, "GET", "/v1/internal/model/info", key=USER).json()["model_name"] == before["model_name"]


def test_attach_and_detach_an_adapter_as_vllm_does(api):
    r = call(api, "POST", "/v1/load_lora_adapter", {"lora_name": "noisy", "lora_path": "/etc"}, ADMIN)
    assert r.status_code == 400 and error_of(r)["param"] == "lora_path"
    r = call(api, "POST", "/v1/load_lora_adapter", {"lora_name": "noisy", "weight": 0.5}, ADMIN)
    assert r.status_code == 200, r.text
    assert r.json()["lora_names"] == ["noisy"] and r.json()["models"][0]["loras"] == {"noisy": 0.5}
    assert f"{BASE}:noisy" in [m["id"] for m in call(api, "GET", "/v1/models", key=USER).json()["data"]]
    r = call(api, "POST", "/v1/unload_lora_adapter", {"lora_name": "noisy"}, ADMIN)
    assert r.status_code == 200 and r.json()["lora_names"] == []
    r = call(api, "POST", "/v1/unload_lora_adapter", {"lora_name": "noisy"}, ADMIN)
    assert r.status_code == 404 and "not attached" in error_of(r)["message"]


def test_tokenize_and_detokenize_as_vllm_does(api):
    r = call(api, "POST", "/tokenize", {"prompt": "Hello world", "return_token_strs": True}, USER).json()
    assert r["count"] == len(r["tokens"]) == 2 and r["max_model_len"] == 8192
    assert "".join(r["token_strs"]) == "Hello world"
    assert call(api, "POST", "/detokenize", {"tokens": r["tokens"]}, USER).json() == {"prompt": "Hello world"}
    chat = call(api, "POST", "/tokenize", {"messages": [{"role": "user", "content": "Hello world"}],
                                           "return_token_strs": True}, USER).json()
    assert chat["count"] > r["count"] and "<|im_start|>" in chat["token_strs"]
    text = call(api, "POST", "/detokenize", {"tokens": chat["tokens"]}, USER).json()["prompt"]
    assert text.endswith("<|im_start|>user\nHello world<|im_end|>\n<|im_start|>assistant\n")
    bare = call(api, "POST", "/tokenize", {"messages": [{"role": "user", "content": "Hello world"}],
                                           "add_generation_prompt": False}, USER).json()
    assert bare["count"] < chat["count"]
    bad = call(api, "POST", "/detokenize", {"tokens": [1, 10**7]}, USER)
    assert bad.status_code == 400 and error_of(bad)["param"] == "tokens" and "tokens[1]" in error_of(bad)["message"]
    both = call(api, "POST", "/tokenize", {"prompt": "x", "messages": [{"role": "user", "content": "x"}]}, USER)
    assert both.status_code == 400 and error_of(both)["param"] == "prompt"


def test_the_next_token_distribution_raw_and_after_the_samplers(api):
    r = call(api, "POST", "/v1/internal/logits", {"prompt": "The capital of France is", "top_logits": 5,
                                                  "top_k": 1}, USER).json()
    first, *rest = r["tokens"]
    assert first["token"] == " Paris" and 0 < first["probability"] < 1
    assert first["after_samplers"] == pytest.approx(1.0) and first["kept"]
    assert all(t["after_samplers"] == 0 and not t["kept"] for t in rest)
    assert r["logits"][" Paris"] == pytest.approx(1.0)
    raw = call(api, "POST", "/v1/internal/logits", {"prompt": "The capital of France is", "top_logits": 5,
                                                    "use_samplers": False}, USER).json()
    assert raw["logits"][" Paris"] == pytest.approx(first["probability"], rel=1e-4)
    bad = call(api, "POST", "/v1/internal/logits", {"prompt": "x", "temperature": 9}, USER)
    assert bad.status_code == 400 and error_of(bad)["param"] == "temperature"


def test_stats_and_prometheus_metrics(api):
    stats = call(api, "GET", "/v1/internal/stats", key=USER).json()
    assert stats["models"][0]["model"] == BASE and stats["running"] == 0
    assert stats["models"][0]["prefix_cache"]["budget_bytes"] > 0
    text = call(api, "GET", "/metrics", key=USER).text
    assert "# TYPE workbench_requests_running gauge" in text
    assert f'workbench_requests_running{{model="{BASE}"}} 0' in text
    assert 'workbench_api_requests_total{status="401"}' in text
