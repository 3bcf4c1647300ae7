"""Local tools (#44): text-generation-webui's tool files run unchanged, the built-ins, broken tool files listed
with what is wrong, time and output limits, and the calculator's refusals. Real files, real worker processes."""

from __future__ import annotations

import json
import os
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest

from tests.conftest import ROOT
from webui.tools import CalculatorError, ToolBox, evaluate

TGWUI_TOOLS = ROOT / "tests" / "data" / "tools"


def toolbox(folder: Path, tmp_path: Path, **options) -> ToolBox:
    return ToolBox(folder, tmp_path / "mcp_servers.json", **options)


def write_tool(folder: Path, file: str, name: str, body: str, extra: str = "") -> Path:
    folder.mkdir(exist_ok=True)
    path = folder / file
    path.write_text(f"{extra}\ntool = {{'type': 'function', 'function': {{'name': {name!r}, 'description': 'test', "
                    f"'parameters': {{'type': 'object', 'properties': {{}}}}}}}}\n\n"
                    f"def execute(arguments):\n    {body}\n")
    return path


def test_text_generation_webuis_tool_files_load_and_run_unchanged(tmp_path):
    box = toolbox(TGWUI_TOOLS, tmp_path)
    listing = box.list()
    assert listing.problems == ()
    files = {t.name: t for t in listing.tools if t.kind == "file"}
    assert set(files) == {"calculate", "get_datetime", "roll_dice"}  # they take the built-ins' places
    assert [t.name for t in listing.tools].count("calculate") == 1
    assert files["roll_dice"].origin == str(TGWUI_TOOLS / "roll_dice.py")
    assert files["calculate"].openai()["function"]["parameters"]["required"] == ["expression"]

    calc = box.call("calculate", {"expression": "2 * (3 + 4)"})
    assert calc.ok and json.loads(calc.text) == {"expression": "2 * (3 + 4)", "result": 14}
    dice = json.loads(box.call("roll_dice", '{"count": 3, "sides": 6}').text)  # JSON text, as a model writes it
    assert len(dice["rolls"]) == 3 and all(1 <= r <= 6 for r in dice["rolls"]) and dice["total"] == sum(dice["rolls"])
    now = json.loads(box.call("get_datetime", {}).text)
    assert now["date"] == datetime.now().strftime("%Y-%m-%d")
    assert "roll_dice" not in sys.modules and not [m for m in sys.modules if m.startswith("workbench_tool_")]


def test_the_builtins_are_there_without_any_file(tmp_path):
    box = toolbox(tmp_path / "no-such-folder", tmp_path)
    listing = box.list()
    assert {t.name: t.kind for t in listing.tools} == {"calculate": "builtin", "get_datetime": "builtin",
                                                       "roll_dice": "builtin"}
    assert json.loads(box.call("calculate", {"expression": "sqrt(16) + 2 ** 10"}).text)["result"] == 1028.0
    dice = json.loads(box.call("roll_dice", {"count": 4, "sides": 2}).text)
    assert len(dice["rolls"]) == 4 and set(dice["rolls"]) <= {1, 2}
    assert json.loads(box.call("get_datetime", {}).text)["date"] == datetime.now().strftime("%Y-%m-%d")

    refused = box.call("calculate", {"expression": "__import__('os').system('true')"})
    assert refused.error.kind == "failed" and refused.text.startswith("error: only the functions")
    too_many = box.call("roll_dice", {"count": 5000})
    assert too_many.error.kind == "bad_arguments" and "count" in too_many.error.message
    missing = box.call("calculate", {})
    assert missing.error.kind == "bad_arguments" and "'expression' is a required property" in missing.text
    unknown = box.call("no_such_tool", {})
    assert unknown.error.kind == "unknown_tool" and "calculate" in unknown.error.message
    bad_json = box.call("calculate", "{expression: 1")
    assert bad_json.error.kind == "bad_arguments" and "not valid JSON" in bad_json.text


def test_broken_tool_files_are_listed_with_what_is_wrong(tmp_path):
    folder = tmp_path / "tools"
    write_tool(folder, "good.py", "good", "return 'fine'")
    (folder / "syntax.py").write_text("tool = {\n")
    (folder / "imports.py").write_text("import no_such_module_for_tools\n")
    (folder / "no_tool.py").write_text("def execute(arguments):\n    return 1\n")
    (folder / "bad_schema.py").write_text("tool = {'type': 'function', 'function': {'name': 'bad', "
                                          "'parameters': {'type': 'object', 'properties': 5}}}\n"
                                          "def execute(arguments):\n    return 1\n")
    (folder / "bad_name.py").write_text("tool = {'function': {'name': 'has space'}}\ndef execute(a):\n    return 1\n")
    (folder / "no_execute.py").write_text("tool = {'type': 'function', 'function': {'name': 'lazy'}}\n")
    write_tool(folder, "twin_a.py", "twin", "return 'a'")
    write_tool(folder, "twin_b.py", "twin", "return 'b'")
    (folder / "exits.py").write_text("raise SystemExit(2)\n")

    listing = toolbox(folder, tmp_path).list()
    files = {t.name for t in listing.tools if t.kind == "file"}
    assert files == {"good", "twin"}
    problems = {Path(p.origin).name: p.message for p in listing.problems}
    assert set(problems) == {"syntax.py", "imports.py", "no_tool.py", "bad_schema.py", "bad_name.py",
                             "no_execute.py", "twin_b.py", "exits.py"}
    assert "SyntaxError" in problems["syntax.py"] and "cannot be imported" in problems["syntax.py"]
    assert "No module named 'no_such_module_for_tools'" in problems["imports.py"]
    assert "no `tool` dict" in problems["no_tool.py"]
    assert "not a valid JSON schema" in problems["bad_schema.py"]
    assert "'has space'" in problems["bad_name.py"]
    assert "no execute(arguments)" in problems["no_execute.py"]
    assert "already taken by" in problems["twin_b.py"] and "twin_a.py" in problems["twin_b.py"]
    assert "exit(2)" in problems["exits.py"]
    assert toolbox(folder, tmp_path).call("twin", {}).text == "a"


