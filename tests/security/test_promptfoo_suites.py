"""Hostile promptfoo suites (#43): uploaded to a server, a suite reads only the files uploaded with it (absolute
paths, ``..``, symlinks and globs that lead out are refused, naming the path and the rule); YAML and JSON bombs,
Nunjucks that recurses or loops without end, and catastrophic regexes (ours and promptfoo's JavaScript ones) are
each answered with a message, quickly, never a hang or a crash. Asserts written in the Batch tab or in a prompt
file cannot name files on a server at all."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from webui.batch.run.prompts import load_prompts_text
from webui.batch.asserts.errors import BatchInputError
from webui.batch.asserts.assertion import parse_assert, parse_asserts
from webui.batch.promptfoo.reader import read_suite
from webui.batch.asserts.suite_files import SuiteFiles

SURFACE = "promptfoo suites"
SECRET = "TOP-SECRET-42"
REFUSED = "outside the files uploaded with the suite"


@pytest.fixture
def upload(tmp_path: Path) -> SuiteFiles:
    """An upload folder with a prompt, a var file and a symlink or two that lead out of it; beside it (outside),
    the files a hostile suite reaches for."""
    outside = tmp_path / "server"
    outside.mkdir()
    for name in ("secret.txt", "other/secret2.txt"):
        (outside / name).parent.mkdir(parents=True, exist_ok=True)
        (outside / name).write_text(SECRET)
    (outside / "tests.yaml").write_text(f"- vars: {{q: {SECRET}}}\n")
    (outside / "vars.yaml").write_text(f"q: {SECRET}\n")
    (outside / "check.js").write_text(f"module.exports = () => '{SECRET}';\n")
    (outside / "check.py").write_text(f"def get_assert(output, context):\n    return '{SECRET}'\n")
    (outside / "tools.yaml").write_text(f"- type: function\n  function: {{name: {SECRET}, parameters: {{}}}}\n")
    folder = tmp_path / "upload"
    folder.mkdir()
    (folder / "prompt.txt").write_text("Summarize: {{doc}}")
    (folder / "doc.txt").write_text("a fine document")
    (folder / "link.txt").symlink_to(outside / "secret.txt")
    (folder / "linkdir").symlink_to(outside / "other", target_is_directory=True)
    return SuiteFiles(folder, confined=True)


def _suite(body: str, upload: SuiteFiles) -> str:
    return body.replace("OUT", str(upload.folder.parent / "server"))


ESCAPES = {
    "prompt, absolute path": "prompts: ['file://OUT/secret.txt']",
    "prompt, dot-dot": "prompts: ['file://../server/secret.txt']",
    "prompt, symlink": "prompts: ['file://link.txt']",
    "prompt, glob out by dot-dot": "prompts: ['file://../server/*.txt']",
    "prompt, glob through a symlinked folder": "prompts: ['file://linkdir/*.txt']",
    "prompt, absolute glob": "prompts: ['file://OUT/*.txt']",
    "prompt, mapping form": "prompts:\n  file://../server/secret.txt: leak",
    "prompt, id form": "prompts: [{id: 'file://../server/secret.txt', label: leak}]",
    "var, absolute path": "prompts: ['S: {{doc}}']\ntests: [{vars: {doc: 'file://OUT/secret.txt'}}]",
    "var, file:/// of /etc": "prompts: ['S: {{doc}}']\ntests: [{vars: {doc: 'file:///etc/hostname'}}]",
    "var, dot-dot": "prompts: ['S: {{doc}}']\ntests: [{vars: {doc: 'file://../server/secret.txt'}}]",
    "var, symlink": "prompts: ['S: {{doc}}']\ntests: [{vars: {doc: 'file://link.txt'}}]",
    "var, glob through a symlinked folder": "prompts: ['S: {{doc}}']\ntests: [{vars: {doc: 'file://linkdir/*'}}]",
    "var, defaultTest": "prompts: ['S: {{doc}}']\ndefaultTest: {vars: {doc: 'file://../server/secret.txt'}}\n"
                        "tests: [{vars: {x: 1}}]",
    "vars file": "prompts: ['S: {{q}}']\ntests: [{vars: 'file://../server/vars.yaml'}]",
    "tests file, dot-dot": "prompts: ['S: {{q}}']\ntests: file://../server/tests.yaml",
    "tests file, absolute": "prompts: ['S: {{q}}']\ntests: ['file://OUT/tests.yaml']",
    "scenario tests": "prompts: ['S: {{q}}']\nscenarios: [{config: [{vars: {a: 1}}], tests: "
                      "['file://../server/tests.yaml']}]",
    "javascript assert file": "prompts: [x]\ntests: [{assert: [{type: javascript, "
                              "value: 'file://../server/check.js'}]}]",
    "python assert file": "prompts: [x]\ntests: [{assert: [{type: python, value: 'file://OUT/check.py'}]}]",
    "assert transform file": "prompts: [x]\ntests: [{assert: [{type: contains, value: a, "
                             "transform: 'file://../server/check.js'}]}]",
    "test transform file": "prompts: [x]\ntests: [{options: {transform: 'file://../server/check.js'}, "
                           "assert: [{type: contains, value: a}]}]",
    "rubricPrompt file": "prompts: [x]\ntests: [{assert: [{type: llm-rubric, value: ok, "
                         "rubricPrompt: 'file://../server/secret.txt'}]}]",
    "tools assert file": "prompts: [x]\ntests: [{assert: [{type: is-valid-openai-tools-call, "
                         "value: 'file://../server/tools.yaml'}]}]",
    "provider tools file": "prompts: [x]\nproviders: [{id: 'workbench:m', config: "
                           "{tools: 'file://../server/tools.yaml'}}]",
}


@pytest.mark.parametrize("body", ESCAPES.values(), ids=ESCAPES.keys())
def test_a_path_out_of_the_upload_is_refused_naming_it(body, upload):
    with pytest.raises(BatchInputError, match=REFUSED) as refused:
        read_suite(_suite(body, upload), upload)
    assert SECRET not in str(refused.value)


def test_files_inside_the_upload_are_read_as_before(upload):
    (row,) = read_suite("prompts: ['file://prompt.txt']\ntests: [{vars: {doc: 'file://doc.txt'}}]\n", upload).rows
    assert row.text == "Summarize: a fine document"


def test_the_command_line_keeps_promptfoos_meaning(upload):
    """``launch.py batch`` (a local user on their own files): the same suite reads what promptfoo reads."""
    free = SuiteFiles(upload.folder)
    (row,) = read_suite("prompts: ['S: {{doc}}']\ntests: [{vars: {doc: 'file://../server/secret.txt'}}]", free).rows
    assert row.text == f"S: {SECRET}"


LAUGHS = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{b}: &{b} [{', '.join([f'*{a}'] * 9)}]\n" for a, b in zip("abcdefgh", "bcdefghi"))

BOMBS = {
    "billion laughs in the config": ("prompts: [x]\n" + LAUGHS.replace("a: &a", "tests: [{vars: {q: &a").replace(
        "]\nb:", "]}}]\nb:", 1), "values"),
    "an alias inside its own anchor": ("prompts: [x]\ntests: &t [*t]\n", "contains itself"),
    "YAML nested 20,000 deep": ("prompts: [x]\ntests: " + "[" * 20000 + "]" * 20000 + "\n", "deeper"),
    "JSON tests file nested 20,000 deep": ("prompts: ['{{q}}']\ntests: file://deep.json\n", "deeper"),
    "JSONL tests line nested 20,000 deep": ("prompts: ['{{q}}']\ntests: file://deep.jsonl\n", "deeper"),
    "billion laughs in a tests file": ("prompts: ['{{q}}']\ntests: file://laughs.yaml\n", "values"),
}


@pytest.mark.parametrize("body, said", BOMBS.values(), ids=BOMBS.keys())
def test_yaml_and_json_bombs_are_refused_quickly(body, said, upload):
    folder = upload.folder
    (folder / "deep.json").write_text("[" * 20000 + "]" * 20000)
    (folder / "deep.jsonl").write_text("[" * 20000 + "]" * 20000 + "\n")
    (folder / "laughs.yaml").write_text(LAUGHS)
    started = time.monotonic()
    with pytest.raises(BatchInputError, match=said):
        read_suite(body, upload)
    assert time.monotonic() - started < 30


TEMPLATES = {
    "a macro that calls itself": ("{% macro r(n) %}{{ r(n) }}{% endmacro %}{{ r(1) }}", "calls itself"),
    "loops over loops": ("{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}",
                         "was stopped"),
    "a text repeated a billion times": ("{{ 'x' * 1000000000 }}", "more than"),
    "an include of a server file": ("{% include '/etc/passwd' %}", "loader"),
    "Python internals": ("{{ ''.__class__.__mro__ }}", "unsafe"),
}


@pytest.mark.parametrize("template, said", TEMPLATES.values(), ids=TEMPLATES.keys())
def test_hostile_nunjucks_is_stopped_with_a_message(template, said, upload, monkeypatch):
    monkeypatch.setattr("webui.batch.promptfoo.nunjucks.RENDER_SECONDS", 1.0)
    started = time.monotonic()
    with pytest.raises(BatchInputError, match=said):
        read_suite(f"prompts: [{json.dumps(template)}]\ntests: [{{vars: {{q: hi}}}}]\n", upload)
    assert time.monotonic() - started < 20


@pytest.mark.parametrize("written", ["regex:(a|aa)+$", "not-regex:(a|aa)+$"], ids=["ours", "ours, negated"])
def test_our_catastrophic_regex_is_stopped_and_fails(written, monkeypatch):
    monkeypatch.setattr("webui.batch.asserts.kinds.REGEX_SECONDS", 0.5)
    started = time.monotonic()
    result = parse_assert(written).check("a" * 40 + "b")
    assert not result.passed and "stopped" in result.detail
    assert time.monotonic() - started < 15


def test_promptfoos_catastrophic_regex_is_stopped_and_fails(upload):
    (row,) = read_suite("prompts: [x]\ntests: [{assert: [{type: regex, value: '^(a+)+$'}]}]\n", upload).rows
    started = time.monotonic()
    result = row.asserts[0].check("a" * 40 + "b")
    assert not result.passed and "stopped" in result.detail
    assert time.monotonic() - started < 30


NAMED_FILES = {
    "javascript file, absolute": "javascript:file:///etc/check.js",
    "javascript file, relative": "not-javascript:file://check.js:fn",
    "python file": "python:/etc/check.py",
    "python file:// with a function": "python:file://../x.py:get_assert",
    "dict with a transform file": {"type": "contains", "value": "a", "transform": "file:///etc/t.js"},
    "dict javascript file": {"type": "javascript", "value": "file://../../check.js"},
}


@pytest.mark.parametrize("spec", NAMED_FILES.values(), ids=NAMED_FILES.keys())
def test_an_assert_of_the_batch_tab_cannot_name_a_file_on_a_server(spec):
    with pytest.raises(BatchInputError, match="cannot read files"):
        parse_asserts([spec], "asserts for all prompts", files_allowed=False)


def test_a_prompt_file_cannot_name_an_assert_file_on_a_server():
    line = json.dumps({"prompt": "hi", "assert": ["javascript:file:///etc/check.js"]})
    with pytest.raises(BatchInputError, match="cannot read files"):
        load_prompts_text("p.jsonl", line, files_allowed=False)
    assert parse_asserts(["javascript:output.length > 1"], files_allowed=False)  # inline code is fine
