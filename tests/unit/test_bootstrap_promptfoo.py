"""bootstrap.ensure_promptfoo: npm installs the pinned promptfoo once into a folder; later calls only look."""

from __future__ import annotations

import json
import subprocess

import pytest

from webui import bootstrap


def test_without_npm_the_error_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setattr(bootstrap.shutil, "which", lambda name: None)
    with pytest.raises(SystemExit, match=r"need npm .*promptfoo 0\.115\.0.*apt-get install -y nodejs npm"):
        bootstrap.ensure_promptfoo(tmp_path / "promptfoo")


def test_it_installs_once_with_npm_and_then_only_looks(tmp_path, monkeypatch):
    folder, ran = tmp_path / "promptfoo", []

    def npm(cmd, check, cwd, env):
        ran.append((cmd[1:], cwd, env.get("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD")))
        if cmd[1] == "install":  # what npm leaves behind
            bootstrap.promptfoo_bin(folder).parent.mkdir(parents=True, exist_ok=True)
            bootstrap.promptfoo_bin(folder).write_text("#!/bin/sh\n")
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(bootstrap.shutil, "which", lambda name: "/usr/bin/npm")
    monkeypatch.setattr(bootstrap.subprocess, "run", npm)
    assert bootstrap.ensure_promptfoo(folder) == folder / "node_modules" / ".bin" / "promptfoo"
    assert [r[0][:2] for r in ran] == [["install", "--no-audit"], ["rebuild", "better-sqlite3"]]
    assert "--ignore-scripts" in ran[0][0] and "promptfoo@0.115.0" in ran[0][0]
    assert all(cwd == folder and skip == "1" for _, cwd, skip in ran)
    assert json.loads((folder / "package.json").read_text())["private"] is True
    assert bootstrap.ensure_promptfoo(folder) == bootstrap.promptfoo_bin(folder) and len(ran) == 2  # no npm again

    (folder / ".workbench-promptfoo.json").write_text(json.dumps({"promptfoo": "0.1.0"}))  # another pin: again
    bootstrap.promptfoo_bin(folder).unlink()
    bootstrap.ensure_promptfoo(folder)
    assert len(ran) == 4
