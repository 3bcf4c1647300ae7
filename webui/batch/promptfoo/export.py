"""Batch results written as promptfoo writes ``--output results.json``, so promptfoo's own tools (``promptfoo
import``, ``promptfoo view``) read them.
"""

from __future__ import annotations

import json
from typing import Any, Iterable, Mapping, Sequence

from webui.batch.asserts.assertion import Assert
from webui.batch.asserts.types import AssertResult, row_score
from webui.batch.run.prompts import PromptRow
from webui.batch.promptfoo.options import evaluate_metric
from webui.batch.asserts.python import is_python_file
from webui.batch.run.results import ResultRow


def to_promptfoo(rows: Iterable[ResultRow], description: str = "", prompts: Sequence[PromptRow] = (),
                 providers: Mapping[str, str] | None = None, derived: Mapping[str, str] | None = None) -> str:
    """Results as promptfoo writes ``--output results.json``: results.results[] with prompt (raw, label), vars,
    provider (id, label), response, success, score, testIdx/promptIdx, testCase (description, vars, assert) and
    gradingResult (one componentResult per assert, the assertion as promptfoo writes it; an assert-set's own
    result, with its asserts' inside, before theirs), and results.stats.
    ``prompts`` (the run's rows, by index) and ``providers`` (setting label -> promptfoo provider id) give what
    the result rows do not hold; without them the prompt's id is its label and the setting's label its id.
    results.prompts has each prompt and provider's metrics (pass and fail counts, summed named scores and the
    ``derived`` metrics, name -> expression, computed over those as promptfoo does)."""
    by_index = {p.index: p for p in prompts}
    results = []
    for r in rows:
        row = by_index.get(r.prompt_index)
        origin = (row.origin if row is not None else None) or {}
        variables = dict(row.variables) if row is not None else {}
        assertions = [promptfoo_assertion(a) for a in row.asserts] if row is not None else []
        sets = list(origin.get("assertSets", []))
        components = _components(r.asserts, assertions, sets, row.asserts if row is not None else [])
        named = _named_scores(row.asserts if row is not None else [], r.asserts)
        score = r.score if r.score is not None else (row_score(r.asserts) or (1.0 if r.passed is not False else 0))
        results.append({
            "prompt": {"raw": r.prompt, "label": origin.get("prompt", r.prompt_id)}, "vars": variables,
            "provider": {"id": (providers or {}).get(r.setting, r.setting), "label": r.setting},
            "promptIdx": origin.get("promptIdx", 0), "testIdx": origin.get("testIdx", r.prompt_index),
            "testCase": {**({"description": origin["description"]} if origin.get("description") else {}),
                         "vars": variables, "assert": _nested(assertions, sets),
                         **_test_options(row.asserts if row is not None else []),
                         **({"metadata": origin["metadata"]} if origin.get("metadata") else {})},
            "response": {"output": json.loads(r.output) if r.output_json else r.output,
                         "tokenUsage": {"prompt": r.prompt_tokens, "completion": r.completion_tokens,
                                        "total": r.prompt_tokens + r.completion_tokens},
                         **({"metadata": {"toolSteps": r.tool_steps}} if r.tool_steps is not None else {})},
            "success": r.passed is not False, "score": score, "namedScores": named, "latencyMs": _latency_ms(r),
            "error": r.error, "gradingResult": {"pass": r.passed is not False, "score": score, "reason": _reason(r),
                                                "namedScores": named, "componentResults": components}})
    passed = sum(1 for r in results if r["success"])
    return json.dumps({"results": {"version": 3, "results": results, "prompts": _prompt_metrics(results, derived),
                                   "stats": {"successes": passed, "failures": len(results) - passed}},
                       "config": {"description": description}}, indent=2, ensure_ascii=False)


def _components(results: Sequence[AssertResult], assertions: list[dict[str, Any]], sets: list[dict[str, Any]],
                asserts: Sequence[Assert]) -> list[dict[str, Any]]:
    """gradingResult.componentResults as promptfoo writes them: one per assert; an assert-set's own result (its
    weighted score, its pass, its asserts' results inside it) comes first where the set is, then its asserts'."""
    own = [{"pass": a.passed, "score": a.value, "reason": a.detail or "passed",
            "assertion": assertions[i] if i < len(assertions) else {
                "type": a.label.partition(":")[0], "value": a.label.partition(":")[2]}}
           for i, a in enumerate(results)]
    out: list[dict[str, Any]] = []
    for i, component in enumerate(own):
        group = next((g for g in sets if g["members"][0] == i), None)
        if group is not None:
            members = [j for j in group["members"] if j < len(own)]
            inner = [{**own[j], "assertion": _as_written(own[j]["assertion"], w)}
                     for j, w in zip(members, group["weights"])]
            out += [_set_result(group, [results[j] for j in members], inner,
                                [asserts[j] for j in members if j < len(asserts)]), *inner]
        elif not any(i in g["members"] for g in sets):
            out.append(component)
    return out


def _set_result(group: Mapping[str, Any], results: list[AssertResult], inner: list[dict[str, Any]],
                asserts: Sequence[Assert]) -> dict[str, Any]:
    """An assert-set's GradingResult as promptfoo's AssertionsResult gives it: the weighted score of its asserts,
    passing on it against its threshold when it has one, else when every assert passes."""
    score = row_score(results) or 0.0
    limit = group.get("threshold")
    if limit:
        passed = score >= limit
        reason = f"Aggregate score {score:.2f} {'≥' if passed else '<'} {limit:g} threshold"
    else:
        failed = [c["reason"] for c in inner if not c["pass"]]
        passed, reason = not failed, failed[-1] if failed else "All assertions passed"
    return {"pass": passed, "score": score, "reason": reason, "namedScores": _named_scores(asserts, results),
            "tokensUsed": {"total": 0, "prompt": 0, "completion": 0, "cached": 0}, "componentResults": inner,
            "assertion": None}


