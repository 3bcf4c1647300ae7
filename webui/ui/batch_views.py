"""The Batch tab's tables and the compare view: result rows as DataFrames and HTML (no Gradio)."""

from __future__ import annotations

import difflib
import html
from typing import TYPE_CHECKING, Any, Sequence

import pandas as pd

from webui.batch.run.results import ResultRow, cell_text, compare, pivot, prompt_label, summarize

if TYPE_CHECKING:
    from pandas.io.formats.style import Styler  # needs jinja2 when imported

RESULT_COLUMNS = ["#", "prompt", "setting", "sample", "seed", "output", "finish", "tokens", "cached prompt",
                  "ttft (s)", "tok/s", "asserts", "passed", "review", "tool calls"]
"""``#`` is the row's place in the run (1 = its first row), whatever the filter or the table's sort shows."""
SELECTED_STYLE = "background-color: color-mix(in srgb, var(--color-accent) 28%, transparent)"


def shown_rows(rows: list[ResultRow], query: str = "", failures_only: bool = False) -> list[ResultRow]:
    """The rows the results table shows for a filter, in its order."""
    q = query.strip().lower()
    return [r for r in rows if not (failures_only and r.passed is not False)
            and not (q and q not in f"{r.prompt} {r.output} {r.setting}".lower())]


def result_table(rows: list[ResultRow], query: str = "", failures_only: bool = False,
                 selected: Sequence[Any] | None = None) -> pd.DataFrame | Styler:
    """The results table of ``rows`` for a filter; the row whose key (prompt index, setting, sample) is ``selected``
    is tinted (a pandas Styler then: the tint is the row's own, so it stays on it when the table is sorted)."""
    out, tinted = [], None
    shown = shown_rows(rows, query, failures_only)
    places = {id(r): number for number, r in enumerate(rows, 1)}
    for position, r in enumerate(shown):
        marks = " ".join(("✓ " if a.passed else "✗ ") + a.label + ("" if a.score is None else f" ({a.score:.2f})")
                         for a in r.asserts)
        finish = f"cached · {r.finish_reason}" if r.from_cache else r.finish_reason
        out.append([places[id(r)], prompt_label(r), r.setting, r.sample, r.seed, one_line(cell_text(r)), finish,
                    r.completion_tokens, f"{r.cached_tokens}/{r.prompt_tokens}",
                    None if r.ttft is None else round(r.ttft, 3),
                    None if r.tokens_per_second is None else round(r.tokens_per_second, 1), marks,
                    "" if r.passed is None else ("pass" if r.passed else "FAIL"), review_text(r), calls_text(r)])
        if selected is not None and row_key(r) == tuple(selected):
            tinted = position
    table = pd.DataFrame(out, columns=RESULT_COLUMNS)
    if tinted is None:
        return table
    styled = table.style.apply(lambda line: [SELECTED_STYLE if line.name == tinted else "" for _ in line], axis=1)
    return styled.format(lambda v: "" if pd.isna(v) else f"{v:g}", subset=["ttft (s)", "tok/s"])  # as unstyled


def row_key(row: ResultRow) -> tuple[int, str, int]:
    """What names a row within its run (and what a review is stored under)."""
    return row.prompt_index, row.setting, row.sample


def clicked_row(rows: list[ResultRow], values: list) -> tuple[int, ResultRow] | None:
    """(place in the run, row) of the table row whose cells are ``values`` (the clicked row, as the browser shows
    it: sorted or filtered there or not); None when the run has no such row (any more)."""
    if not values or len(values) < 4:
        return None
    try:
        number, sample = int(values[0]), int(values[3])
    except (TypeError, ValueError):
        return None
    label, setting = values[1], values[2]
    if 0 < number <= len(rows):  # its place, if the rows are still those the table showed
        row = rows[number - 1]
        if (prompt_label(row), row.setting, row.sample) == (label, setting, sample):
            return number, row
    return next(((n, r) for n, r in enumerate(rows, 1) if (prompt_label(r), r.setting, r.sample) == (label, setting,
                                                                                                    sample)), None)


def one_line(text: str) -> str:
    """A cell's text on one line (the table shows one line per row; the review panel shows it whole)."""
    return " ".join(text.split())


def review_text(row: ResultRow) -> str:
    if not row.review:
        return ""
    note = row.review.get("note", "")
    return row.review["verdict"] + (f": {note}" if note else "")


def calls_text(row: ResultRow) -> str:
    """The calls of a row's tool loop, each as ``tool(arguments) → result`` ("" for a row that ran none)."""
    calls = [c for step in row.tool_steps or [] for c in step.get("calls", [])]
    return " · ".join(one_line(f"{c['name']}({c['arguments']}) → {c.get('result', '')}") for c in calls)


def summary_table(rows: list[ResultRow]) -> pd.DataFrame:
    data = [[s.label, s.rows, s.passed, s.failed, None if s.pass_rate is None else round(100 * s.pass_rate, 1),
             "" if s.pass_interval is None else f"{100 * s.pass_interval[0]:.0f}–{100 * s.pass_interval[1]:.0f}",
             None if s.mean_score is None else round(s.mean_score, 3),
             None if s.mean_tokens_per_second is None else round(s.mean_tokens_per_second, 1),
             None if s.mean_ttft is None else round(s.mean_ttft, 3), s.good, s.bad] for s in summarize(rows)]
    return pd.DataFrame(data, columns=["setting", "rows", "passed", "failed", "pass rate %", "95% interval %",
                                       "mean score", "tok/s", "ttft (s)", "marked good", "marked bad"])


def pivot_table(rows: list[ResultRow]) -> pd.DataFrame:
    prompts, settings, matrix = pivot(rows)
    return pd.DataFrame([[p, *cells] for p, cells in zip(prompts, matrix)], columns=["prompt", *settings])


def diff_html(a: str | None, b: str | None) -> tuple[str, str]:
    """Both outputs with the words that differ highlighted."""
    if a is None or b is None:
        return html.escape(a or "(missing)"), html.escape(b or "(missing)")
    wa, wb = a.split(" "), b.split(" ")
    left, right = [], []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(a=wa, b=wb, autojunk=False).get_opcodes():
        ta, tb = html.escape(" ".join(wa[i1:i2])), html.escape(" ".join(wb[j1:j2]))
        if op == "equal":
            left.append(ta)
            right.append(tb)
        else:
            if ta:
                left.append(f"<mark class='diff-del'>{ta}</mark>")
            if tb:
                right.append(f"<mark class='diff-add'>{tb}</mark>")
    return " ".join(left), " ".join(right)


def compare_html(rows_a: list[ResultRow], rows_b: list[ResultRow], label_a: str, label_b: str) -> str:
    if not rows_a or not rows_b:
        return "<p>Choose two settings (or two runs) that have results.</p>"
    pairs = compare(rows_a, rows_b)
    same = sum(p.same for p in pairs)
    body = []
    for p in pairs:
        left, right = diff_html(p.output_a, p.output_b)
        mark = "same" if p.same else "differs"
        body.append(f"<tr class='{mark}'><td>{html.escape(p.prompt)}</td><td>{p.sample}</td>"
                    f"<td>{left}</td><td>{right}</td><td>{mark}</td></tr>")
    return (f"<p>{same} of {len(pairs)} outputs are the same.</p><table class='batch-compare'><thead><tr>"
            f"<th>prompt</th><th>sample</th><th>{html.escape(label_a)}</th><th>{html.escape(label_b)}</th><th></th>"
            f"</tr></thead><tbody>{''.join(body)}</tbody></table>")
