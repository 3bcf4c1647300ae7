"""Our promptfoo reader and asserts against promptfoo 0.115 itself, on the same outputs (issue #32).

Every case in tests/data/promptfoo/agreement/cases.yaml (an output and an assert in promptfoo's dict form)
becomes one test of ONE promptfoo config whose provider is promptfoo's ``echo`` and whose prompt is
``{{output}}``, so the output is fixed and no model's randomness enters. promptfoo runs it once (Node, offline,
see tests/e2e/promptfoo_cli.py); our side reads each case's test with ``read_config`` and checks its asserts
on the very text promptfoo's echo gave back. Each assert's pass/fail, and the test's (weighted) score, must be
the same, except where a case says why the two knowingly differ (a case with an assert-set is compared by the
test's pass and score, since promptfoo lists the set's own result beside its asserts'). Cases of kinds we do
not read yet are counted and named, not compared.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import ROOT
from tests.e2e.promptfoo_cli import promptfoo, promptfoo_eval
from webui import bootstrap
from webui.batch.asserts.types import AssertResult, Observed, row_score
from webui.batch.asserts.errors import BatchInputError
from webui.batch.promptfoo.reader import read_config, supported
from webui.batch.run.results import asserts_pass

pytestmark = pytest.mark.node

DATA = ROOT / "tests" / "data" / "promptfoo" / "agreement"
FEATURES = {"python context (vars)": lambda: "variables" in {f.name for f in fields(Observed)}}
"""Features a case may wait for (its ``pending``), each with how to tell it has landed."""


def _cases() -> list[dict[str, Any]]:
    cases = yaml.safe_load((DATA / "cases.yaml").read_text(encoding="utf-8"))
    ids = [c["id"] for c in cases]
    assert len(ids) == len(set(ids)), "case ids must be unique"
    return cases


def _asserts(case: dict[str, Any]) -> list[dict[str, Any]]:
    given = case["assert"]
    return given if isinstance(given, list) else [given]


def _test(case: dict[str, Any]) -> dict[str, Any]:
    return {"description": case["id"], "vars": {"output": case["output"], **case.get("vars", {})},
            "assert": _asserts(case)}


def _config(tests: list[dict[str, Any]]) -> str:
    return yaml.safe_dump({"description": "promptfoo agreement", "prompts": ["{{output}}"], "providers": ["echo"],
                           "tests": tests}, allow_unicode=True, sort_keys=False)


def _promptfoo_verdicts(results: dict[str, Any], cases: list[dict[str, Any]]
                        ) -> dict[str, tuple[str, list[Any], float | None, bool | None]]:
    """Case id -> (the output promptfoo's echo gave back, each assert's (pass, reason) or ("error", why) for all,
    the test's score, the test's pass)."""
    out = {}
    for r in results["results"]["results"]:
        case = cases[r["testIdx"]]
        components = (r.get("gradingResult") or {}).get("componentResults") or []
        if len(components) == len(_asserts(case)):
            verdicts: list[Any] = [(c["pass"], c.get("reason", "")) for c in components]
        else:
            verdicts = [("error", r.get("error") or "no result")] * len(_asserts(case))
        out[case["id"]] = ((r.get("response") or {}).get("output", case["output"]), verdicts, r.get("score"),
                           r.get("success"))
    return out


def _our_verdicts(case: dict[str, Any], output: str, base: Path) -> list[AssertResult] | str:
    """Each assert's result as our reader and asserts judge ``output``; the refusal's text if our reader refuses
    the case's test."""
    try:
        _, rows, _ = read_config(_config([_test(case)]), base)
    except BatchInputError as exc:
        return str(exc)
    assert len(rows) == 1
    extra = {"variables": dict(rows[0].variables)} if FEATURES["python context (vars)"]() else {}
    seen = Observed(output, **extra)
    return [a.check(seen) for a in rows[0].asserts]


def _our_set_verdict(case: dict[str, Any], output: str, base: Path) -> tuple[bool, float | None]:
    """(the test's pass, its score) as our reader and asserts judge ``output``: for cases with an assert-set,
    whose own verdict promptfoo gives beside its asserts'."""
    _, rows, _ = read_config(_config([_test(case)]), base)
    results = [a.check(Observed(output, variables=dict(rows[0].variables))) for a in rows[0].asserts]
    return asserts_pass(results, rows[0].sets), row_score(results)


