"""Hostile inputs, one surface a module (#43): each module names its surface in ``SURFACE`` and tries each hostile
input as one test (a parametrized case); the run ends with a count of the inputs tried per surface and how many
were answered as they should be. (Tests that are not parametrized, such as one showing that the good input still
works, are not counted.)"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Callable, Union

import pytest

_tried: Counter[str] = Counter()
_held: Counter[str] = Counter()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Kept on the item's report, not in this process: with pytest-xdist the workers collect and the controller,
    # which prints the summary, sees only the reports.
    for item in items:
        surface = getattr(getattr(item, "module", None), "SURFACE", None)
        if surface and hasattr(item, "callspec"):  # a hostile input is a parametrized case; plain tests are not
            item.user_properties.append(("surface", surface))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    surface = dict(report.user_properties).get("surface")
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


@pytest.fixture
def services(tmp_path: Path, tiny_model_dir: Path):
    """Services over a fresh user data dir with the tiny model in the models folder (not loaded: the training
    tab's Start checks everything, reading its tokenizer, before any weights load)."""
    from webui.config import AppConfig
    from webui.services import Services

    config = AppConfig(user_data_dir=tmp_path / "data", threads=1, device="cpu")
    config.make_dirs()
    (config.models_dir / "tiny").symlink_to(tiny_model_dir, target_is_directory=True)
    made = Services.create(config)
    yield made
    made.close()


Content = Union[bytes, Callable[[], bytes], Callable[[Path], None]]
"""A hostile file's content: its bytes, a function that makes them, or one that writes the file itself (a
sparse file of a gigabyte, say)."""


def write(folder: Path, name: str, content: Content) -> Path:
    """``folder/name`` with ``content`` (see Content)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content.__code__.co_argcount:  # writes the file itself
        content(path)  # type: ignore[call-arg]
    else:
        path.write_bytes(content())  # type: ignore[call-arg]
    return path
