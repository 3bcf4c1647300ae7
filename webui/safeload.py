"""YAML and JSON from users, read so that a small file cannot become a huge or endless structure (#43).

YAML's aliases let a few lines stand for billions of values (the "billion laughs": each alias repeating the one
before ten times) or for a structure that contains itself; JSON and YAML both nest as deep as a file is long.
The parsers themselves share aliased values, so loading is quick, but everything that walks the result (filling
vars, writing JSON, checking a schema) would expand it. Each loader here returns data that nests at most
:data:`MAX_DEPTH` levels and, for YAML, holds at most :data:`MAX_VALUES` values once expanded, or raises
:class:`DataTooLarge` saying which limit the text broke."""

from __future__ import annotations

import json
from typing import Any

import yaml

MAX_VALUES = 1_000_000
MAX_DEPTH = 100


class DataTooLarge(ValueError):
    """YAML or JSON that expands past :data:`MAX_VALUES` values, nests past :data:`MAX_DEPTH` levels or contains
    itself."""


def load_yaml(text: str) -> Any:
    """``yaml.safe_load(text)``, checked; yaml.YAMLError for text that is not YAML, DataTooLarge for a bomb."""
    try:
        data = yaml.safe_load(text)
    except RecursionError:
        raise DataTooLarge(f"the YAML nests deeper than {MAX_DEPTH} levels") from None
    return checked(data, "YAML")


def load_json(text: str | bytes) -> Any:
    """``json.loads(text)``, checked; ValueError for text that is not JSON, DataTooLarge for a bomb."""
    try:
        data = json.loads(text)
    except RecursionError:
        raise DataTooLarge(f"the JSON nests deeper than {MAX_DEPTH} levels") from None
    return checked(data, "JSON", max_values=None)  # JSON has no aliases: its size is its text's


def checked(data: Any, what: str, max_values: int | None = MAX_VALUES) -> Any:
    """``data`` when it expands to at most ``max_values`` values (None: any number) and MAX_DEPTH levels;
    DataTooLarge otherwise. Shared (aliased) lists and mappings are counted once per place they appear, in time
    linear in the distinct ones."""
    seen: dict[int, tuple[int, int]] = {}  # id -> (values, levels) of a list or mapping already counted
    open_: set[int] = set()

    def count(value: Any, depth: int) -> tuple[int, int]:
        if not isinstance(value, (list, dict)):
            return 1, 0
        key = id(value)
        if key in open_:
            raise DataTooLarge(f"the {what} contains itself (an alias inside its own anchor)")
        if key not in seen:
            if depth >= MAX_DEPTH:
                raise DataTooLarge(f"the {what} nests deeper than {MAX_DEPTH} levels")
            open_.add(key)
            total, levels = 1, 0
            for item in (*value.keys(), *value.values()) if isinstance(value, dict) else value:
                values, below = count(item, depth + 1)
                total, levels = total + values, max(levels, below + 1)
                if max_values is not None and total > max_values:
                    raise DataTooLarge(f"the {what} expands to more than {max_values:,} values (aliases that "
                                       "repeat aliases: a 'billion laughs' bomb); write the values out")
            open_.discard(key)
            seen[key] = total, levels
        if depth + seen[key][1] > MAX_DEPTH:
            raise DataTooLarge(f"the {what} nests deeper than {MAX_DEPTH} levels")
        return seen[key]

    count(data, 0)
    return data
