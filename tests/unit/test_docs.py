"""The docs list every sampling parameter and the README keeps exactly its two set-up commands."""

from __future__ import annotations

import re

from tests.conftest import ROOT
from webui.engine.params import param_fields


def test_user_guide_documents_every_parameter_with_its_range():
    guide = (ROOT / "docs" / "user-guide.md").read_text()
    for name, _, spec, help_text in param_fields():
        row = next((line for line in guide.splitlines() if line.startswith(f"| `{name}` |")), None)
        assert row is not None, name
        assert help_text in row
        if spec is not None:
            assert spec.range_text() in row, name


def test_readme_has_the_two_setup_commands_and_ci_runs_the_test_one():
    readme = (ROOT / "README.md").read_text()
    setup = readme.split("## Set up", 1)[1].split("\n## ", 1)[0]
    assert re.findall(r"```sh\n(.*?)\n```", setup, re.S) == ["python launch.py", "python -m tests"]
    assert "exec python -m tests" in (ROOT / ".ci" / "run").read_text()