def _lacked_kind(case: dict[str, Any]) -> str | None:
    kinds = {str(a["type"]).removeprefix("not-") for a in _asserts(case)}
    return next((k for k in sorted(kinds) if k not in supported()), None)


def test_promptfoo_itself_is_installed_at_the_pinned_version(tmp_path):
    done = promptfoo("--version", home=tmp_path / "home", cwd=tmp_path, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == bootstrap.PROMPTFOO_VERSION == "0.115.0"
    assert bootstrap.ensure_promptfoo() == bootstrap.promptfoo_bin()  # a second call: already there, no npm


def test_our_asserts_agree_with_promptfoo_on_the_same_outputs(tmp_path):
    cases = _cases()
    for source in DATA.glob("*.py"):
        shutil.copy(source, tmp_path / source.name)
    config = tmp_path / "promptfooconfig.yaml"
    config.write_text(_config([_test(c) for c in cases]), encoding="utf-8")
    theirs = _promptfoo_verdicts(promptfoo_eval(config, tmp_path / "home"), cases)
    assert set(theirs) == {c["id"] for c in cases}, "promptfoo gave no result for some cases"

    agree, compared, known, lacked, pending = 0, 0, [], {}, []
    problems, kinds = [], {}
    for case in cases:
        output, their, their_score, their_pass = theirs[case["id"]]
        if any(a["type"] == "assert-set" for a in _asserts(case)):  # compared by the test's verdict and score
            compared += 1
            mine, score = _our_set_verdict(case, output, tmp_path)
            kinds.setdefault("assert-set", set()).add(their_pass)
            if mine == their_pass and score == pytest.approx(their_score):
                agree += 1
            else:
                problems.append(f"{case['id']}: promptfoo says {their_pass} (score {their_score}), ours {mine} "
                                f"(score {score})")
            continue
        lacking = _lacked_kind(case)
        if case.get("pending") and not FEATURES[case["pending"]]():
            pending.append(case["id"])
            continue
        results = _our_verdicts(case, output, tmp_path)
        if isinstance(results, str):  # our reader refused the case's test
            if lacking:
                lacked.setdefault(lacking, []).append(case["id"])
                continue
            ours: list[Any] = [("refused", results)] * len(their)
        else:
            ours = [(r.passed, r.detail) for r in results]
            score = row_score(results)  # None where every weight is 0 (promptfoo says 0 there)
            if score is not None and not case.get("differs") and score != pytest.approx(their_score):
                problems.append(f"{case['id']}: the test's score is {their_score} in promptfoo, {score} ours")
        for i, ((mine, my_why), (pf, pf_why)) in enumerate(zip(ours, their)):
            compared += 1
            kinds.setdefault(str(_asserts(case)[i]["type"]).removeprefix("not-"), set()).add(pf)
            same = mine == pf or (mine == "refused" and pf in ("error", False))  # we refuse what promptfoo fails
            if same and case.get("differs"):
                problems.append(f"{case['id']}: marked as differing ({case['differs']}) but both say {pf}; "
                                "drop its differs note")
            elif not same and case.get("differs"):
                known.append(f"{case['id']}: promptfoo {pf}, ours {mine}: {' '.join(case['differs'].split())}")
            elif same:
                agree += 1
            else:
                problems.append(f"{case['id']} (assert {i + 1}, output {output!r}): promptfoo says {pf} "
                                f"({pf_why}), ours {mine} ({my_why})")
    summary = (f"{agree} of {compared} asserts agree ({len(kinds)} kinds: {', '.join(sorted(kinds))}; "
               f"{len(known)} known differences; kinds we lack: "
               f"{', '.join(f'{k} ({len(v)} cases)' for k, v in sorted(lacked.items())) or 'none'}; "
               f"waiting for a feature: {', '.join(pending) or 'none'})")
    print(summary, *("known: " + k for k in known), sep="\n")
    assert not problems, summary + "\n" + "\n".join(problems)
    assert agree + len(known) == compared and compared >= 100
    one_sided = {k: v for k, v in kinds.items() if not {True, False} <= v}
    assert not one_sided, f"kinds whose cases only pass or only fail in promptfoo: {one_sided}"


EXAMPLES = ROOT / "tests" / "data" / "promptfoo" / "examples"


def _echoed_prompts(tmp_path: Path, name: str, prompts: list[Any] | None = None) -> tuple[list[Any], list[Any]]:
    """promptfoo's example ``name`` (its ``prompts`` replaced where given) run by promptfoo 0.115 on its echo
    provider, and read by our reader: each side's (prompt label, the prompt as sent: a text or a chat's messages),
    in the order promptfoo gives its results."""
    folder = tmp_path / name
    shutil.copytree(EXAMPLES / name, folder)
    config = yaml.safe_load((folder / "promptfooconfig.yaml").read_text(encoding="utf-8"))
    if prompts is not None:
        config["prompts"] = prompts
    ours_text = yaml.safe_dump(config, allow_unicode=True, sort_keys=False)
    (folder / "promptfooconfig.yaml").write_text(yaml.safe_dump({**config, "providers": ["echo"]}), encoding="utf-8")
    results = promptfoo_eval(folder / "promptfooconfig.yaml", home=tmp_path / "home")["results"]["results"]
    results.sort(key=lambda r: (r["testIdx"], r["promptIdx"]))

    def sent(text: str) -> Any:
        return [dict(m) for m in yaml.safe_load(text)] if text.lstrip().startswith("[") else text

    theirs = [(r["prompt"]["label"], sent(r["response"]["output"])) for r in results]
    _, rows, _ = read_config(ours_text, folder)
    ours = [(row.origin["prompt"], [dict(m) for m in row.messages] if row.messages else row.text) for row in rows]
    return theirs, ours


def test_csv_prompt_files_read_as_promptfoo_reads_them(tmp_path):
    """promptfoo's csv-prompts example, all four of its CSV files: the same prompts, labels and rendered texts."""
    files = ["file://prompts.csv", "file://single-column.csv", "file://two-column.csv", "file://no-header.csv"]
    theirs, ours = _echoed_prompts(tmp_path, "csv-prompts", files)
    assert len(theirs) == 3 * 20 and ours == theirs


@pytest.mark.parametrize("name", ["nunjucks-custom-filters", "simple-csv"])
def test_filters_render_as_promptfoo_renders_them(tmp_path, name):
    """A suite's own nunjucksFilters (a JavaScript file) and promptfoo's built-in ``load`` filter: the same
    rendered prompts as promptfoo 0.115 gives (labels aside: promptfoo labels a prompt of a file of several by
    its path and text, we by the file's name and number)."""
    theirs, ours = _echoed_prompts(tmp_path, name)
    assert len(theirs) in (4, 8) and [text for _, text in ours] == [text for _, text in theirs]


def test_a_prompts_json_schema_reply_is_the_same_object_and_verdicts_in_promptfoo(open_api, services,
                                                                                 default_model_dir, tmp_path):
    """promptfoo's f-score example (#49; see its SOURCE.md), run by promptfoo 0.115 against our API and by our batch
    runner on the same default model and seed: its prompt's own json_schema response_format constrains both
    replies, and both read each reply as its parsed JSON (promptfoo's openai chat provider JSON.parses it), so the
    outputs are the same objects and every assert (is-json, the javascript asserts on ``output.sentiment``, which
    were undefined while our reply stayed text) gives the same pass/fail and score; the named scores (each metric's
    scores summed, its weight-0 asserts too) and the derived metrics over them are promptfoo's."""
    from tests.engine.test_batch_runner import run
    from webui.batch.promptfoo.export import to_promptfoo
    from webui.batch.promptfoo.reader import read_suite
    from webui.batch.run.grid import GridSpec
    from webui.batch.run.runner import BatchJob

    folder = tmp_path / "f-score"
    shutil.copytree(EXAMPLES / "f-score", folder)
    config = yaml.safe_load((folder / "promptfooconfig.yaml").read_text(encoding="utf-8"))
    base = open_api
    config["providers"] = [{"id": "openai:chat:SmolLM2-135M-Instruct", "config": {
        "apiBaseUrl": base, "apiKey": "unused", "temperature": 0.0001, "seed": 7, "max_tokens": 96}}]
    (folder / "promptfooconfig.yaml").write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    evaluated = promptfoo_eval(folder / "promptfooconfig.yaml", tmp_path / "home")["results"]
    theirs, theirs_prompts = sorted(evaluated["results"], key=lambda r: r["testIdx"]), evaluated["prompts"]
    assert 2 not in [r["failureReason"] for r in theirs], theirs[0].get("error")  # 2: the provider failed

    services.models.load(services.models.catalog.entry_for_path(default_model_dir))
    suite = read_suite((folder / "promptfooconfig.yaml").read_text(encoding="utf-8"), folder)
    rows = run(services, BatchJob("f-score", suite.rows, GridSpec([], {}), settings=suite.settings)).rows()
    assert len(rows) == len(theirs) == 4
    assert all(isinstance(t["response"]["output"], dict) for t in theirs), theirs[0]["response"]
    assert [json.loads(r.output) for r in rows] == [t["response"]["output"] for t in theirs]
    ours = [[(a.passed, a.value) for a in r.asserts] for r in rows]
    assert ours == [[(c["pass"], c["score"]) for c in t["gradingResult"]["componentResults"]] for t in theirs]
    exported = json.loads(to_promptfoo(rows, "f-score", suite.rows, None, suite.options.derived_metrics))["results"]
    by_test = sorted(exported["results"], key=lambda r: r["testIdx"])
    assert [r["namedScores"] for r in by_test] == [t["namedScores"] for t in theirs]  # weight 0 counts too
    (column,) = exported["prompts"]
    assert column["metrics"]["namedScores"] == pytest.approx(theirs_prompts[0]["metrics"]["namedScores"])
    assert column["metrics"]["namedScoresCount"] == theirs_prompts[0]["metrics"]["namedScoresCount"]


VAR_FILES = {"a.txt": "\n  plain text  \n\n", "b.json": '{\n  "k": [1, 2.0],\n  "s": "é"\n}\n',
             "c.yaml": "k: [1, 2.0]\ns: é\nnested: {x: null, t: true}\nday: 2024-01-02\n", "d.yml": "just text\n",
             "e.md": "# Title\n\nbody\n"}


def test_file_vars_are_loaded_as_promptfoo_loads_them(tmp_path):
    """``vars: {x: file://...}`` (#49): promptfoo 0.115 on its echo provider and our reader give the same prompt
    and the same vars to asserts: a text (.txt, .md) and a .json file's text trimmed (the JSON is not parsed), a
    .yaml/.yml file's data as compact JSON (JSON.stringify)."""
    for name, text in VAR_FILES.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    names = {name.split(".")[0]: f"file://{name}" for name in VAR_FILES}
    seen = " && ".join(f"context.vars.{v} === {json.dumps(k)}" for v, k in (("a", "plain text"),
                                                                           ("d", '"just text"')))
    config = {"prompts": ["|".join(f"{{{{{v}}}}}" for v in names)], "providers": ["echo"],
              "tests": [{"vars": names, "assert": [{"type": "javascript", "value": seen}]}]}
    text = yaml.safe_dump(config, allow_unicode=True, sort_keys=False)
    (tmp_path / "promptfooconfig.yaml").write_text(text, encoding="utf-8")
    (theirs,) = promptfoo_eval(tmp_path / "promptfooconfig.yaml", home=tmp_path / "home")["results"]["results"]
    _, (row,), _ = read_config(text, tmp_path)
    assert row.text == theirs["response"]["output"]
    assert row.text.split("|")[1:3] == ['{\n  "k": [1, 2.0],\n  "s": "é"\n}',
                                        '{"k":[1,2],"s":"é","nested":{"x":null,"t":true},"day":"2024-01-02T00:00:00.000Z"}']
    assert theirs["success"], theirs["gradingResult"]
    (check,) = row.asserts  # context.vars as promptfoo's javascript assert sees them
    assert check.check(Observed(row.text, variables=dict(row.variables))).passed


@pytest.fixture(scope="module")
def open_api(tmp_path_factory, default_model_dir):
    """One keyless API server (the API alone) that promptfoo calls in this module's tests; its base URL."""
    from tests.api.conftest import start_api

    context, base, _ = start_api(tmp_path_factory, default_model_dir, key=None)
    with context:
        yield base


def _api_provider(base: str, **config: Any) -> dict[str, Any]:
    """promptfoo's openai chat provider on our API's default model."""
    return {"id": "openai:chat:SmolLM2-135M-Instruct", "config": {"apiBaseUrl": base, "apiKey": "unused", **config}}


def test_context_and_answer_relevance_agree_with_promptfoo_on_the_same_judge(open_api, services,
                                                                              default_model_dir, tmp_path):
    """promptfoo's multilingual-rag example (#49; see its SOURCE.md: 3 of its tests), its context-relevance and
    answer-relevance asserts (its defaultTest's; the others are left out to keep it short), run by promptfoo 0.115
    against our API and by our batch runner, the default model writing the outputs (the same seed) and judging
    them greedily (promptfoo's openai provider sends no temperature 0: its grader samples at 0.0001, seeded) with
    a grader budget of 96 tokens on both sides. Both ask the same prompts (promptfoo's, word
    for word) in free text, so the judge's replies are the same text: context-relevance's score (the share of
    its reply's lines without "Insufficient Information") and pass are promptfoo's exactly. answer-relevance
    reads each of its three replies to the end of its line; promptfoo's grader gets that stop too (promptfoo
    itself reads the whole reply), and its embeddings come from our API's /v1/embeddings, the same model's
    mean-pooled hidden states ours uses, so its mean cosine is the same up to float rounding, and so is its pass
    (promptfoo does not clamp a negative mean at 0; ours does)."""
    from tests.engine.test_batch_runner import run
    from webui.batch.promptfoo.reader import read_suite
    from webui.batch.run.grid import GridSpec
    from webui.batch.run.runner import BatchJob

    folder = tmp_path / "multilingual-rag"
    shutil.copytree(EXAMPLES / "multilingual-rag", folder)
    config = yaml.safe_load((folder / "promptfooconfig.yaml").read_text(encoding="utf-8"))
    kept = ("context-relevance", "answer-relevance")
    config["defaultTest"]["assert"] = [a for a in config["defaultTest"]["assert"] if a["type"] in kept]
    config["tests"] = [{k: v for k, v in test.items() if k != "assert"} for test in config["tests"]]
    base = open_api
    config["providers"] = [_api_provider(base, temperature=0.0001, seed=7, max_tokens=24)]
    grader = _api_provider(base, temperature=0.0001, seed=7, max_tokens=96)  # promptfoo sends no temperature 0
    embedding = {"id": "openai:embedding:SmolLM2-135M-Instruct", "config": {"apiBaseUrl": base, "apiKey": "unused"}}
    theirs_config = json.loads(json.dumps(config))
    theirs_config["defaultTest"]["options"] = {"provider": {"text": grader, "embedding": embedding}}
    for item in theirs_config["defaultTest"]["assert"]:
        if item["type"] == "answer-relevance":  # the question read to its line's end, as ours reads it
            item["provider"] = {"text": {**grader, "config": {**grader["config"], "stop": ["\n"]}},
                                "embedding": embedding}
    (folder / "theirs.yaml").write_text(yaml.safe_dump(theirs_config, sort_keys=False), encoding="utf-8")
    evaluated = promptfoo_eval(folder / "theirs.yaml", tmp_path / "home")["results"]
    theirs = sorted(evaluated["results"], key=lambda r: r["testIdx"])
    assert 2 not in [r["failureReason"] for r in theirs], theirs[0].get("error")  # 2: the provider failed

    services.models.load(services.models.catalog.entry_for_path(default_model_dir))
    suite = read_suite(yaml.safe_dump(config, sort_keys=False), folder)
    rows = run(services, BatchJob("multilingual-rag", suite.rows, GridSpec([], {}), settings=suite.settings,
                                  judge_tokens=96)).rows()
    assert len(rows) == len(theirs) == 3
    assert [r.output for r in rows] == [t["response"]["output"] for t in theirs]  # the same outputs judged
    for row, their in zip(rows, theirs):
        (relevance, answered), (their_relevance, their_answered) = row.asserts, their["gradingResult"][
            "componentResults"]
        assert their_relevance["assertion"]["type"] == "context-relevance"
        assert (relevance.passed, relevance.value) == (their_relevance["pass"], pytest.approx(
            their_relevance["score"])), (relevance.detail, their_relevance["reason"])
        assert answered.passed == their_answered["pass"], (answered.detail, their_answered["reason"])
        assert answered.value == pytest.approx(max(0.0, their_answered["score"]), abs=1e-3), \
            (answered.detail, their_answered["reason"])
    print([(r.asserts[0].value, r.asserts[1].value, r.asserts[1].detail) for r in rows])


def test_a_rubric_prompt_alone_grades_llm_rubric_in_promptfoo_and_here(open_api, services, default_model_dir,
                                                                       tmp_path):
    """promptfoo's custom-grading-prompt example (#49 item 5; see its SOURCE.md): an llm-rubric with no value,
    graded by ``defaultTest.options.rubricPrompt`` alone (a chat: a system message with {{x}}, {{y}}, {{z}}, a user
    message with {{ output }}), run by promptfoo 0.115 against our API and by our batch runner, the default model
    writing the output (the same seed) and judging it with 96 tokens. Exact agreement cannot be expected: promptfoo
    sends the rubric prompt's two messages as they are and reads the first JSON object of a free reply; ours
    sends their contents as one message with the JSON answer asked for appended, constrained to it. What must
    hold: the same output is graded on both sides by that prompt alone (no value is asked for), each reads a
    verdict (promptfoo's grader is given our verdict's JSON schema as its response_format, so its reply is JSON
    too), and, the prompt saying "always pass the test", both pass."""
    from tests.engine.test_batch_runner import run
    from webui.batch.promptfoo.reader import read_suite
    from webui.batch.run.grid import GridSpec
    from webui.batch.run.judge import VERDICT_SCHEMA
    from webui.batch.run.runner import BatchJob

    folder = tmp_path / "custom-grading-prompt"
    shutil.copytree(EXAMPLES / "custom-grading-prompt", folder)
    config = yaml.safe_load((folder / "promptfooconfig.yaml").read_text(encoding="utf-8"))
    base = open_api
    config["providers"] = [_api_provider(base, temperature=0.0001, seed=7, max_tokens=24)]
    schema = {k: v for k, v in VERDICT_SCHEMA.items() if k != "x-guidance"}
    grader = _api_provider(base, temperature=0.0001, seed=7, max_tokens=96, response_format={
        "type": "json_schema", "json_schema": {"name": "verdict", "schema": schema}})
    theirs_config = json.loads(json.dumps(config))
    theirs_config["defaultTest"]["options"]["provider"] = grader
    (folder / "theirs.yaml").write_text(yaml.safe_dump(theirs_config, sort_keys=False), encoding="utf-8")
    (their,) = promptfoo_eval(folder / "theirs.yaml", tmp_path / "home")["results"]["results"]
    assert their["failureReason"] != 2, their.get("error")  # 2: the provider failed

    services.models.load(services.models.catalog.entry_for_path(default_model_dir))
    suite = read_suite(yaml.safe_dump(config, sort_keys=False), folder)
    (row,) = run(services, BatchJob("custom-grading-prompt", suite.rows, GridSpec([], {}), settings=suite.settings,
                                    judge_tokens=96)).rows()
    assert row.output == their["response"]["output"]
    (graded,), (their_graded,) = row.asserts, their["gradingResult"]["componentResults"]
    assert their_graded["assertion"]["type"] == "llm-rubric" and graded.label == "llm-rubric"
    assert "Could not extract JSON" not in their_graded["reason"] and "could not answer" not in graded.detail
    assert "not the JSON asked for" not in graded.detail
    assert graded.passed and their_graded["pass"], (graded.detail, their_graded["reason"])
