"""Hostile inputs, one surface a module (#43): each module names its surface in ``SURFACE`` and tries each hostile
input as one test (a parametrized case); the run ends with a count of the inputs tried per surface and how many
were answered as they should be. (Tests that are not parametrized, such as one showing that the good input still
works, are not counted.)"""

from __future__ import annotations

from collections import Counter

import pytest

_surface_of: dict[str, str] = {}
_tried: Counter[str] = Counter()
_held: Counter[str] = Counter()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        surface = getattr(getattr(item, "module", None), "SURFACE", None)
        if surface and hasattr(item, "callspec"):  # a hostile input is a parametrized case; plain tests are not
            _surface_of[item.nodeid] = surface


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    surface = _surface_of.get(report.nodeid)
    if surface is None or not (report.when == "call" or (report.when == "setup" and not report.passed)):
        return
    _tried[surface] += 1
    _held[surface] += report.passed


def pytest_terminal_summary(terminalreporter) -> None:
    if not _tried:
        return
    terminalreporter.section("hostile inputs tried, per surface (#43)")
    for surface in sorted(_tried):
        terminalreporter.write_line(f"{surface:<28} {_tried[surface]:>4} tried, {_held[surface]:>4} answered as they "
                                    "should be")
    terminalreporter.write_line(f"{'all surfaces':<28} {sum(_tried.values()):>4} tried, "
                                f"{sum(_held.values()):>4} answered as they should be")
