"""Long commands for the UI (installs, quantization): output streamed, one at a time, exit codes kept."""

from __future__ import annotations

import sys

import pytest

from webui import bootstrap
from webui.jobs import JobBusy, JobRunner, launch_command
from webui.ui.backends_panel import job_status


def test_a_job_streams_its_output_and_ends_with_its_exit_code():
    runner = JobRunner()
    code = "import sys, time\nfor i in range(3):\n    print('line', i, flush=True)\n    time.sleep(0.2)\nsys.exit(3)"
    updates = list(runner.run([sys.executable, "-c", code], every=0.1))
    assert all(u.returncode is None for u in updates[:-1]) and updates[-1].returncode == 3
    assert updates[-1].log.splitlines() == ["line 0", "line 1", "line 2"]
    assert "Failed: quantizing x (exit code 3)" in job_status("quantizing x", updates[-1]).replace("**", "")
    assert runner.current is None


def test_only_one_job_runs_at_a_time():
    runner = JobRunner()
    first = runner.run([sys.executable, "-c", "import time; time.sleep(1)"], every=0.1)
    assert next(first).returncode is None
    with pytest.raises(JobBusy, match="another job is running"):
        next(runner.run([sys.executable, "-c", "pass"]))
    assert list(first)[-1].ok
    assert list(runner.run([sys.executable, "-c", "pass"], every=0.1))[-1].ok


def test_install_knows_its_extras_and_says_how_to_use_it(capsys):
    assert bootstrap.install_extras([]) == 2
    assert bootstrap.install_extras(["llamacp"]) == 2
    err = capsys.readouterr().err
    assert "unknown: llamacp" in err and "llamacpp" in err and "gptq" in err
    assert launch_command("install", "gptq")[-3:] == [str(bootstrap.ROOT / "launch.py"), "install", "gptq"]


def test_stop_ends_a_running_command():
    runner = JobRunner()
    updates = runner.run([sys.executable, "-c", "import time; time.sleep(60)"], every=0.1)
    next(updates)
    runner.stop()
    assert list(updates)[-1].returncode not in (0, None)
