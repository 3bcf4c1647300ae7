"""A promptfoo suite's run-wide keys: evaluateOptions, outputPath, env, sharing, derivedMetrics, $ref templates,
and defaultTest.options.provider (the judge model).

``evaluateOptions.repeat`` is the run's samples and ``cache: false`` turns the
response cache off; ``maxConcurrency``, ``delay``, ``showProgressBar``,
``timeoutMs`` and ``maxEvalTimeMs`` (how promptfoo paces its API calls), ``env``
and ``sharing`` are named in the notes as not applied. ``outputPath`` is where
``launch.py batch`` writes the results when ``--out`` is not given.
``derivedMetrics`` are computed in the promptfoo export as promptfoo computes
them (over each prompt's summed named scores), by a small arithmetic evaluator:
numbers, metric names, + - * / and parentheses; anything else is refused by name.
``$ref: '#/assertionTemplates/NAME'`` (any JSON pointer into the config) is
replaced by what it points at before the suite is read. ``defaultTest.options.provider``
``workbench:NAME`` is the loaded model that judges; another id is refused, unless a grader is given
(``launch.py batch --grader``, promptfoo's ``eval --grader``; the Batch tab's judge model): it overrides every
grader the suite names (:func:`with_grader`), keeping the token budget each gives (its ``config.max_tokens``).
The budget's precedence (the run's over an assert's over the suite's) is webui.batch.run.judge.step_tokens.
"""

from __future__ import annotations

import ast
import math
import operator
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from webui.batch.asserts.classify import names_classifier
from webui.batch.asserts.errors import BatchInputError
from webui.batch.asserts.graded import GRADED
from webui.batch.asserts.graded_value import grader_tokens
from webui.batch.promptfoo.tests import Problems

NOT_APPLIED = {
    "maxConcurrency": "the engine batches every cell it can", "delay": "no API is called between cells",
    "showProgressBar": "the CLI and the Batch tab always show progress",
    "timeoutMs": "a cell runs until it is done or cancelled", "maxEvalTimeMs": "a run ends when it is done or "
                                                                               "cancelled",
}
"""evaluateOptions keys that pace promptfoo's API calls: named in the notes, not applied."""
GRADER_HINT = "--grader workbench:NAME"
"""How a hosted grader's refusal names the override (a caller that can give a grader looks for it)."""
_OPERATORS: dict[type, Callable[[float, float], float]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}
_SYMBOLS = {ast.Pow: "**", ast.BitXor: "^", ast.Mod: "%", ast.FloorDiv: "//", ast.MatMult: "@", ast.BitAnd: "&",
            ast.BitOr: "|", ast.LShift: "<<", ast.RShift: ">>"}


@dataclass(frozen=True)
class SuiteOptions:
    """What a suite's run-wide keys set."""

    samples: int = 1
    use_cache: bool = True
    output_path: str | None = None
    derived_metrics: dict[str, str] = field(default_factory=dict)
    """name -> expression over named scores, in the suite's order."""
    judge_model: str = ""
    """The loaded model that judges (defaultTest.options.provider); "": the run's choice."""
    judge_tokens: int | None = None
    """The most tokens the judge writes per grading step (defaultTest.options.provider's config.max_tokens, as
    promptfoo caps its grader); None: each step's own budget."""


def resolve_refs(config: Any, problems: Problems) -> Any:
    """``config`` with every ``{$ref: '#/a/b'}`` replaced by what the pointer names in ``config``."""
    def walk(node: Any, where: str, depth: int) -> Any:
        if isinstance(node, dict) and "$ref" in node:
            if depth > 20:
                problems.add(where, "$ref: the references go round in a circle")
                return {}
            target = _pointed(config, node["$ref"], where, problems)
            return walk(target, where, depth + 1) if target is not None else node
        if isinstance(node, dict):
            return {k: walk(v, f"{where}.{k}" if where else str(k), depth) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v, f"{where}[{i}]", depth) for i, v in enumerate(node)]
        return node

    return walk(config, "", 0)