def _nested(assertions: list[dict[str, Any]], sets: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A test's asserts as its promptfoo file wrote them: an assert-set's asserts inside it again."""
    out = []
    for i, assertion in enumerate(assertions):
        group = next((g for g in sets if g["members"][0] == i), None)
        if group is not None:
            inner = [_as_written(assertions[j], w) for j, w in zip(group["members"], group["weights"])
                     if j < len(assertions)]
            out.append({"type": "assert-set", "assert": inner,
                        **({"threshold": group["threshold"]} if group.get("threshold") is not None else {}),
                        **({"weight": group["weight"]} if group.get("weight", 1) != 1 else {}),
                        **({"metric": group["metric"]} if group.get("metric") else {})})
        elif not any(i in g["members"] for g in sets):
            out.append(assertion)
    return out


def _as_written(assertion: Mapping[str, Any], weight: float) -> dict[str, Any]:
    """An assert of a set with its own weight again (the row holds its share of the set's)."""
    written = {k: v for k, v in assertion.items() if k != "weight"}
    return {**written, "weight": weight} if weight != 1 else written


def _prompt_metrics(results: list[dict[str, Any]], derived: Mapping[str, str] | None) -> list[dict[str, Any]]:
    """promptfoo's results.prompts: per prompt and provider, its rows' counts and summed named scores, then each
    derived metric evaluated over those sums (in order, so a later one may use an earlier one)."""
    columns: dict[tuple[int, str], dict[str, Any]] = {}
    for r in results:
        key = (r["promptIdx"], r["provider"]["label"])
        column = columns.setdefault(key, {"raw": r["prompt"]["raw"], "label": r["prompt"]["label"],
                                          "provider": r["provider"]["id"], "metrics": {
                                              "score": 0.0, "testPassCount": 0, "testFailCount": 0,
                                              "assertPassCount": 0, "assertFailCount": 0,
                                              "tokenUsage": {"prompt": 0, "completion": 0, "total": 0},
                                              "namedScores": {}, "namedScoresCount": {}}})
        metrics = column["metrics"]
        metrics["score"] += r["score"]
        metrics["testPassCount" if r["success"] else "testFailCount"] += 1
        for component in r["gradingResult"]["componentResults"]:
            metrics["assertPassCount" if component["pass"] else "assertFailCount"] += 1
        for part in ("prompt", "completion", "total"):
            metrics["tokenUsage"][part] += r["response"]["tokenUsage"][part]
        for name, score in r["namedScores"].items():  # counted by the asserts that name it, as promptfoo counts
            metrics["namedScores"][name] = metrics["namedScores"].get(name, 0.0) + score
            named = sum(1 for c in r["gradingResult"]["componentResults"]
                        if (c["assertion"] or {}).get("metric") == name)
            metrics["namedScoresCount"][name] = metrics["namedScoresCount"].get(name, 0) + (named or 1)
    for column in columns.values():
        scores = column["metrics"]["namedScores"]
        for name, expression in (derived or {}).items():
            scores[name] = evaluate_metric(expression, scores)
    return list(columns.values())


def _test_options(asserts: Sequence[Assert]) -> dict[str, Any]:
    """The test's ``options`` promptfoo keeps there and the reader put on its asserts: factuality's scores."""
    factuality = next((a.options["factuality"] for a in asserts if a.options.get("factuality") is not None), None)
    return {"options": {"factuality": dict(factuality)}} if factuality is not None else {}


def promptfoo_assertion(a: Assert) -> dict[str, Any]:
    """An assert as a promptfoo file writes it: latency's limit as its threshold, a Python file as file://."""
    d = a.to_dict()
    d.pop("factuality", None)  # a test's options.factuality in promptfoo, not the assert's
    d.pop("dialect", None)  # how we check it, not promptfoo's
    if a.kind == "latency":
        d["threshold"] = d.pop("value")
    elif a.kind == "python" and is_python_file(str(d.get("value"))) and not d["value"].startswith("file://"):
        d["value"] = "file://" + d["value"]
    return d


def _named_scores(asserts: Sequence[Assert], results: Sequence[AssertResult]) -> dict[str, float]:
    """promptfoo 0.115's namedScores: each metric the sum of the scores of the asserts that name it, whatever
    their weights (AssertionsResult.addResult: ``namedScores[metric] = (namedScores[metric] || 0) +
    result.score``), so a weight-0 assert still counts, as promptfoo's f-score example counts its confusion
    matrix. (Newer promptfoo averages them by weight instead.)"""
    totals: dict[str, float] = {}
    for given, result in zip(asserts, results):
        if given.metric is not None:
            totals[given.metric] = totals.get(given.metric, 0.0) + result.value
    return totals


def _latency_ms(row: ResultRow) -> int | None:
    if row.ttft is None or not row.tokens_per_second:
        return None
    return round((row.ttft + row.completion_tokens / row.tokens_per_second) * 1000)


def _reason(row: ResultRow) -> str:
    if row.error:
        return row.error
    failed = [f"{a.label}: {a.detail}" for a in row.asserts if not a.passed]
    return "; ".join(failed) or "All assertions passed"
