"""fsutil.scratch_folder: each call a new empty folder inside one scratch folder per process, removed at exit."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT
from webui.fsutil import scratch_folder


def test_each_call_is_a_new_empty_folder_in_one_place():
    a, b = scratch_folder("chat-export-"), scratch_folder("chat-export-")
    assert a != b and a.parent == b.parent and a.is_dir() and not any(a.iterdir())
    assert a.name.startswith("chat-export-") and a.parent.name.startswith("llm-workbench-scratch-")


def test_the_scratch_folder_goes_when_the_process_exits():
    code = "from webui.fsutil import scratch_folder; p = scratch_folder('x-'); (p / 'f').write_text('1'); print(p)"
    made = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    folder = Path(made.stdout.strip())
    assert not folder.exists() and not folder.parent.exists()
