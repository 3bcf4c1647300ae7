"""The import graph of webui/ and loaders/, read from the source (#47): no cycles, and webui/batch/ in its packages.

Every import written counts: at the top of a module, under ``if TYPE_CHECKING:`` and inside functions alike (a
type-only cycle still says that two modules each need the other). An import names the module it loads: ``from
webui.batch.asserts import classify`` the submodule, ``from webui.engine import SamplingParams`` the package's
``__init__``. That Python runs a package's ``__init__`` before its submodules is not counted.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

from tests.conftest import ROOT

PACKAGES = ("webui", "loaders")
KNOWN_CYCLES: set[frozenset[str]] = set()
"""Cycles allowed for now, each to go and then to leave this list (the last two went in #47)."""
BATCH_PACKAGES = {"asserts", "promptfoo", "run"}


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _loaded(name: str, modules: dict[str, Path]) -> str | None:
    """The module of ours that importing ``name`` loads (the longest of its prefixes we have), else None."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _imports(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules of ours that ``module`` imports, wherever in it."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    named = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            named += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            named += [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
    return {found for name in named if (found := _loaded(name, modules)) is not None and found != module}


@cache
def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    return {module: _imports(module, path, modules) for module, path in modules.items()}


def _cycle_through(members: set[str], graph: dict[str, set[str]]) -> list[str]:
    """One cycle inside a strongly connected set of modules, as the path that closes it."""
    start = min(members)
    path, seen = [start], {start}
    while True:
        following = sorted(graph[path[-1]] & members)
        if start in following:
            return [*path, start]
        step = next((m for m in following if m not in seen), None)
        if step is None:  # a dead end inside the set: back up (cannot loop forever: each module is tried once)
            path.pop()
            if not path:
                return sorted(members)
            continue
        path.append(step)
        seen.add(step)


def cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected sets of more than one module (Tarjan's algorithm, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, following = work[-1]
            step = next(following, None)
            if step is not None:
                if step not in index:
                    index[step] = low[step] = len(index)
                    stack.append(step)
                    on_stack.add(step)
                    work.append((step, iter(sorted(graph[step]))))
                elif step in on_stack:
                    low[node] = min(low[node], index[step])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                members = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    members.add(member)
                    if member == node:
                        break
                if len(members) > 1:
                    found.append(members)
    return found


def test_the_cycle_finder_names_a_cycle_and_nothing_else():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"d"}}
    assert cycles(graph) == [{"a", "b", "c"}]
    assert _cycle_through({"a", "b", "c"}, graph) == ["a", "b", "c", "a"]


def test_no_import_cycle_in_webui_or_loaders_type_only_imports_included():
    graph = import_graph()
    assert len(graph) > 100 and graph["webui.services"]  # the graph is read at all
    found = cycles(graph)
    new = [" -> ".join(_cycle_through(members, graph)) for members in found if frozenset(members) not in KNOWN_CYCLES]
    assert not new, "import cycles (type-only imports count: name the type through a leaf module instead):\n" + \
        "\n".join(new)
    gone = [sorted(known) for known in KNOWN_CYCLES if not any(frozenset(members) == known for members in found)]
    assert not gone, f"these known cycles are gone: take them out of KNOWN_CYCLES: {gone}"


def test_the_asserts_types_are_a_leaf():
    imported = import_graph()["webui.batch.asserts.types"]
    assert not {m for m in imported if m.startswith("webui.batch")}, imported


def test_webui_batch_holds_only_its_three_packages():
    batch = ROOT / "webui" / "batch"
    files = sorted(p.name for p in batch.iterdir() if p.is_file() and p.suffix == ".py")
    folders = {p.name for p in batch.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert files == ["__init__.py"], f"modules directly in webui/batch/ (move each into asserts/, promptfoo/ or " \
        f"run/): {files}"
    assert folders == BATCH_PACKAGES
    assert all((batch / name / "__init__.py").is_file() for name in BATCH_PACKAGES)
