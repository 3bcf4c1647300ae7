"""webui.batch.asserts.js: JavaScript run with promptfoo's calling convention (inline expressions, declarations then an
expression, bodies with return, CommonJS files with a function name), in an engine that cannot hang, exhaust
memory or reach files, modules or the network."""

from __future__ import annotations

import time

import pytest

from webui.batch.asserts.errors import BatchInputError, ScriptError
from webui.batch.asserts.js import call_javascript, check_javascript, function_body, run_javascript

CONTEXT = {"prompt": "Name a fruit.", "vars": {"topic": "bananas", "min": "3"}, "config": {"limit": 5}}


def test_an_expression_a_declaration_then_an_expression_and_a_body_with_return():
    assert call_javascript("output.length < 100", "short", CONTEXT) == ("inline javascript", "boolean", True)
    # the ; inside the string does not end a statement, promptfoo's rule
    assert function_body('const s = output.trim(); s === "a;b";') == 'const s = output.trim(); return s === "a;b"'
    assert call_javascript('const s = output.trim(); s === "a;b"', " a;b ", CONTEXT)[2] is True
    body = "let n = 0;\nif (output.includes(context.vars.topic)) n += 0.5;\nreturn n + context.config.limit / 10;"
    assert call_javascript(body, "I like bananas", CONTEXT)[1:] == ("number", 1.0)
    assert call_javascript("context.prompt + '|' + output", "x", CONTEXT)[2] == "Name a fruit.|x"


def test_a_file_with_a_function_name_a_default_export_and_a_missing_name(tmp_path):
    path = tmp_path / "checks.js"
    path.write_text("const helper = (s) => s.toLowerCase();\n"
                    "module.exports = {\n"
                    "  mentionsTopic: (output, context) => helper(output).includes(context.vars.topic),\n"
                    "  broken: function (output) {\n    throw new Error('no ' + output);\n  },\n"
                    "};\n")
    assert call_javascript(f"file://{path}:mentionsTopic", "BANANAS!", CONTEXT) == (
        "checks.js:mentionsTopic", "boolean", True)
    with pytest.raises(ScriptError, match=r"checks.js:broken failed: Error: no x \(line 5\)"):
        call_javascript(f"file://{path}:broken", "x", CONTEXT)
    with pytest.raises(ScriptError, match="checks.js has no exported function 'other'"):
        call_javascript(f"file://{path}:other", "x", CONTEXT)
    with pytest.raises(ScriptError, match=r"must export a function \(module.exports"):
        call_javascript(f"file://{path}", "x", CONTEXT)
    single = tmp_path / "single.js"
    single.write_text("module.exports = async (output, context) => output.length > context.config.limit;\n")
    assert call_javascript(f"file://{single}", "longer than five", CONTEXT)[2] is True
    default = tmp_path / "default.js"
    default.write_text("module.exports.default = function (output) { return 0.25; };\n")
    assert call_javascript(f"file://{default}", "x", CONTEXT)[2] == 0.25


def test_results_become_outcomes_a_bool_a_score_and_a_grading_result():
    assert run_javascript("output.includes('Paris')", 5, "Paris", CONTEXT) == (
        True, "inline javascript returned true", 1.0, False)
    assert run_javascript("output.length / 10", 5, "abc", CONTEXT) == (True, "inline javascript scored it",
                                                                      pytest.approx(0.3), True)
    graded = "({pass: output === 'yes', score: 0.4, reason: 'said ' + output})"
    assert run_javascript(graded, 5, "no", CONTEXT) == (False, "said no", 0.4, False)
    assert run_javascript("Promise.resolve(output === 'x')", 5, "x", CONTEXT)[0] is True
    nothing = run_javascript("let a = 1;\nif (a > 2) return true;", 5, "x", CONTEXT)
    assert nothing[:2] == (False, "inline javascript returned nothing (undefined); return true/false, a score, "
                                  "or {pass, score, reason}")
    odd = run_javascript("'yes'", 5, "x", CONTEXT)
    assert not odd[0] and "must return true/false, a score" in odd[1]
    function = run_javascript("(output) => true", 5, "x", CONTEXT)  # a function has no JSON
    assert not function[0] and function[1].endswith("got null")


