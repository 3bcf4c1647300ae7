"""`python launch.py batch ...` on the real default model: results file, pass-rate exit code, bad input."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys

import pytest
import yaml

from tests.conftest import ROOT, TEST_THREADS
from tests.e2e.server import user_data_with_default_model

pytestmark = pytest.mark.real_model


def batch(user_data, *args, timeout=300):
    return subprocess.run([sys.executable, str(ROOT / "launch.py"), "batch", *args, "--user-data-dir", str(user_data),
                           "--threads", str(TEST_THREADS)], capture_output=True, text=True, timeout=timeout, cwd=ROOT)


@pytest.fixture
def user_data(tmp_path, default_model_dir):
    return user_data_with_default_model(tmp_path / "data", default_model_dir)


def test_headless_run_writes_results_and_checks_the_pass_rate(tmp_path, user_data):
    prompts = tmp_path / "q.jsonl"
    prompts.write_text(json.dumps({"country": "France", "asserts": ["contains:Paris"]}) + "\n"
                       + json.dumps({"country": "Japan", "asserts": ["contains:Tokyo"]}) + "\n")
    out = tmp_path / "results.jsonl"
    common = [str(prompts), "--template", "What is the capital of {{country}}?", "--preset", "Deterministic",
              "--grid", "max_new_tokens=12", "--grid", "temperature=0,0.8", "--samples", "2", "--seed", "7"]
    done = batch(user_data, *common, "--out", str(out), "--min-pass-rate", "0.25")
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 8 and {r["seed"] for r in rows} == {7, 8}
    assert {r["setting"] for r in rows} == {"Deterministic · temperature=0", "Deterministic · temperature=0.8"}
    france = [r for r in rows if "France" in r["prompt"] and r["setting"] == "Deterministic · temperature=0"]
    assert all("Paris" in r["output"] and r["passed"] for r in france)
    assert "pass rate" in done.stdout and "stored as batch run" in done.stdout

    again = batch(user_data, *common, "--out", str(tmp_path / "again.jsonl"), "--min-pass-rate", "1.0")
    assert again.returncode == 1 and "pass rate below 100%" in again.stderr
    rerun = [json.loads(line) for line in (tmp_path / "again.jsonl").read_text().splitlines()]
    assert [r["output"] for r in rerun] == [r["output"] for r in rows]  # same seeds, same outputs


def test_a_grid_axis_over_the_output_constraint(tmp_path, user_data):
    prompts = tmp_path / "q.txt"
    prompts.write_text("How old is the oldest tree?\nIs the sea blue?\n")
    out = tmp_path / "results.jsonl"
    axis = 'structured_outputs=[{"regex": "[0-9]{2,3} years"}, {"choice": ["yes", "no"]}, {}]'
    done = batch(user_data, str(prompts), "--grid", "temperature=1.0", "--grid", "max_new_tokens=6", "--grid", axis,
                 "--samples", "2", "--out", str(out))
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    by_setting = {}
    for r in rows:
        by_setting.setdefault(r["setting"], []).append(r["output"])
    regex, choice, free = (by_setting[f"structured_outputs={v}"]
                           for v in ('{"regex":"[0-9]{2,3} years"}', '{"choice":["yes","no"]}', "{}"))
    assert len(regex) == len(choice) == len(free) == 4
    assert all(re.fullmatch(r"[0-9]{2,3}( years?| yea| ye| y|)", o) for o in regex), regex  # 6 tokens may cut it
    assert all(o in ("yes", "no") for o in choice), choice


def test_a_promptfoo_suite_runs_and_writes_promptfoos_output(tmp_path, user_data):
    suite = ROOT / "tests" / "data" / "promptfoo" / "promptfooconfig.yaml"
    out = tmp_path / "results.json"
    done = batch(user_data, str(suite), "--out", str(out))
    assert done.returncode in (0, 1), done.stderr  # 1: some test failed, which the report says
    data = json.loads(out.read_text())
    results = data["results"]["results"]
    assert len(results) == 8 and {r["provider"]["label"] for r in results} == {"greedy", "warm"}
    france = [r for r in results if r["vars"] == {"country": "France"} and r["provider"]["label"] == "greedy"]
    assert len(france) == 2 and {r["prompt"]["label"] for r in france} == {
        "What is the capital of {{country}}? Answ", "prompt.txt"} and france[0]["testCase"]["description"] == "France"
    assert {r["provider"]["id"] for r in results} == {"openai:chat:gpt-4o-mini", "local"}
    assert all("Paris" in r["response"]["output"] and r["success"] for r in france), france
    components = france[0]["gradingResult"]["componentResults"]
    assert [c["assertion"]["type"] for c in components] == ["not-is-json", "latency", "icontains", "similar"]
    assert "stored as batch run" in done.stdout and "greedy" in done.stdout
    bad = tmp_path / "bad.yaml"
    bad.write_text("prompts: ['{{q}}']\ntests:\n  - vars: {q: hi}\n    assert:\n      - type: moderation\n"
                   "        value: 'hi'\n")
    refused = batch(user_data, str(bad))
    assert refused.returncode == 2 and "the assert type 'moderation' is not supported here" in refused.stderr


def test_a_promptfoo_chat_suite_runs_its_chats_with_the_providers_seed(tmp_path, user_data):
    """#32's small suite: a file://prompt_chat.json chat, an inline JSON chat, a provider with config.seed 7."""
    out = tmp_path / "rows.jsonl"
    done = batch(user_data, str(ROOT / "tests" / "data" / "promptfoo" / "chat" / "promptfooconfig.yaml"), "--out",
                 str(out))
    assert done.returncode in (0, 1), done.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 16 and {r["seed"] for r in rows if r["setting"] == "seeded"} == {7}  # 4 tests x 2 x 2
    france = next(r for r in rows if r["setting"] == "greedy" and "France" in r["prompt"] and "system" in r["prompt"])
    assert "paris" in france["output"].lower() and france["passed"] is True, france
    assert france["prompt_tokens"] < 60  # the chat as messages through the template, not its JSON as one message
    kinds = {a["label"].split(":")[0] for r in rows for a in r["asserts"]}
    assert {"javascript", "levenshtein"} <= kinds and all(r["passed"] for r in rows if "Japan" in r["prompt"])