def _pointed(config: Any, ref: Any, where: str, problems: Problems) -> Any:
    if not isinstance(ref, str) or not ref.startswith("#/"):
        problems.add(where, f"$ref {ref!r}: only references inside the config (#/assertionTemplates/NAME) are read")
        return None
    node = config
    for part in ref[2:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            problems.add(where, f"$ref {ref}: the config has nothing at {part!r}")
            return None
    return node


def grader_model(grader: str) -> str:
    """The loaded model a grader id names (``workbench:NAME`` or a bare NAME); BatchInputError for a hosted one."""
    name = grader.strip().removeprefix("workbench:").strip()
    if not name or ":" in name:
        raise BatchInputError(f"grader {grader!r}: the grader here is a model loaded by the workbench; write "
                              "workbench:NAME (or NAME), or judge on a server with --judge-url")
    return name


def with_grader(config: Mapping[str, Any], grader: str, notes: list[str]) -> dict[str, Any]:
    """``config`` with every grading provider it names (defaultTest's and a test's options.provider, a graded
    assert's provider) taken out, each named in ``notes``: the grader judges them all, as promptfoo's
    ``eval --grader`` overrides every grader. A classifier's model is kept (it is no grader)."""
    def test(item: Any, where: str) -> Any:
        if not isinstance(item, dict):
            return item
        out = dict(item)
        options = out.get("options")
        if isinstance(options, dict) and options.get("provider") is not None \
                and not names_classifier(options["provider"]):
            kept = _budget_of(options["provider"])
            notes.append(f"{where}.options.provider is replaced by the grader {grader}"
                         + (" (its config.max_tokens is kept: the grader's token budget)" if kept else ""))
            out["options"] = {**{k: v for k, v in options.items() if k != "provider"}, **kept}
        if isinstance(out.get("assert"), list):
            out["assert"] = [_without_provider(a, f"{where}.assert[{i}]", grader, notes)
                             for i, a in enumerate(out["assert"])]
        return out

    out = dict(config)
    if "defaultTest" in out:
        out["defaultTest"] = test(out["defaultTest"], "defaultTest")
    if isinstance(out.get("tests"), list):
        out["tests"] = [test(t, f"tests[{i}]") for i, t in enumerate(out["tests"])]
    return out


def _without_provider(item: Any, where: str, grader: str, notes: list[str]) -> Any:
    kind = str(item.get("type", "")).removeprefix("not-") if isinstance(item, dict) else ""
    if kind not in GRADED or item.get("provider") is None or names_classifier(item["provider"]):
        return item
    kept = _budget_of(item["provider"])
    notes.append(f"{where}.provider is replaced by the grader {grader}"
                 + (" (its config.max_tokens is kept: the assert's grader token budget)" if kept else ""))
    return {**{k: v for k, v in item.items() if k != "provider"}, **kept}


def _budget_of(provider: Any) -> dict[str, Any]:
    """What a replaced grading provider leaves: its token budget, as ``{provider: {config: {max_tokens}}}`` (a
    budget without a model: the run's grader writes at most that); {} where it gives none."""
    config = provider.get("config") if isinstance(provider, dict) else None
    if not isinstance(config, dict) or config.get("max_tokens") is None:
        return {}
    return {"provider": {"config": {"max_tokens": config["max_tokens"]}}}


def suite_options(config: Mapping[str, Any], problems: Problems, notes: list[str], grader: str = "") -> SuiteOptions:
    """The suite's run-wide keys read; what is not applied is added to ``notes``. ``grader``: the loaded model
    that judges instead of any the suite names (a name, from :func:`grader_model`)."""
    samples, use_cache = _evaluate_options(config.get("evaluateOptions"), problems, notes)
    output = config.get("outputPath")
    if output is not None and not isinstance(output, str):
        problems.add("outputPath", "must be a file path (results.json, results.csv or results.jsonl)")
        output = None
    if output:
        notes.append(f"outputPath: launch.py batch writes the results to {output} when --out is not given; the Batch "
                     "tab's export downloads them instead")
    for key, why in (("env", "the workbench's providers read no API keys or endpoints"),
                     ("sharing", "results are not shared anywhere; export them from the Batch tab")):
        if config.get(key):
            notes.append(f"{key} is not applied ({why})")
    judge, tokens = _judge_model(config.get("defaultTest"), problems)
    return SuiteOptions(samples, use_cache, output, derived_metrics(config.get("derivedMetrics"), problems),
                        grader or judge, tokens)


def _evaluate_options(given: Any, problems: Problems, notes: list[str]) -> tuple[int, bool]:
    if given is None:
        return 1, True
    if not isinstance(given, dict):
        problems.add("evaluateOptions", "must be a mapping (repeat, cache, maxConcurrency...)")
        return 1, True
    samples, use_cache = 1, True
    for key, value in given.items():
        where = f"evaluateOptions.{key}"
        if key == "repeat":
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                problems.add(where, f"must be a whole number >= 1, got {value!r}")
            else:
                samples = value
        elif key == "cache":
            use_cache = value is not False
            if not use_cache:
                notes.append(f"{where}: false is applied (no response is taken from the response cache)")
        elif key in NOT_APPLIED:
            notes.append(f"{where} is not applied ({NOT_APPLIED[key]})")
        else:
            problems.add(where, f"unknown key (evaluateOptions here: repeat, cache, {', '.join(NOT_APPLIED)})")
    return samples, use_cache


def _judge_model(default: Any, problems: Problems) -> tuple[str, int | None]:
    """(the judge model defaultTest.options.provider names ("": none named), its token budget per grading step:
    its ``config.max_tokens``, None where it gives none)."""
    options = default.get("options") if isinstance(default, dict) else None
    if not isinstance(options, dict):
        return "", None
    judge, tokens = "", None
    provider = options.get("provider")
    if provider is not None and not names_classifier(provider):  # a classifier's model: the asserts read it
        if isinstance(provider, dict) and "config" in provider:
            tokens = _grader_tokens(provider["config"], problems)
        if isinstance(provider, dict) and set(provider) == {"config"}:  # a budget alone (a grader replaced it)
            return "", tokens
        pid = provider.get("id") if isinstance(provider, dict) else provider
        name = pid.removeprefix("workbench:").strip() if isinstance(pid, str) else ""
        if not name or ":" in name or (isinstance(provider, dict) and set(provider) - {"id", "label", "config"}):
            problems.add("defaultTest.options.provider", f"{pid!r} is no loaded model; write workbench:NAME with a "
                                                         "model loaded here (the judge), leave it out to judge with "
                                                         "the model in use, or override every grader of the suite "
                                                         f"with launch.py batch {GRADER_HINT} (promptfoo's eval "
                                                         "--grader; in the Batch tab: the judge model)")
        else:
            judge = name
    return judge, tokens


def _grader_tokens(config: Any, problems: Problems) -> int | None:
    """The grader's ``config.max_tokens`` (the only key of a grader's config read here)."""
    with problems.collect("defaultTest.options.provider.config"):
        return grader_tokens(config)
    return None


def derived_metrics(given: Any, problems: Problems) -> dict[str, str]:
    """derivedMetrics ([{name, value}]) checked: each value an expression :func:`evaluate_metric` computes."""
    if given is None:
        return {}
    if not isinstance(given, list):
        problems.add("derivedMetrics", "must be a list of {name, value}")
        return {}
    out: dict[str, str] = {}
    for i, item in enumerate(given):
        where = f"derivedMetrics[{i}]"
        if not isinstance(item, dict) or not isinstance(item.get("name"), str) or \
                not isinstance(item.get("value"), str) or set(item) - {"name", "value"}:
            problems.add(where, "must be {name, value} with value an expression such as 'Tone * 2'")
            continue
        with problems.collect(f"{where} ({item['name']})"):
            metric_names(item["value"])
            out[item["name"]] = item["value"]
    return out


def metric_names(expression: str) -> list[str]:
    """The metric names an expression uses; anything but numbers, names, + - * / and parentheses is refused."""
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError:
        raise BatchInputError(f"'{expression}' is not an expression (write numbers and metric names with + - * / "
                              "and parentheses)") from None
    names: list[str] = []
    for node in ast.walk(tree.body):
        if isinstance(node, ast.BinOp) and type(node.op) not in _OPERATORS:
            raise BatchInputError(f"'{_SYMBOLS.get(type(node.op), type(node.op).__name__)}' is not supported here "
                                  f"(only + - * / and parentheses over metric names and numbers)")
        if isinstance(node, ast.Call):
            raise BatchInputError(f"{ast.unparse(node.func)}(...) is not supported here (no functions: only + - * / "
                                  f"and parentheses over metric names and numbers)")
        if isinstance(node, ast.Name):
            names.append(node.id)
        elif isinstance(node, ast.Constant) and (isinstance(node.value, bool)
                                                 or not isinstance(node.value, (int, float))):
            raise BatchInputError(f"{node.value!r} is not supported here (numbers and metric names only)")
        elif not isinstance(node, (ast.BinOp, ast.UnaryOp, ast.Name, ast.Constant, ast.Load, ast.operator,
                                   ast.USub, ast.UAdd)):
            raise BatchInputError(f"'{ast.unparse(node)}' is not supported here (only + - * / and parentheses over "
                                  f"metric names and numbers)")
    return list(dict.fromkeys(names))


def evaluate_metric(expression: str, scores: Mapping[str, float | None]) -> float | None:
    """The expression's value over ``scores`` (a name missing from them counts 0, as a prompt that never scored
    it); None where it is not finite (division by zero), as promptfoo's JSON holds null."""
    metric_names(expression)

    def value(node: ast.AST) -> float:
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):  # checked by metric_names
            return float(node.value)
        if isinstance(node, ast.Name):
            given = scores.get(node.id, 0.0)
            return math.nan if given is None else float(given)  # an earlier derived metric that was not finite
        if isinstance(node, ast.UnaryOp):
            return -value(node.operand) if isinstance(node.op, ast.USub) else value(node.operand)
        assert isinstance(node, ast.BinOp)
        left, right = value(node.left), value(node.right)
        if isinstance(node.op, ast.Div) and right == 0:
            return math.nan if left == 0 else math.copysign(math.inf, left)
        return _OPERATORS[type(node.op)](left, right)

    result = value(ast.parse(expression.strip(), mode="eval").body)
    return result if math.isfinite(result) else None
