"""CSV and JSONL export of batch results, and the inverse imports (nothing is lost on a round trip).

JSONL holds one :meth:`ResultRow.to_dict` object per line. CSV has one column
per field; ``model`` is the model's id (NAME, or NAME@loader off its default
loader) and ``loader`` the loader it ran on; ``params``, ``load_options`` (the
loader's options the model was loaded with) and ``assert_results`` are JSON, ``asserts`` is a readable
one-line-per-assert summary ("PASS contains:Paris", "FAIL max-length:50 tokens:
output has 73 tokens, more than 50"), ``passed`` is true/false/empty and an
empty ``ttft``/``tokens_per_second``/``error`` cell means none; ``output_json`` is true where the output is the
JSON of a provider's tool calls; ``tool_steps`` is the JSON of a row's tool loop (its calls, each with its
arguments, result, error and time: ResultRow.tool_steps), empty for a row that ran none. Text cells that a
spreadsheet would run as a formula (starting with = + - @ tab or CR) get a
leading apostrophe, and so does text already starting with one; the import
removes exactly that apostrophe again.
"""

from __future__ import annotations

import csv
import io
import json
from typing import Any, Iterable

from webui.batch.asserts.types import AssertResult
from webui.batch.asserts.errors import BatchInputError
from webui.batch.run.results import ResultRow

CSV_COLUMNS = ("prompt_index", "prompt_id", "prompt", "model", "loader", "setting", "sample", "seed", "output",
               "finish_reason", "prompt_tokens", "completion_tokens", "cached_tokens", "ttft", "tokens_per_second",
               "passed", "score", "asserts", "error", "review", "review_note", "params", "load_options",
               "assert_results", "output_json", "tool_steps")
_TEXT_COLUMNS = frozenset({"prompt_id", "prompt", "model", "loader", "setting", "output", "finish_reason", "asserts",
                           "error", "review_note"})
_LATER_COLUMNS = ("asserts", "cached_tokens", "score", "review", "review_note", "model", "loader", "load_options",
                  "output_json", "tool_steps")
"""Columns CSVs exported before them lack: the import reads such a CSV with their empty values."""
_INT_COLUMNS = ("prompt_index", "sample", "seed", "prompt_tokens", "completion_tokens")
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "'")


def to_jsonl(rows: Iterable[ResultRow]) -> str:
    """One JSON object per line (UTF-8 text, not ASCII-escaped), ending with a newline."""
    return "".join(json.dumps(r.to_dict(), ensure_ascii=False) + "\n" for r in rows)


def from_jsonl(text: str) -> list[ResultRow]:
    """Rows from :func:`to_jsonl` output; a bad line is an error naming its number."""
    rows = []
    for number, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            raise BatchInputError(f"line {number}: not valid JSON ({exc.msg} at column {exc.colno})") from None
        if not isinstance(data, dict):
            raise BatchInputError(f"line {number}: expected a JSON object, got {type(data).__name__}")
        rows.append(ResultRow.from_dict(data, f"line {number}"))
    return rows


def assert_summary(results: Iterable[AssertResult]) -> str:
    """One line per assert: ``PASS label`` or ``FAIL label: detail``."""
    return "\n".join(f"PASS {a.label}" if a.passed else f"FAIL {a.label}: {a.detail}" for a in results)


def to_csv(rows: Iterable[ResultRow]) -> str:
    """A CSV table with a header row (see the module docstring for the columns)."""
    buffer = io.StringIO(newline="")
    writer = csv.writer(buffer, lineterminator="\r\n")
    writer.writerow(CSV_COLUMNS)
    for row in rows:
        writer.writerow([_cell(name, value) for name, value in _csv_values(row).items()])
    return buffer.getvalue()