def test_a_tool_past_its_time_limit_is_stopped_with_its_process(tmp_path):
    folder = tmp_path / "tools"
    pid_file = tmp_path / "pid"
    write_tool(folder, "slow.py", "slow", f"open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(60)",
               extra="import os, time")
    box = toolbox(folder, tmp_path)
    start = time.monotonic()
    result = box.call("slow", {}, timeout=3)
    assert time.monotonic() - start < 10
    assert result.error.kind == "timeout" and result.text == ("error: the tool 'slow' did not finish within 3 s "
                                                              "and was stopped")
    pid = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_a_file_that_hangs_on_import_is_a_problem_not_a_hang(tmp_path):
    folder = tmp_path / "tools"
    write_tool(folder, "stuck.py", "stuck", "return 1", extra="import time\ntime.sleep(60)")
    write_tool(folder, "fine.py", "fine", "return 1")
    start = time.monotonic()
    listing = toolbox(folder, tmp_path, import_timeout=3).list()
    assert time.monotonic() - start < 10
    assert "fine" in {t.name for t in listing.tools}
    assert [p.message for p in listing.problems] == ["importing it took longer than 3 s, so it was stopped; it is "
                                                     "tried again when the file changes"]


def test_huge_output_is_cut_with_a_marker_and_prints_do_not_garble_the_reply(tmp_path):
    folder = tmp_path / "tools"
    write_tool(folder, "huge.py", "huge", "print('noise'); return 'x' * 1_000_000")
    write_tool(folder, "listy.py", "listy", "print('noise'); return {'n': [1, 2]}")
    box = toolbox(folder, tmp_path, max_output_chars=1000)
    result = box.call("huge", {})
    assert result.ok and result.truncated
    assert result.text == "x" * 1000 + "\n[output truncated: 1000000 characters, only the first 1000 are shown]"
    assert box.call("listy", {}).text == '{"n": [1, 2]}'
    long_sum = box.call("calculate", {"expression": "2 ** 10000"})
    assert long_sum.truncated and long_sum.text.endswith("only the first 1000 are shown]")


def test_a_tool_that_raises_or_dies_gives_an_error_result(tmp_path):
    folder = tmp_path / "tools"
    write_tool(folder, "raises.py", "raises", "raise ValueError('no such city: ' + arguments.get('city', ''))")
    write_tool(folder, "dies.py", "dies", "os._exit(7)", extra="import os")
    box = toolbox(folder, tmp_path)
    raised = box.call("raises", {"city": "Atlantis"})
    assert raised.error.kind == "failed"
    assert raised.text == "error: the tool 'raises' failed while running it: ValueError: no such city: Atlantis"
    died = box.call("dies", {})
    assert died.error.kind == "crashed" and "exited with code 7 without an answer" in died.text


def test_a_changed_file_is_read_again(tmp_path):
    folder = tmp_path / "tools"
    path = write_tool(folder, "t.py", "first", "return 1")
    box = toolbox(folder, tmp_path)
    assert "first" in {t.name for t in box.list().tools}
    write_tool(folder, "t.py", "second_name", "return 2")
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))
    names = {t.name for t in box.list().tools}
    assert "second_name" in names and "first" not in names
    assert box.call("second_name", {}).text == "2"


@pytest.mark.parametrize("expression, result", [
    ("2 * (3 + 4)", 14), ("7 // 2", 3), ("-2 ** 2", -4), ("2 ** -1", 0.5), ("round(2.567, 2)", 2.57),
    ("max(1, 5, 3) % 4", 1), ("factorial(10)", 3628800), ("abs(-3) + floor(2.7)", 5),
])
def test_the_calculator_evaluates_arithmetic(expression, result):
    assert evaluate(expression) == result


@pytest.mark.parametrize("expression, message", [
    ("__import__('os')", "only the functions"),
    ("(1).__class__", "attribute access (.__class__)"),
    ("().__class__.__bases__[0]", "indexing is not allowed"),
    ("9 ** 9 ** 9", "is too large"),
    ("2 ** 100000", "is too large"),
    ("10 ** 3000 * 10 ** 3000", "too large"),
    ("factorial(5000)", "factorial is limited"),
    ("10.0 ** 400", "too large for a floating-point number"),
    ("1 / 0", "division by zero"),
    ("2 ^ 3", "write 2 ** 3"),
    ("'a' * 3", "only numbers"),
    ("x + 1", "unknown name 'x'"),
    ("[1, 2]", "a List is not allowed"),
    ("lambda: 1", "a lambda is not allowed"),
    ("1 << 100000", "the operator LShift is not allowed"),
    ("sqrt(-1)", "math error"),
    ("(-8) ** 0.5", "complex number"),
    ("max(*[1])", "plain arguments only"),
    ("1" + "+1" * 600, "characters long"),
    ("-" * 800 + "1", "more than 500 parts"),
    ("", "give an expression"),
    ("import os", "not an arithmetic expression"),
])
def test_the_calculator_refuses_what_is_not_bounded_arithmetic(expression, message):
    with pytest.raises(CalculatorError) as refused:
        evaluate(expression)
    assert message in str(refused.value)
