"""The type checker over loaders/ and webui/ (#31): mypy, configured in pyproject.toml's [tool.mypy], finds nothing.

A cold run (no .mypy_cache) took 35-95 s on two shared cores; a warm one 5 s.
"""

import subprocess
import sys

from webui import bootstrap


def test_mypy_finds_no_errors():
    done = subprocess.run([sys.executable, "-m", "mypy"], cwd=bootstrap.ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, f"mypy found type errors:\n{done.stdout}{done.stderr}"
