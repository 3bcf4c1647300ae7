"""How a count reads: one helper, so no line says "1 tokens"."""

from __future__ import annotations


def counted(n: int, noun: str = "token", plural: str = "", grouped: bool = False) -> str:
    """``n`` with ``noun``, singular for exactly one ("1 token", "0 tokens", "5 tokens"); ``plural`` where it is
    not ``noun`` + "s"; ``grouped``: thousands separated ("1,024 tokens")."""
    number = f"{n:,}" if grouped else f"{n}"
    return f"{number} {noun if n == 1 else plural or noun + 's'}"
