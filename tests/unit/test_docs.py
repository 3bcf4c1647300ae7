"""The README keeps exactly its two set-up commands (the parameter table is checked in test_param_surfaces)."""

from __future__ import annotations

import re

from tests.conftest import ROOT


def test_readme_has_the_two_setup_commands_and_ci_runs_the_test_one():
    readme = (ROOT / "README.md").read_text()
    setup = readme.split("## Set up", 1)[1].split("\n## ", 1)[0]
    assert re.findall(r"```sh\n(.*?)\n```", setup, re.S) == ["python launch.py", "python -m tests"]
    assert "exec python -m tests" in (ROOT / ".ci" / "run").read_text()
