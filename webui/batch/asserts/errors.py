"""The one error type for mistakes in batch input (prompt files, asserts, grids, imports)."""

from __future__ import annotations


class BatchInputError(ValueError):
    """Something the user gave a batch is wrong; the message says where and what to fix.

    Raised while reading and planning, before any generation starts.
    """


class ScriptError(Exception):
    """A user's JavaScript or Python check or transform failed, ran too long or returned something unusable.

    Raised while checking an output; the message says which script and what happened, and becomes the failed
    assert's reason (a run never stops for it).
    """