def test_an_error_names_the_line_and_the_message():
    passed, why, score, _ = run_javascript("const a = 1;\nconst b = a + missing;\nreturn b;", 5, "x", CONTEXT)
    assert (passed, why, score) == (False, "inline javascript failed: ReferenceError: 'missing' is not defined "
                                           "(line 2)", 0.0)
    thrown = run_javascript("if (output) {\n  throw new Error('This is an error');\n}\nreturn true;", 5, "x", CONTEXT)
    assert thrown[1] == "inline javascript failed: Error: This is an error (line 2)"
    deep = run_javascript("(function f() { return f() + 1; })()", 5, "x", CONTEXT)
    assert deep[1] == "inline javascript failed: too much recursion (the stack overflowed)"


def test_a_script_that_never_ends_is_stopped_at_its_time_limit():
    started = time.monotonic()
    passed, why, _, _ = run_javascript("while (true) {}\nreturn true;", 0.5, "x", CONTEXT)
    assert (passed, why) == (False, "inline javascript took more than 0.5 s and was stopped")
    assert time.monotonic() - started < 5
    endless = run_javascript("(async () => { while (true) await null; })()", 0.5, "x", CONTEXT)
    assert endless[1] == "inline javascript took more than 0.5 s and was stopped"
    hanging = run_javascript("new Promise(() => {})", 0.5, "x", CONTEXT)
    assert hanging[1] == "inline javascript returned a promise that never settled"


def test_a_script_cannot_exhaust_memory_or_reach_files_modules_or_the_network():
    hungry = run_javascript("const a = [];\nwhile (true) a.push(new Array(100000).fill(1));", 10, "x", CONTEXT)
    assert hungry[1] == "inline javascript ran out of memory (the limit is 128 MiB) and was stopped"
    fs = run_javascript("require('fs').readFileSync('/etc/hostname')", 5, "x", CONTEXT)
    assert "require('fs') is not available" in fs[1]
    imported = run_javascript("import('/etc/hostname').then(() => true)", 5, "x", CONTEXT)
    assert imported[1] == "inline javascript failed: ReferenceError: could not load module '/etc/hostname'"
    assert call_javascript("typeof fetch + typeof XMLHttpRequest + typeof std + typeof os", "x", CONTEXT)[2] == \
        "undefined" * 4
    assert call_javascript("console.log('dropped');\nreturn output;", "x", CONTEXT)[2] == "x"


def test_bad_javascript_is_refused_before_a_batch_runs(tmp_path):
    with pytest.raises(BatchInputError, match=r"javascript: the code does not compile: SyntaxError: .*\(line 2\)"):
        check_javascript("const a = 1;\nconst = 2;\nreturn a;", {})
    with pytest.raises(BatchInputError, match="javascript needs code or a file"):
        check_javascript("  ", {})
    with pytest.raises(BatchInputError, match="there is no file"):
        check_javascript(f"file://{tmp_path / 'missing.js'}", {})
    (tmp_path / "esm.mjs").write_text("export default () => true;\n")
    with pytest.raises(BatchInputError, match=r"ES modules \(.mjs\) are not supported"):
        check_javascript(f"file://{tmp_path / 'esm.mjs'}", {})
    (tmp_path / "broken.js").write_text("module.exports = (output) => {\n  return output ===;\n};\n")
    with pytest.raises(BatchInputError, match=r"broken.js: the code does not compile: SyntaxError.*\(line 2\)"):
        check_javascript(f"file://{tmp_path / 'broken.js'}", {})
    (tmp_path / "ok.js").write_text("module.exports = () => true;\n")
    with pytest.raises(BatchInputError, match="'1x' is not a function name"):
        check_javascript(f"file://{tmp_path / 'ok.js'}:1x", {})
    with pytest.raises(BatchInputError, match=r"javascript: timeout must be a number of seconds in \(0, 600\]"):
        check_javascript("true", {"timeout": 0})
    with pytest.raises(BatchInputError, match="javascript: config must be a mapping"):
        check_javascript("true", {"config": [1]})
