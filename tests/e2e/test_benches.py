"""Every benchmark runs exactly as bench/README.md says (``.venv/bin/python bench/NAME.py``), at a tiny size.

So no bench can break unnoticed; the numbers themselves are not checked here
(speed goals live in the benches, which print ratios measured side by side).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT
from tests.e2e.server import user_data_with_default_model

BENCHES = sorted(p.name for p in (ROOT / "bench").glob("*.py"))


def test_the_benches_are_all_listed_in_the_readme():
    readme = (ROOT / "bench" / "README.md").read_text()
    assert BENCHES and all(f".venv/bin/python bench/{name}" in readme for name in BENCHES)


@pytest.mark.parametrize("name", BENCHES)
def test_no_bench_shadows_a_module(name):
    """Python puts a script's folder first on sys.path: bench/loaders.py once hid the loaders package."""
    stem = name.removesuffix(".py")
    assert importlib.util.find_spec(stem) is None, f"bench/{name} shadows the module '{stem}'"


@pytest.mark.real_model
@pytest.mark.parametrize("name", BENCHES)
def test_bench_runs_quick(name, default_model_dir, tmp_path):
    home = user_data_with_default_model(tmp_path / "data", default_model_dir)
    env = dict(os.environ, LLM_WORKBENCH_HOME=str(home), GRADIO_ANALYTICS_ENABLED="False")
    proc = subprocess.run([sys.executable, f"bench/{name}", "--quick"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("ratio: "), out[-2000:]
