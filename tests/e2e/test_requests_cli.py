"""`python launch.py requests ...` over requests a real server kept (#33): list, show, export as OpenAI batch
input and as a promptfoo suite (run again through launch.py batch), replay (the same tokens for a greedy request;
with a change), delete, and clear errors for bad input."""

from __future__ import annotations

import json
import subprocess
import sys

import openai
import pytest

from tests.conftest import ROOT, TEST_THREADS
from tests.e2e.server import free_port, running_server, user_data_with_default_model

pytestmark = pytest.mark.real_model

MODEL = "SmolLM2-135M-Instruct"


def requests(user_data, *args, timeout=300):
    return subprocess.run([sys.executable, str(ROOT / "launch.py"), "requests", "--user-data-dir", str(user_data),
                           "--threads", str(TEST_THREADS), *args], capture_output=True, text=True, timeout=timeout,
                          cwd=ROOT)


@pytest.fixture(scope="module")
def kept(tmp_path_factory, default_model_dir):
    """A user data dir where a server with --capture-requests kept a greedy chat, an aliased one and a refusal."""
    user_data = user_data_with_default_model(tmp_path_factory.mktemp("requests") / "data", default_model_dir)
    port = free_port()
    with running_server(user_data, "--nowebui", "--api-port", str(port), "--capture-requests", "--served-model-name",
                        "gpt-4o-mini"):
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0)
        greedy = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Name a colour."}],
                                                temperature=0, max_tokens=8)
        aliased = client.chat.completions.create(model="gpt-4o-mini", temperature=0, max_tokens=6,
                                                 messages=[{"role": "user", "content": "Say hi."}])
        with pytest.raises(openai.BadRequestError):
            client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}], top_p=7)
    return user_data, greedy, aliased


def test_list_show_and_export(kept, tmp_path):
    user_data, greedy, aliased = kept
    listed = requests(user_data, "list")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.strip().splitlines()
    assert len(lines) == 3 and lines[-1].startswith(greedy.id) and " 400 " in lines[0]
    assert requests(user_data, "list", "--status", "400").stdout.count("\n") == 1
    shown = json.loads(requests(user_data, "show", greedy.id).stdout)
    assert shown["response"]["choices"][0]["message"]["content"] == greedy.choices[0].message.content
    assert "<|im_start|>user\nName a colour.<|im_end|>" in shown["details"]["prompt"]
    out = tmp_path / "batch.jsonl"
    done = requests(user_data, "export", "--out", str(out))
    assert done.returncode == 0, done.stderr
    batch = [json.loads(line) for line in out.read_text().splitlines()]
    assert [b["custom_id"] for b in batch] == [greedy.id, aliased.id]  # answered ones, in the order kept
    assert batch[0] == {"custom_id": greedy.id, "method": "POST", "url": "/v1/chat/completions", "body": {
        "model": MODEL, "messages": [{"role": "user", "content": "Name a colour."}], "temperature": 0,
        "max_tokens": 8}}


def test_export_as_a_promptfoo_suite_runs_again_to_the_same_replies(kept, tmp_path):
    """Kept requests turned into tests: the promptfoo suite runs through launch.py batch, each request one row
    with its own parameters, and the greedy replies come out as the server gave them."""
    user_data, greedy, aliased = kept
    suite = tmp_path / "suite.yaml"
    done = requests(user_data, "export", "--format", "promptfoo", "--out", str(suite))
    assert done.returncode == 0 and "wrote 2 requests" in done.stderr, done.stderr
    out = tmp_path / "results.jsonl"
    ran = subprocess.run([sys.executable, str(ROOT / "launch.py"), "batch", str(suite), "--user-data-dir",
                          str(user_data), "--threads", str(TEST_THREADS), "--out", str(out)], capture_output=True,
                         text=True, timeout=300, cwd=ROOT)
    assert ran.returncode == 0, ran.stderr
    rows = {r["prompt_id"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert rows[f"test 1 · {greedy.id}"]["output"] == greedy.choices[0].message.content
    assert rows[f"test 1 · {aliased.id}"]["output"] == aliased.choices[0].message.content
    assert rows[f"test 1 · {aliased.id}"]["params"]["max_new_tokens"] == 6


def test_replay_gives_the_same_tokens_and_takes_changes(kept):
    user_data, greedy, aliased = kept
    again = requests(user_data, "replay", greedy.id)
    assert again.returncode == 0, again.stderr
    answer = json.loads(again.stdout)
    assert answer["response"]["choices"][0]["message"]["content"] == greedy.choices[0].message.content
    alias = json.loads(requests(user_data, "replay", aliased.id).stdout)  # the alias: on the model that answered
    assert alias["response"]["choices"][0]["message"]["content"] == aliased.choices[0].message.content
    shorter = json.loads(requests(user_data, "replay", greedy.id, "--set", "max_tokens=2").stdout)
    assert shorter["response"]["usage"]["completion_tokens"] == 2
    kept_now = json.loads(requests(user_data, "show", answer["id"]).stdout)
    assert kept_now["details"]["replay_of"] == greedy.id


def test_bad_input_says_what_to_do(kept):
    user_data, greedy, _ = kept
    for args, said in ((("show", "chatcmpl-nope"), "no kept request has the id 'chatcmpl-nope'"),
                       (("replay", greedy.id, "--set", "oops"), "--set takes NAME=JSON"),
                       (("delete", "chatcmpl-nope"), "no kept request has the id")):
        done = requests(user_data, *args)
        assert done.returncode == 2 and said in done.stderr, (args, done.stderr)
    assert requests(user_data, "delete", greedy.id).returncode == 0
    assert requests(user_data, "show", greedy.id).returncode == 2