def _csv_values(row: ResultRow) -> dict[str, Any]:
    return {
        "prompt_index": row.prompt_index, "prompt_id": row.prompt_id, "prompt": row.prompt, "model": row.model,
        "loader": row.loader, "setting": row.setting,
        "sample": row.sample, "seed": row.seed, "output": row.output, "finish_reason": row.finish_reason,
        "prompt_tokens": row.prompt_tokens, "completion_tokens": row.completion_tokens,
        "cached_tokens": row.cached_tokens, "ttft": row.ttft,
        "tokens_per_second": row.tokens_per_second,
        "passed": "" if row.passed is None else str(row.passed).lower(), "score": row.score,
        "asserts": assert_summary(row.asserts), "error": row.error,
        "review": (row.review or {}).get("verdict"), "review_note": (row.review or {}).get("note"),
        "params": json.dumps(row.params, ensure_ascii=False, sort_keys=True),
        "load_options": None if row.load_options is None else json.dumps(row.load_options, ensure_ascii=False,
                                                                         sort_keys=True),
        "assert_results": json.dumps([a.to_dict() for a in row.asserts], ensure_ascii=False),
        "output_json": str(row.output_json).lower(),
        "tool_steps": None if row.tool_steps is None else json.dumps(row.tool_steps, ensure_ascii=False),
    }


def _cell(name: str, value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)
    text = str(value)
    if name in _TEXT_COLUMNS and text.startswith(_FORMULA_START):
        return "'" + text
    return text


def _uncell(text: str) -> str:
    return text[1:] if text.startswith("'") and text[1:].startswith(_FORMULA_START) else text


def from_csv(text: str) -> list[ResultRow]:
    """Rows from :func:`to_csv` output (extra columns are ignored); errors name the data row."""
    try:
        table = list(csv.reader(io.StringIO(text.removeprefix("\ufeff"), newline=""), strict=True))
    except csv.Error as exc:
        raise BatchInputError(f"not valid CSV: {exc}") from None
    if not table:
        raise BatchInputError("the CSV is empty; it needs the header row written by the export")
    header = table[0]
    missing = [c for c in CSV_COLUMNS if c not in header and c not in _LATER_COLUMNS]
    if missing:
        raise BatchInputError(f"the CSV lacks the column(s) {', '.join(missing)}; columns: {', '.join(header)}")
    rows = []
    for number, cells in enumerate(table[1:], 1):
        if cells == [] or cells == [""]:
            continue
        if len(cells) != len(header):
            raise BatchInputError(f"row {number} has {len(cells)} cells but the header has {len(header)} columns")
        rows.append(_row_from_cells(dict(zip(header, cells)), f"row {number}"))
    return rows


def _row_from_cells(cells: dict[str, str], where: str) -> ResultRow:
    data: dict[str, Any] = {name: _uncell(cells[name]) for name in _TEXT_COLUMNS if name in cells}
    try:
        for name in _INT_COLUMNS:
            data[name] = int(cells[name])
        data["cached_tokens"] = int(cells.get("cached_tokens") or 0)  # CSVs exported before it existed lack it
        for name in ("ttft", "tokens_per_second", "score"):
            data[name] = float(cells[name]) if cells.get(name) else None
    except ValueError as exc:
        raise BatchInputError(f"{where}: {exc}") from None
    passed = cells["passed"].strip().lower()
    if passed not in ("", "true", "false"):
        raise BatchInputError(f"{where}: passed must be true, false or empty, got '{cells['passed']}'")
    data["passed"] = None if passed == "" else passed == "true"
    data["output_json"] = cells.get("output_json", "").strip().lower() == "true"
    data["error"] = data.get("error") or None
    data["model"] = data.get("model") or None
    data["loader"] = data.get("loader") or None
    verdict = cells.get("review", "").strip()
    data["review"] = {"verdict": verdict, "note": data.pop("review_note", "") or ""} if verdict else None
    data.pop("review_note", None)
    for name in ("params", "assert_results", "load_options", "tool_steps"):
        if name in ("load_options", "tool_steps") and not cells.get(name):
            data[name] = None  # not stored (rows made before rows kept their load options; rows without a loop)
            continue
        try:
            data[name] = json.loads(cells[name])
        except json.JSONDecodeError as exc:
            raise BatchInputError(f"{where}: {name} is not valid JSON ({exc.msg})") from None
    data["asserts"] = data.pop("assert_results")
    return ResultRow.from_dict(data, where)
