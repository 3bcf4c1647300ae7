"""The Batch tab's tables and the compare view: result rows as DataFrames and HTML (no Gradio)."""

from __future__ import annotations

import difflib
import html

import pandas as pd

from webui.batch import ResultRow, cell_text, compare, pivot, prompt_label, summarize

RESULT_COLUMNS = ["prompt", "setting", "sample", "seed", "output", "finish", "tokens", "cached prompt", "ttft (s)",
                  "tok/s", "asserts", "passed", "review"]


def shown_rows(rows: list[ResultRow], query: str = "", failures_only: bool = False) -> list[ResultRow]:
    """The rows the results table shows for a filter, in its order."""
    q = query.strip().lower()
    return [r for r in rows if not (failures_only and r.passed is not False)
            and not (q and q not in f"{r.prompt} {r.output} {r.setting}".lower())]


def result_table(rows: list[ResultRow], query: str = "", failures_only: bool = False) -> pd.DataFrame:
    out = []
    for r in shown_rows(rows, query, failures_only):
        marks = " ".join(("✓ " if a.passed else "✗ ") + a.label + ("" if a.score is None else f" ({a.score:.2f})")
                         for a in r.asserts)
        finish = f"{r.finish_reason} (from cache)" if r.from_cache else r.finish_reason
        out.append([prompt_label(r), r.setting, r.sample, r.seed, cell_text(r), finish, r.completion_tokens,
                    f"{r.cached_tokens}/{r.prompt_tokens}", None if r.ttft is None else round(r.ttft, 3),
                    None if r.tokens_per_second is None else round(r.tokens_per_second, 1), marks,
                    "" if r.passed is None else ("pass" if r.passed else "FAIL"), review_text(r)])
    return pd.DataFrame(out, columns=RESULT_COLUMNS)


def review_text(row: ResultRow) -> str:
    if not row.review:
        return ""
    note = row.review.get("note", "")
    return row.review["verdict"] + (f": {note}" if note else "")


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