def test_a_promptfoo_suite_with_csv_tests_a_prompts_config_and_a_providers_prompts(tmp_path, user_data):
    """#32: tests from a CSV in promptfoo's form (shorthand asserts, a threshold), a prompt's own max_tokens, a
    provider that runs one prompt only; the threshold passes France though one of its asserts fails."""
    out = tmp_path / "results.json"
    done = batch(user_data, str(ROOT / "tests" / "data" / "promptfoo" / "cli" / "promptfooconfig.yaml"), "--out",
                 str(out))
    assert done.returncode in (0, 1), done.stderr
    results = json.loads(out.read_text())["results"]["results"]
    cells = sorted((r["provider"]["label"], r["prompt"]["label"], r["testCase"]["description"]) for r in results)
    assert cells == [("ask-only", "ask", "france"), ("ask-only", "ask", "japan"), ("greedy", "ask", "france"),
                     ("greedy", "ask", "japan"), ("greedy", "short", "france"), ("greedy", "short", "japan")]
    assert all(r["response"]["tokenUsage"]["completion"] <= 3 for r in results if r["prompt"]["label"] == "short")
    france = next(r for r in results if r["provider"]["label"] == "greedy" and r["prompt"]["label"] == "ask"
                  and r["testCase"]["description"] == "france")
    assert "paris" in france["response"]["output"].lower(), france
    parts = [c["pass"] for c in france["gradingResult"]["componentResults"]]
    assert parts == [True, False] and france["success"] and france["score"] == 0.5  # 0.5 reaches its threshold


