"""The suite's parts (tests/__main__.py): the browser and alone parts collect only tests/ui, so a test marked
``browser`` or ``alone`` anywhere else would run in no part at all."""

from __future__ import annotations

import re

from tests.__main__ import BROWSER_TESTS
from tests.conftest import ROOT

MARKED = re.compile(r"mark\.(browser|alone)\b")


def test_every_browser_or_alone_test_lives_where_their_parts_collect():
    outside = [str(path.relative_to(ROOT)) for path in sorted((ROOT / "tests").rglob("*.py"))
               if not path.is_relative_to(ROOT / BROWSER_TESTS) and MARKED.search(path.read_text(encoding="utf-8"))]
    assert not outside, f"marked browser or alone outside {BROWSER_TESTS}, where no part of python -m tests " \
                        f"collects them: {outside}"
