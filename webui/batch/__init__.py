"""Batch prompt testing: prompts x a grid of sampling settings x N samples, checked by asserts.

Pure logic, no engine and no UI: load prompts (:mod:`.prompts`), parse asserts
(:mod:`.asserts`), expand the grid and plan cells (:mod:`.grid`), turn outputs
into results and summaries (:mod:`.results`), export and import them
(:mod:`.export`). Every user mistake is a :class:`BatchInputError`, raised before
anything runs.
"""

from webui.batch.asserts.assertion import KINDS, Assert, assert_label, check_all, parse_assert, parse_asserts
from webui.batch.asserts.types import AssertResult
from webui.batch.asserts.errors import BatchInputError
from webui.batch.export import assert_summary, from_csv, from_jsonl, to_csv, to_jsonl
from webui.batch.grid import (
    DEFAULT_MAX_CELLS, Cell, GridSpec, Setting, estimate_seconds, expand, format_value, parse_axes, parse_axis,
    parse_value, plan, plan_grid,
)
from webui.batch.prompts import (
    PromptRow, load_prompts, load_prompts_text, parse_csv, parse_jsonl, parse_lines, render, rows_from_texts,
    template_variables, unescape_newlines, with_asserts,
)
from webui.batch.results import (
    Comparison, ResultRow, SettingSummary, cell_text, compare, pivot, prompt_label, result_for, rows_for_setting,
    summarize,
)

__all__ = [
    "KINDS", "Assert", "AssertResult", "assert_label", "check_all", "parse_assert", "parse_asserts",
    "BatchInputError",
    "assert_summary", "from_csv", "from_jsonl", "to_csv", "to_jsonl",
    "DEFAULT_MAX_CELLS", "Cell", "GridSpec", "Setting", "estimate_seconds", "expand", "format_value", "parse_axes",
    "parse_axis", "parse_value", "plan", "plan_grid",
    "PromptRow", "load_prompts", "load_prompts_text", "parse_csv", "parse_jsonl", "parse_lines", "render",
    "rows_from_texts", "template_variables", "unescape_newlines", "with_asserts",
    "Comparison", "ResultRow", "SettingSummary", "cell_text", "compare", "pivot", "prompt_label", "result_for",
    "rows_for_setting", "summarize",
]
