"""The one error type for mistakes in batch input (prompt files, asserts, grids, imports)."""

from __future__ import annotations


class BatchInputError(ValueError):
    """Something the user gave a batch is wrong; the message says where and what to fix.

    Raised while reading and planning, before any generation starts.
    """