def test_a_suite_with_canned_tool_results_runs_the_tool_loop_per_row(tmp_path, user_data):
    """#44: the default model, its first turn bound to a call (tool_choice required), the call answered from the
    suite's canned result, then a final answer (max_tool_steps 1); the calls are in the results and asserted on."""
    from webui.catalog import DEFAULT_MODEL

    weather = {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
                                                "parameters": {"type": "object", "required": ["city"],
                                                               "properties": {"city": {"type": "string"}}}}}
    suite = tmp_path / "promptfooconfig.yaml"
    suite.write_text(yaml.safe_dump({
        "prompts": ["What is the weather in {{city}}?"],
        "providers": [{"id": f"workbench:{DEFAULT_MODEL}", "label": "weather", "config": {
            "tools": [weather], "tool_choice": "required", "tool_results": {"get_weather": "Sunny, 21 °C"},
            "max_tool_steps": 1, "max_tokens": 32}}],
        "tests": [{"vars": {"city": "Paris"}, "assert": [
            {"type": "tool-call-f1", "value": ["get_weather"]},
            {"type": "called-tool", "value": {"name": "get_weather", "arguments": {"required": ["city"]}}},
            {"type": "is-valid-openai-tools-call"}]}]}, allow_unicode=True), encoding="utf-8")
    out = tmp_path / "rows.jsonl"
    done = batch(user_data, str(suite), "--out", str(out), "--min-pass-rate", "1")
    assert done.returncode == 0, done.stdout + done.stderr
    (row,) = [json.loads(line) for line in out.read_text().splitlines()]
    (step,) = row["tool_steps"]
    (call,) = step["calls"]
    assert call["name"] == "get_weather" and "city" in json.loads(call["arguments"]), call
    assert call["result"] == "Sunny, 21 °C" and call["error"] is None
    assert row["output"].strip() and "<tool_call>" not in row["output"] and row["passed"], row


