"""The token view: each generated token with its probability and its alternatives, and branching from one.

Rows come from the engine's per-token log-probabilities (the very numbers the API
returns as ``logprobs``): the model's raw distribution, plus the distribution the
token was actually drawn from after the sampling processors, for the same
alternatives. Branching re-runs the model from a position with another token in
place of the one it chose.
"""

from __future__ import annotations

import html
import math
from dataclasses import replace
from typing import Any, Sequence

from webui.engine import GenerationRequest, SamplingParams, TokenLogprob

VIEW_TOP = 5
"""Alternatives kept per token for the view."""


class BranchError(ValueError):
    pass


def _p(logprob: float | None) -> float | None:
    return None if logprob is None else math.exp(logprob)


def token_rows(logprobs: Sequence[TokenLogprob]) -> list[dict[str, Any]]:
    """JSON-friendly rows: {"id", "text", "p", "pa", "alts": [[id, text, p, pa], ...]} (pa: after processors)."""
    rows = []
    for lp in logprobs:
        after = list(lp.top_after) + [None] * (len(lp.top) - len(lp.top_after))
        rows.append({"id": lp.token_id, "text": lp.token, "p": _p(lp.logprob), "pa": _p(lp.logprob_after),
                     "alts": [[i, s, _p(v), _p(a)] for (i, s, v), a in zip(lp.top, after)]})
    return rows


def _percent(p: float | None) -> str:
    if p is None:
        return "?"
    if p == 0:
        return "cut"
    return f"{p * 100:.1f}%" if p >= 0.001 else "<0.1%"


def _shown(text: str) -> str:
    return html.escape(text).replace("\n", "↵<br>").replace("\t", "⇥") or "∅"


def _shade(p: float | None) -> str:
    """Red for unlikely tokens through yellow to green for likely ones."""
    p = 0.5 if p is None else max(0.0, min(1.0, p))
    return f"hsla({int(120 * p)}, 75%, 55%, {0.45 - 0.25 * p:.2f})"


def render(rows: Sequence[dict[str, Any]], branchable: bool = True) -> str:
    """HTML: tokens shaded by probability; hovering (or focusing) one shows its alternatives, raw and after the
    processors; with ``branchable`` each alternative is a button that continues from there with it."""
    if not rows:
        return "<div class='tv-empty'>Generate something to see its tokens here.</div>"
    spans = []
    for pos, row in enumerate(rows):
        lines = ["<table><tr><th>token</th><th>model</th><th>sampled from</th></tr>"]
        for alt_id, alt_text, p, pa in row["alts"]:
            chosen = alt_id == row["id"]
            label = f"<code>{html.escape(repr(alt_text))}</code>"
            if branchable and not chosen and alt_id >= 0:
                label = (f"<button class='tv-branch' data-pos='{pos}' data-branch-token='{alt_id}' "
                         f"title='continue from here with this token'>{label}</button>")
            lines.append(f"<tr class='{'tv-chosen' if chosen else ''}'><td>{label}</td><td>{_percent(p)}</td>"
                         f"<td>{_percent(pa)}</td></tr>")
        if not any(alt[0] == row["id"] for alt in row["alts"]):
            lines.insert(1, f"<tr class='tv-chosen'><td><code>{html.escape(repr(row['text']))}</code></td>"
                            f"<td>{_percent(row['p'])}</td><td>{_percent(row['pa'])}</td></tr>")
        lines.append("</table>")
        title = f"p={_percent(row['p'])}, after processors {_percent(row['pa'])}"
        spans.append(f"<span class='tv-tok' tabindex='0' data-pos='{pos}' style='background:{_shade(row['p'])}' "
                     f"aria-label='{html.escape(title)}'>{_shown(row['text'])}"
                     f"<span class='tv-pop'>{''.join(lines)}</span></span>")
    return "<div class='tv'>" + "".join(spans) + "</div>"


def branch_request(prompt_ids: Sequence[int], token_ids: Sequence[int], pos: int, token_id: int,
                   params: SamplingParams, **request: Any) -> GenerationRequest | None:
    """The request that continues from ``pos`` with ``token_id`` in place of the token chosen there.

    Its prompt is the original prompt, the tokens before ``pos`` and the new token; it may make what is left
    of ``params.max_new_tokens`` (None when nothing is left: the reply ends with the new token).
    """
    if not 0 <= pos < len(token_ids):
        raise BranchError(f"position {pos} is outside the reply's {len(token_ids)} tokens")
    if not isinstance(token_id, int) or token_id < 0:
        raise BranchError(f"not a token id: {token_id!r}")
    left = params.max_new_tokens - (pos + 1)
    if left < 1:
        return None
    continued = replace(params, max_new_tokens=left, min_new_tokens=max(0, params.min_new_tokens - pos - 1))
    return GenerationRequest([*prompt_ids, *token_ids[:pos], token_id], continued, **request)


def branched_row(row: dict[str, Any], token_id: int) -> dict[str, Any]:
    """The row at the branch position once ``token_id`` replaces the chosen token (same alternatives)."""
    for alt_id, text, p, pa in row["alts"]:
        if alt_id == token_id:
            return {**row, "id": token_id, "text": text, "p": p, "pa": pa}
    raise BranchError(f"token {token_id} is not one of the alternatives shown at this position")
