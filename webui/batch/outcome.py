"""What an assert kind's check gives back: :class:`Outcome`."""

from __future__ import annotations

from typing import NamedTuple


class Outcome(NamedTuple):
    """What a kind's check says of one output: passed, why it failed, a score (None: yes/no check), and whether
    the score against the threshold decides."""

    passed: bool
    why: str
    score: float | None = None
    by_score: bool = False
    broken: bool = False
    """The check could not judge the output (a regex match stopped at its time limit, an object value against
    output that is not JSON): it fails, ``not-`` or not."""
