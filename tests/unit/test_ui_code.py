"""The UI's handlers, read from the source (#47 item 4): they return ``{component: update}`` dicts, not positional
tuples padded with ``gr.skip()`` that work only while they match their outputs' order, and the wiring is in named
pieces, one per event family, not one long function."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import ROOT

LONGEST = 80
"""Lines of the longest function in webui/ui/ (chat_tab's _wire_generation was 115 before its split)."""


def _functions() -> list[tuple[Path, ast.FunctionDef | ast.AsyncFunctionDef]]:
    found = []
    for path in sorted((ROOT / "webui" / "ui").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found.append((path, node))
    return found


def _is_skip(node: ast.AST) -> bool:
    """``gr.skip()`` (or ``skip()``)."""
    return isinstance(node, ast.Call) and (
        isinstance(node.func, ast.Attribute) and node.func.attr == "skip" or
        isinstance(node.func, ast.Name) and node.func.id == "skip")


def test_no_handler_returns_a_tuple_padded_with_skip():
    padded = {}  # place -> the innermost function there (ast.walk visits the outer ones first)
    for path, function in _functions():
        for node in ast.walk(function):
            value = node.value if isinstance(node, (ast.Return, ast.Yield)) else None
            if isinstance(value, ast.Tuple) and any(_is_skip(part) or isinstance(part, ast.IfExp) and (
                    _is_skip(part.body) or _is_skip(part.orelse)) for part in value.elts):
                padded[f"{path.relative_to(ROOT)}:{node.lineno}"] = function.name
    assert not padded, ("handlers return a tuple holding gr.skip(); return an Updates dict (webui/ui/feedback.py) "
                        f"that leaves the unchanged outputs out: {padded}")


def test_no_ui_function_is_longer_than_the_limit():
    long = [f"{path.relative_to(ROOT)}: {function.name} ({function.end_lineno - function.lineno + 1} lines)"
            for path, function in _functions()
            if (function.end_lineno or 0) - function.lineno + 1 > LONGEST]
    assert not long, f"split these into named pieces (one per event family) of at most {LONGEST} lines: {long}"
