"""Our promptfoo results export as promptfoo 0.115 itself writes and reads it (#32).

One suite, its outputs fixed (promptfoo's ``echo`` provider gives back the prompt ``{{out}}``, and our rows are
made from the same texts, so no model enters): promptfoo's own ``eval --output`` and our export must give each
row the same pass and score and the same gradingResult.componentResults (an assert-set's own result, with its
asserts' inside it, before theirs). Then our export is stored in promptfoo's database as ``promptfoo eval``
stores a run (tests/e2e/promptfoo_store.js says why not ``promptfoo import``, broken in 0.115) and promptfoo's
``export`` and ``show eval`` commands read it back with the same rows, passes and failures.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.promptfoo_cli import promptfoo, promptfoo_env, promptfoo_eval
from webui import bootstrap
from webui.batch.run.grid import plan
from webui.batch.promptfoo.reader import read_suite
from webui.batch.promptfoo.export import to_promptfoo
from webui.batch.run.results import Generated, result_for

pytestmark = pytest.mark.node

SUITE = """description: export check
prompts: ['{{out}}']
providers: [echo]
defaultTest:
  assert:
    - {type: icontains, value: car, metric: vehicle}
tests:
  - vars: {out: The red car}
    assert: &checks
      - type: assert-set
        threshold: 0.5
        weight: 2
        assert:
          - {type: contains, value: red, weight: 3}
          - {type: contains, value: blue}
      - {type: starts-with, value: The}
      - type: assert-set
        assert:
          - {type: regex, value: '[a-z]+'}
          - {type: not-contains, value: bus}
  - vars: {out: The blue bus}
    assert: *checks
  - vars: {out: A red car}
    assert: *checks
"""


def _ours(tmp_path: Path) -> dict[str, Any]:
    suite = read_suite(SUITE, tmp_path)
    cells = plan(suite.rows, suite.settings, 1, 0)
    rows = [result_for(cell, Generated(cell.row.text, "stop", 1, 1))
            for cell in cells]  # echo's output: the prompt
    return json.loads(to_promptfoo(rows, suite.description, suite.rows, {s.label: s.provider for s in suite.settings}))


def _shape(component: dict[str, Any]) -> tuple[Any, ...]:
    """What both must agree on for a component: pass, score, the assertion's type (None: a set's own result) and,
    for a set, its threshold's reason and its members."""
    assertion = component.get("assertion") or {}
    inner = tuple(_shape(c) for c in component.get("componentResults") or ())
    reason = component["reason"] if inner and "threshold" in component["reason"] else None
    return component["pass"], round(component["score"], 6), assertion.get("type"), reason, inner


def _rows(results: dict[str, Any]) -> list[tuple[Any, ...]]:
    return sorted((r["testIdx"], r["success"], round(r["score"], 6),
                   tuple(_shape(c) for c in r["gradingResult"]["componentResults"])) for r in results["results"])


def test_our_export_has_promptfoos_rows_and_promptfoo_reads_it_back(tmp_path):
    config = tmp_path / "promptfooconfig.yaml"
    config.write_text(SUITE, encoding="utf-8")
    theirs = promptfoo_eval(config, tmp_path / "home")["results"]
    ours = _ours(tmp_path)
    assert _rows(ours["results"]) == _rows(theirs)
    assert [r["success"] for r in sorted(ours["results"]["results"], key=lambda r: r["testIdx"])] == \
        [True, False, False]  # the blue bus fails the set's threshold, the red car starts with A
    assert ours["results"]["results"][0]["testCase"]["assert"][1] == \
        sorted(theirs["results"], key=lambda r: r["testIdx"])[0]["testCase"]["assert"][1]  # the set as written

    exported = tmp_path / "ours.json"
    exported.write_text(json.dumps(ours), encoding="utf-8")
    home = tmp_path / "home"
    node = shutil.which("node")
    assert node is not None
    package = bootstrap.ensure_promptfoo().parent.parent / "promptfoo"
    stored = subprocess.run([node, str(Path(__file__).with_name("promptfoo_store.js")), str(package),
                             str(exported)], capture_output=True, text=True, timeout=120, env=promptfoo_env(home))
    assert stored.returncode == 0, stored.stderr[-2000:]
    eval_id = stored.stdout.strip().splitlines()[-1]
    back = tmp_path / "back.json"
    done = promptfoo("export", eval_id, "-o", str(back), home=home, cwd=tmp_path)
    assert done.returncode == 0 and back.exists(), done.stdout + done.stderr
    read = json.loads(back.read_text(encoding="utf-8"))["results"]
    assert _rows(read) == _rows(ours["results"])
    metrics = {p["provider"]: p["metrics"] for p in read["prompts"]}
    assert metrics["echo"]["testPassCount"] == 1 and metrics["echo"]["testFailCount"] == 2
    shown = promptfoo("show", "eval", eval_id, home=home, cwd=tmp_path)
    assert shown.returncode == 0 and f"Eval {eval_id}" in shown.stdout
    assert "The blue bus" in shown.stdout and "1 prompts" in shown.stdout
