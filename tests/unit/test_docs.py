"""The README keeps exactly its two set-up commands (the parameter table is checked in test_param_surfaces), and the
architecture page names only files that are there."""

from __future__ import annotations

import re

from tests.conftest import ROOT


def test_readme_has_the_two_setup_commands_and_ci_runs_the_test_one():
    readme = (ROOT / "README.md").read_text()
    setup = readme.split("## Set up", 1)[1].split("\n## ", 1)[0]
    assert re.findall(r"```sh\n(.*?)\n```", setup, re.S) == ["python launch.py", "python -m tests"]
    assert "exec python -m tests" in (ROOT / ".ci" / "run").read_text()


def test_where_a_change_goes_names_files_that_exist():
    doc = (ROOT / "docs" / "architecture.md").read_text()
    section = doc.split("## Where a change goes", 1)[1].split("\n## ", 1)[0]
    named = {m for m in re.findall(r"`([\w./<>-]+)`", section) if "/" in m and "<" not in m}
    assert len(named) > 20  # the section is read at all
    missing = sorted(m for m in named if not (ROOT / m).exists())
    assert not missing, f"docs/architecture.md 'Where a change goes' names files that are not there: {missing}"