@pytest.mark.parametrize("setup,args,message", [
    ("prompt,x\n", [], "no prompts"),
    ("question\nhi\n", [], "no 'prompt' column"),
    ("prompt\nhi\n", ["--template", "Say {{nope}}"], "{{nope}}"),
    ("prompt\nhi\n", ["--preset", "NoSuch"], "NoSuch"),
    ("prompt\nhi\n", ["--grid", "temperature=0,1", "--samples", "3", "--max-cells", "4"], "cells"),
    ("prompt,assert\nhi,regex:([\n", [], "regex"),
])
def test_bad_input_exits_2_before_running(tmp_path, user_data, setup, args, message):
    prompts = tmp_path / "p.csv"
    prompts.write_text(setup)
    done = batch(user_data, str(prompts), *args, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert message in done.stderr
    assert "loaded" not in done.stdout  # refused before the model loads


@pytest.mark.skipif(__import__("importlib.util").util.find_spec("llama_cpp") is None,
                    reason="the llamacpp extra is not installed (python launch.py install llamacpp)")
def test_rows_say_the_loader_and_a_bare_name_means_the_same_model_in_the_grid_and_without_model(tmp_path, user_data):
    """The last model used was the default model on llama.cpp (what a run without --model loads); a provider naming
    the bare model loads it beside, on transformers, its default loader: the rows say which is which."""
    from webui.catalog import DEFAULT_MODEL
    from webui.settings import SettingsStore

    SettingsStore(user_data / "settings.json").update(last_model=DEFAULT_MODEL, last_loader="llamacpp")
    suite = tmp_path / "promptfooconfig.yaml"
    suite.write_text(f"prompts: ['{{{{q}}}}']\nproviders:\n  - id: workbench:{DEFAULT_MODEL}\n    label: named\n"
                     "    config: {temperature: 0, max_tokens: 3}\n  - id: local\n    label: in use\n"
                     "    config: {temperature: 0, max_tokens: 3}\ntests:\n  - vars: {q: Hi}\n")
    out, csv_out = tmp_path / "rows.jsonl", tmp_path / "rows.csv"
    done = batch(user_data, str(suite), "--out", str(out))
    assert done.returncode == 0, done.stderr
    rows = {r["setting"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert (rows["named"]["model"], rows["named"]["loader"]) == (DEFAULT_MODEL, "transformers")
    assert (rows["in use"]["model"], rows["in use"]["loader"]) == (f"{DEFAULT_MODEL}@llamacpp", "llamacpp")
    assert "n_ctx" in rows["in use"]["load_options"] and "n_ctx" not in rows["named"]["load_options"]
    assert f"{DEFAULT_MODEL}@llamacpp (loader llamacpp)" in done.stdout and f"loaded {DEFAULT_MODEL}" in done.stderr
    done = batch(user_data, str(suite), "--out", str(csv_out))
    assert done.returncode == 0, done.stderr
    header = csv_out.read_text().splitlines()[0].split(",")
    assert header[header.index("model") + 1] == "loader"


def run_example(tmp_path, user_data, name, max_tokens=4, *args):
    """promptfoo's example ``name`` (tests/data/promptfoo/examples/, see its SOURCE.md) copied with its files and
    run by ``launch.py batch ... args`` on the default model, ``max_tokens`` a row: its results in promptfoo's
    shape (the CLI takes no --grid with a promptfoo config, so the copy's provider says so)."""
    folder = tmp_path / name
    shutil.copytree(ROOT / "tests" / "data" / "promptfoo" / "examples" / name, folder)
    config = yaml.safe_load((folder / "promptfooconfig.yaml").read_text(encoding="utf-8"))
    config["providers"] = [{"id": config["providers"][0], "config": {"max_tokens": max_tokens}}]
    (folder / "promptfooconfig.yaml").write_text(yaml.safe_dump(config, allow_unicode=True), encoding="utf-8")
    out = tmp_path / "results.json"
    done = batch(user_data, str(folder / "promptfooconfig.yaml"), *args, "--out", str(out))
    assert done.returncode in (0, 1), done.stderr  # 1: a 135M model in a few tokens passes few asserts
    return json.loads(out.read_text())["results"]["results"]


def test_a_real_promptfoo_example_runs_end_to_end(tmp_path, user_data):
    """promptfoo's own getting-started example (tests/data/promptfoo/examples/, see its SOURCE.md) on the default
    model, 16 tokens a row (the CLI takes no --grid with a promptfoo config, so a copy's provider says so):
    every row runs and is judged by its asserts."""
    results = run_example(tmp_path, user_data, "getting-started", 16)
    assert len(results) == 4 and {r["vars"]["language"] for r in results} == {"French", "Spanish"}
    assert all(r["response"]["output"] and not r["error"] for r in results)
    assert all(len(r["gradingResult"]["componentResults"]) == 1 for r in results)
    assert {r["provider"]["id"] for r in results} == {"workbench:SmolLM2-135M-Instruct"}


def test_promptfoos_chat_messages_example_runs_its_messages_prompts_as_chats(tmp_path, user_data):
    results = run_example(tmp_path, user_data, "chat-messages-format")
    assert len(results) == 6 and all(r["response"]["output"] and not r["error"] for r in results)
    mixed = [r for r in results if r["prompt"]["label"] == "Mixed File Formats"]
    assert len(mixed) == 2 and all(json.loads(r["prompt"]["raw"])[2]["role"] == "assistant" for r in mixed)


@pytest.mark.parametrize("name,cells", [("csv-prompts", 15), ("config-tests-per-prompt", 10),
                                        ("nunjucks-custom-filters", 4), ("simple-csv", 8)])
def test_promptfoos_examples_of_issue_49_run_every_cell(tmp_path, user_data, name, cells):
    """CSV prompts, a test's own prompts list, a JavaScript nunjucks filter, the load filter: each example runs
    through launch.py batch, every cell with an output."""
    results = run_example(tmp_path, user_data, name)
    assert len(results) == cells and all(r["response"]["output"] and not r["error"] for r in results)
def test_a_suite_written_for_a_hosted_grader_runs_with_grader(tmp_path, user_data):
    """promptfoo's custom-grading-prompt example (tests/data/promptfoo/examples/, see its SOURCE.md) as written for
    a hosted grader (defaultTest.options.provider: openai:gpt-4.1-mini, as promptfoo's docs write it), its
    llm-rubric with no value graded by its rubricPrompt alone (#49 items 5, 6): --grader, promptfoo's eval
    --grader, names the loaded model that grades instead, and --grader-max-tokens its budget per step (an assert's
    own budget kept). Two runs, each loading the model: the flag's budget; the grader's own beside an assert's."""
    example = ROOT / "tests" / "data" / "promptfoo" / "examples" / "custom-grading-prompt"
    config = yaml.safe_load((example / "promptfooconfig.yaml").read_text(encoding="utf-8"))
    config["providers"] = [{"id": config["providers"][0], "config": {"max_tokens": 16}}]
    config["defaultTest"]["options"]["provider"] = "openai:gpt-4.1-mini"
    suite = tmp_path / "promptfooconfig.yaml"
    suite.write_text(yaml.safe_dump(config, allow_unicode=True), encoding="utf-8")
    (tmp_path / "prompts.txt").write_text((example / "prompts.txt").read_text(encoding="utf-8"))
    refused = batch(user_data, str(suite))
    assert refused.returncode == 2 and "--grader workbench:NAME" in refused.stderr
    out = tmp_path / "results.json"
    grader = ["--grader", "workbench:SmolLM2-135M-Instruct"]
    cut = batch(user_data, str(suite), *grader, "--grader-max-tokens", "4", "--out", str(out))
    assert cut.returncode == 0, cut.stderr
    assert "defaultTest.options.provider is replaced by the grader" in cut.stderr
    (result,) = json.loads(out.read_text())["results"]["results"]  # the budget reaches the judge: 4 tokens hold no
    assert "the judge's answer is not the JSON asked for (cut off?)" in result["gradingResult"]["reason"]  # verdict
    own = json.loads(json.dumps(config["tests"][0]))  # the same test, its assert with a grader budget of its own
    own["assert"][0]["provider"] = {"id": "openai:gpt-4o", "config": {"max_tokens": 4}}
    config["tests"].append(own)
    suite.write_text(yaml.safe_dump(config, allow_unicode=True), encoding="utf-8")
    done = batch(user_data, str(suite), *grader, "--no-cache", "--out", str(out))
    assert done.returncode in (0, 1), done.stderr  # the assert's own budget is kept when --grader replaces its model
    assert "tests[1].assert[0].provider is replaced by the grader SmolLM2-135M-Instruct (its config.max_tokens is " \
           "kept" in done.stderr
    results = {r["testIdx"]: r for r in json.loads(out.read_text())["results"]["results"]}
    (graded,) = results[0]["gradingResult"]["componentResults"]  # the grader's own budget: a whole verdict
    assert graded["assertion"]["type"] == "llm-rubric" and "the judge could not answer" not in graded["reason"]
    assert "not the JSON asked for" not in graded["reason"]
    assert "the judge's answer is not the JSON asked for (cut off?)" in results[1]["gradingResult"]["reason"]


def test_promptfoos_max_score_example_picks_one_output_of_each_test(tmp_path, user_data):
    """promptfoo's max-score-selection example (tests/data/promptfoo/examples/, see its SOURCE.md; max-score is
    newer than promptfoo 0.115, read as its documentation describes it, #49 item 8) on the default model, 16
    tokens an output and a small grader budget: each test's three prompts' outputs are compared, one is picked."""
    results = run_example(tmp_path, user_data, "max-score-selection", 16, "--grader-max-tokens", "64")
    assert len(results) == 6
    for test in (0, 1):
        picks = [r["gradingResult"]["componentResults"][-1] for r in results if r["testIdx"] == test]
        assert [p["assertion"]["type"] for p in picks] == ["max-score"] * 3
        assert sum(p["pass"] for p in picks) == 1, [p["reason"] for p in picks]


def test_promptfoos_f_score_example_reads_its_structured_replies_as_objects(tmp_path, user_data):
    """promptfoo's f-score example (tests/data/promptfoo/examples/, see its SOURCE.md; #49): its prompt's own
    json_schema response_format constrains the replies and makes each its parsed JSON, so the javascript asserts'
    ``output.sentiment`` is the reply's (promptfoo 0.115's openai chat provider parses such a reply): every row
    scores exactly one of the four confusion-matrix metrics, and its accuracy assert agrees with them."""
    results = run_example(tmp_path, user_data, "f-score", 96)
    assert len(results) == 4 and not any(r["error"] for r in results)
    for r in results:
        said = r["response"]["output"]
        assert isinstance(said, dict) and said["sentiment"] in ("positive", "negative"), said
        checks = {c["assertion"].get("metric", c["assertion"]["type"]): c
                  for c in r["gradingResult"]["componentResults"]}
        assert checks["is-json"]["pass"]
        right = said["sentiment"] == r["vars"]["sentiment"]
        assert checks["accuracy"]["pass"] == right
        matrix = [checks[m]["score"] for m in ("true_positives", "false_positives", "false_negatives",
                                                "true_negatives")]
        assert sorted(matrix) == [0, 0, 0, 1], matrix
