"""promptfoo's tests as promptfoo users write them, read into cases (one per combination of vars).

What is read: ``tests`` inline or from ``file://`` files and globs (.yaml/.yml/.json
lists of tests, .jsonl a test a line, .csv in promptfoo's CSV form: each column a
var, ``__expected``/``__expected2``... an assert shorthand each (``contains: Paris``,
``icontains-any: a,b``, ``similar(0.9): text``, ``grade: rubric``, plain text meaning
equals), ``__description``, ``__threshold``, ``__metric``, ``__prefix``/``__suffix``,
``__metadata:key`` and ``__config:__expectedN:threshold``); ``defaultTest`` (vars,
assert, options, threshold and metadata apply to every test); ``scenarios`` (each ``config`` entry crossed with
each of its ``tests``, as promptfoo expands them); ``vars`` inline or as a
``file://vars.yaml``, a value ``file://path`` read as promptfoo 0.115 reads it (a text,
.json too, trimmed; .yaml as compact JSON; a glob gives a case per file), a list of texts a case per element (the cartesian
product over several lists, first var slowest), values that use other vars
filled from them. An ``assert-set`` is its asserts with its weight shared among
them by their weights, so the row's score is promptfoo's; one with a ``threshold``
passes on its asserts' weighted score against it (PromptRow.sets), as promptfoo's does.

Problems are collected (:class:`Problems`), each with where it is in the suite,
so a reader reports them all at once.
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator

import yaml

from webui.batch.asserts.kinds import ASSERT_KINDS
from webui.batch.asserts.classify import names_classifier
from webui.batch.asserts.graded_value import budget_only, grader_tokens
from webui.batch.asserts.errors import BatchInputError
from webui.safeload import load_json, load_yaml
from webui.batch.asserts.suite_files import SuiteFiles
from webui.batch.run.prompts import render
from webui.batch.run.provider_prompt import js_stringify

MAX_SHOWN = 20
"""Problems listed in one error; the rest are counted."""
TEST_KEYS = ("description", "vars", "assert", "options", "threshold", "metadata", "prompts")
OPTION_KEYS = ("prefix", "suffix", "transform", "rubricPrompt", "factuality")
"""A test's options the workbench applies; any other (a grading provider...) is refused by name, except a
``huggingface:text-classification:`` provider (the model of the test's classifier asserts without their own) and a
provider that is a grader budget alone, ``{config: {max_tokens: N}}`` (that of its graded asserts without their
own)."""
GRADING_KEYS = ("provider",)
"""defaultTest's options read by :mod:`webui.batch.promptfoo.options` (the run's judge: one for every test)."""
SCRIPT_SUFFIXES = (".py", ".js", ".ts", ".mjs", ".cjs")
PROMPTFOO_ASSERT_TYPES = frozenset((
    "answer-relevance", "bleu", "classifier", "contains", "contains-all", "contains-any", "contains-html",
    "contains-json", "contains-sql", "contains-xml", "context-faithfulness", "context-recall", "context-relevance",
    "conversation-relevance", "cost", "equals", "factuality", "finish-reason", "g-eval", "gleu", "guardrails",
    "icontains", "icontains-all", "icontains-any", "is-html", "is-json", "is-refusal", "is-sql",
    "is-valid-function-call", "is-valid-openai-function-call", "is-valid-openai-tools-call", "is-xml", "javascript",
    "latency", "levenshtein", "llm-rubric", "pi", "meteor", "model-graded-closedqa", "model-graded-factuality",
    "moderation", "perplexity", "perplexity-score", "python", "regex", "rouge-n", "ruby", "similar", "starts-with",
    "trace-error-spans", "trace-span-count", "trace-span-duration", "webhook", "word-count", *ASSERT_KINDS))
"""The types promptfoo 0.115's CSV shorthand recognises (``type:value``); other text is an ``equals`` value."""
_KEPT_AS_GIVEN = ("rubricPrompt", "factuality", "provider")
"""Options that are not texts: read by the asserts they apply to."""
SET_KEY = "__assert_set"
"""Marks an assert of an assert-set: {where: the set's place, threshold: its threshold or None, weight: the set's,
metric: the set's or None, own: the assert's own weight}; the reader takes it off."""
_THRESHOLD_DEFAULTS = {"similar": 0.8}
"""What promptfoo's CSV shorthand sets as the threshold when none is written in parentheses."""


class Problems:
    """Every problem found while reading a suite, each with where it is; :meth:`raise_any` raises them as one
    BatchInputError (the first :data:`MAX_SHOWN`, and how many more)."""

    def __init__(self) -> None:
        self.found: list[str] = []

    def add(self, where: str, message: str) -> None:
        message = message.removeprefix("promptfoo config: ")
        text = f"{where}: {message}" if where and not message.startswith(where) else message
        if text not in self.found:  # a var expanded into several cases repeats its asserts' problems
            self.found.append(text)

    @contextmanager
    def collect(self, where: str = "") -> Iterator[None]:
        """Record a BatchInputError raised inside as a problem at ``where`` and go on."""
        try:
            yield
        except BatchInputError as exc:
            self.add(where, str(exc))

    def raise_any(self) -> None:
        if not self.found:
            return
        if len(self.found) == 1:
            raise BatchInputError(f"promptfoo config: {self.found[0]}")
        shown = "\n".join(f"- {p}" for p in self.found[:MAX_SHOWN])
        more = f"\n- and {len(self.found) - MAX_SHOWN} more" if len(self.found) > MAX_SHOWN else ""
        raise BatchInputError(f"promptfoo config: {len(self.found)} problems:\n{shown}{more}")


@dataclass(frozen=True)
class Case:
    """One promptfoo test with one combination of its vars: what a row of each prompt is made from."""

    where: str
    """Where the test is in the suite (``tests[2]``, ``tests.csv row 4``, ``scenarios[0].config[1] x tests[0]``)."""
    index: int
    """The test's position among the suite's tests (promptfoo's testIdx)."""
    description: str | None
    variables: dict[str, str]
    asserts: list[tuple[str, dict[str, Any]]]
    """(where, promptfoo's assert dict) each; values are filled from the vars when the rows are made."""
    threshold: float | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)
    prompts: tuple[str, ...] | None = None
    """The prompts the test runs on, by label or id (``*`` a wildcard), its own or defaultTest's; None: all."""


@dataclass(frozen=True)
class _Test:
    where: str
    data: dict[str, Any]
    assert_where: tuple[str, ...] | None = None
    """Where each assert is when not ``<where>.assert[i]`` (a CSV cell)."""


def read_cases(config: dict[str, Any], files: SuiteFiles, problems: Problems) -> list[Case]:
    """The suite's tests (then its scenarios' tests), defaultTest merged in, one case per vars combination."""
    default = config.get("defaultTest") or {}
    if not isinstance(default, dict):
        problems.add("defaultTest", "must be a mapping (vars, assert, options, threshold, metadata)")
        default = {}
    _check_test_keys(default, "defaultTest", problems)
    tests = _test_items(config.get("tests"), files, "tests", problems)
    for s, scenario in enumerate(_listed(config.get("scenarios"), "scenarios", problems)):
        tests += _scenario(scenario, files, f"scenarios[{s}]", problems)
    cases: list[Case] = []
    for index, test in enumerate(tests or [_Test("tests", {})]):
        cases += _cases(index, test, default, files, problems)
    return cases


def _listed(given: Any, where: str, problems: Problems) -> list[Any]:
    if given is None:
        return []
    if not isinstance(given, list):
        problems.add(where, "must be a list")
        return []
    return given


def _scenario(scenario: Any, files: SuiteFiles, where: str, problems: Problems) -> list[_Test]:
    """A scenario's tests: each of its ``config`` entries merged under each of its ``tests``."""
    if not isinstance(scenario, dict):
        problems.add(where, "must be a mapping with config (a list of vars/asserts) and tests")
        return []
    unknown = set(scenario) - {"description", "config", "tests"}
    if unknown:
        problems.add(where, f"unknown key(s) {', '.join(sorted(map(str, unknown)))} (a scenario takes description, "
                            "config and tests)")
    configs = _listed(scenario.get("config"), f"{where}.config", problems) or [{}]
    tests = _test_items(scenario.get("tests"), files, f"{where}.tests", problems) or [_Test("", {})]
    out = []
    for c, data in enumerate(configs):
        at = f"{where}.config[{c}]"
        if not isinstance(data, dict):
            problems.add(at, "must be a mapping (vars, assert, ...)")
            continue
        _check_test_keys(data, at, problems)
        own = [f"{at}.assert[{i}]" for i in range(len(_as_list(data.get("assert"))))]
        for test in tests:
            given = _as_list(test.data.get("assert"))
            merged = {**data, **test.data, "vars": {**_vars_of(data.get("vars"), at, files, problems),
                                                    **_vars_of(test.data.get("vars"), test.where, files, problems)},
                      "metadata": {**_dict(data.get("metadata")), **_dict(test.data.get("metadata"))},
                      "assert": [*_as_list(data.get("assert")), *given]}
            places = test.assert_where or tuple(f"{test.where}.assert[{i}]" for i in range(len(given)))
            out.append(_Test(f"{at} x {test.where}" if test.where else at, merged, (*own, *places)))
    return out


def _dict(given: Any) -> dict[str, Any]:
    return given if isinstance(given, dict) else {}


def _as_list(given: Any) -> list[Any]:
    return given if isinstance(given, list) else []


def _check_test_keys(test: dict[str, Any], where: str, problems: Problems) -> None:
    unknown = set(test) - set(TEST_KEYS)
    if unknown:
        problems.add(where, f"unknown or unsupported key(s) {', '.join(sorted(map(str, unknown)))} (a test takes "
                            f"{', '.join(TEST_KEYS)})")
    options = test.get("options")
    if options is not None and not isinstance(options, dict):
        problems.add(f"{where}.options", "must be a mapping")
    elif options:
        grading = GRADING_KEYS if where == "defaultTest" else ()
        for key in sorted(set(options) - set(OPTION_KEYS) - set(grading)):
            if key == "provider" and names_classifier(options[key]):
                continue  # the test's classifier asserts' model (webui.batch.asserts.classify)
            if key == "provider" and budget_only(options[key]):
                with problems.collect(f"{where}.options.provider.config"):
                    grader_tokens(options[key]["config"])
                continue  # the grader budget of the test's graded asserts without their own (reader._assert)
            why = " (the judge is the run's: set it in defaultTest.options)" if key in GRADING_KEYS else ""
            problems.add(f"{where}.options.{key}", f"not supported here{why} (options here: {', '.join(OPTION_KEYS)}"
                                                   f"; defaultTest's also {', '.join(GRADING_KEYS)})")
    threshold = test.get("threshold")
    if threshold is not None and (isinstance(threshold, bool) or not isinstance(threshold, (int, float))
                                  or not 0 <= threshold <= 1):
        problems.add(f"{where}.threshold", f"must be a score between 0 and 1, got {threshold!r}")
    if test.get("metadata") is not None and not isinstance(test["metadata"], dict):
        problems.add(f"{where}.metadata", "must be a mapping")
    chosen = test.get("prompts")
    if chosen is not None and not (isinstance(chosen, list) and chosen and all(isinstance(p, str) for p in chosen)):
        problems.add(f"{where}.prompts", "must be a list of prompt labels or ids (a * matches any text)")


def _cases(index: int, test: _Test, default: dict[str, Any], files: SuiteFiles, problems: Problems) -> list[Case]:
    data, where = test.data, test.where
    _check_test_keys(data, where, problems)
    variables = {**_vars_of(default.get("vars"), "defaultTest", files, problems),
                 **_vars_of(data.get("vars"), where, files, problems)}
    own = _as_list(data.get("assert"))
    if data.get("assert") is not None and not isinstance(data.get("assert"), list):
        problems.add(f"{where}.assert", "must be a list")
    places = test.assert_where or tuple(f"{where}.assert[{i}]" for i in range(len(own)))
    items = [*assert_items(default.get("assert"), "defaultTest.assert", problems),
             *[pair for place, item in zip(places, own) for pair in assert_items([item], place, problems, True)]]
    threshold = data.get("threshold", default.get("threshold"))  # 0 is none: promptfoo tests it for truth
    options = {**_dict(default.get("options")), **_dict(data.get("options"))}
    metadata = {**_dict(default.get("metadata")), **_dict(data.get("metadata"))}
    description = data.get("description")
    chosen = data.get("prompts", default.get("prompts"))
    chosen = tuple(chosen) if isinstance(chosen, list) and all(isinstance(p, str) for p in chosen) else None
    out = []
    for combination in expand_vars(variables, files, where, problems):
        out.append(Case(where, index, None if description is None else str(description), combination, items,
                        threshold if isinstance(threshold, (int, float)) and threshold else None, metadata,
                        {k: v if k in _KEPT_AS_GIVEN else str(v) for k, v in options.items()
                         if k in OPTION_KEYS or (k == "provider" and (names_classifier(v) or budget_only(v)))},
                        chosen or None))
    return out


def assert_items(given: Any, where: str, problems: Problems, placed: bool = False) -> list[tuple[str, dict]]:
    """(where, assert dict) for each assert; an ``assert-set`` gives its asserts, its weight (default 1) shared
    among them in proportion to theirs, so the row's weighted score is promptfoo's. ``placed``: ``where`` is the
    one assert's own place (not the list's)."""
    if given is None:
        return []
    if not isinstance(given, list):
        problems.add(where, "must be a list")
        return []
    out: list[tuple[str, dict]] = []
    for i, item in enumerate(given):
        at = where if placed else f"{where}[{i}]"
        if not isinstance(item, dict) or not isinstance(item.get("type"), str):
            problems.add(at, "needs a type")
        elif item["type"] == "assert-set":
            out += _assert_set(item, at, problems)
        else:
            out.append((at, item))
    return out


def _assert_set(item: dict[str, Any], where: str, problems: Problems) -> list[tuple[str, dict]]:
    unknown = set(item) - {"type", "assert", "weight", "metric", "threshold"}
    if unknown:
        problems.add(where, f"{', '.join(sorted(map(str, unknown)))} not supported on an assert-set here (it takes "
                            "assert, weight, metric and threshold)")
    if any(isinstance(a, dict) and a.get("type") == "assert-set" for a in _as_list(item.get("assert"))):
        problems.add(f"{where}.assert", "an assert-set inside an assert-set is not read here; list its asserts in "
                                        "the outer set")
    limit = item.get("threshold")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, (int, float)) or not 0 <= limit <= 1):
        problems.add(f"{where}.threshold", f"must be a score between 0 and 1, got {limit!r}")
        limit = None
    inner = assert_items(item.get("assert"), f"{where}.assert", problems)
    weights = [float(a.get("weight", 1)) if isinstance(a.get("weight", 1), (int, float)) else 1.0 for _, a in inner]
    total, share = sum(weights), item.get("weight", 1)
    if not isinstance(share, (int, float)) or isinstance(share, bool) or share < 0:
        problems.add(f"{where}.weight", f"must be a number >= 0, got {share!r}")
        share = 1
    metric = {"metric": item["metric"]} if item.get("metric") is not None else {}
    # with a threshold, the set passes on its asserts' weighted score (promptfoo's), whatever each says
    marks = [{"where": where, "threshold": float(limit) if limit else None, "weight": share,  # 0: none (promptfoo's)
              "metric": item.get("metric"), "own": w} for w in weights]
    return [(at, {**metric, **a, "weight": share * w / total if total else 0, SET_KEY: mark})
            for (at, a), w, mark in zip(inner, weights, marks)]


# -- test files ----------------------------------------------------------------------------------------


def _test_items(given: Any, files: SuiteFiles, where: str, problems: Problems) -> list[_Test]:
    if given is None:
        return []
    out: list[_Test] = []
    for i, item in enumerate(given if isinstance(given, list) else [given]):
        at = f"{where}[{i}]" if isinstance(given, list) else where
        if isinstance(item, str) and item.startswith("file://"):
            out += _test_files(files, item.removeprefix("file://"), at, problems)
        elif isinstance(item, dict):
            out.append(_Test(at, item))
        else:
            problems.add(at, "must be a mapping (vars, assert) or a file://tests.yaml (.csv, .jsonl, .json) path")
    return out


def _test_files(files: SuiteFiles, pattern: str, where: str, problems: Problems) -> list[_Test]:
    try:
        paths = files.paths(pattern)
    except BatchInputError as exc:
        problems.add(where, str(exc))
        return []
    if not paths:
        problems.add(where, f"no file matches {pattern}")
    out: list[_Test] = []
    for path in paths:
        name = files.name_of(path)
        try:
            text = path.read_text(encoding="utf-8-sig")
        except (OSError, UnicodeDecodeError) as exc:
            problems.add(where, f"cannot read the test file {name}: {exc}")
            continue
        suffix = path.suffix.lower()
        if suffix == ".csv":
            out += csv_tests(text, name, problems)
        elif suffix == ".jsonl":
            for n, line in enumerate(text.splitlines(), 1):
                if line.strip():
                    with problems.collect(f"{name} line {n}"):
                        out.append(_Test(f"{name} line {n}", _mapping(_parsed(line, ".json"), "a test")))
        elif suffix in (".yaml", ".yml", ".json"):
            with problems.collect(name):
                data = _parsed(text, suffix)
                data = data if isinstance(data, list) else [data]
                for n, test in enumerate(data):
                    with problems.collect(f"{name}[{n}]"):
                        out.append(_Test(f"{name}[{n}]", _mapping(test, "a test (vars, assert)")))
        else:
            problems.add(where, f"{name}: test files are read as .csv, .yaml, .yml, .json or .jsonl")
    return out


def _parsed(text: str, suffix: str) -> Any:
    try:
        return load_json(text) if suffix == ".json" else load_yaml(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise BatchInputError(f"not valid {suffix[1:].upper()}: {exc}") from None


def _mapping(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise BatchInputError(f"must be {what}, got {json.dumps(value, ensure_ascii=False, default=str)[:60]}")
    return value


def csv_tests(text: str, name: str, problems: Problems) -> list[_Test]:
    """promptfoo's CSV tests: a header row, then a test a row (rows counted from 1 after the header)."""
    try:
        rows = list(csv.DictReader(io.StringIO(text)))
    except csv.Error as exc:
        problems.add(name, f"not valid CSV: {exc}")
        return []
    out = []
    for n, row in enumerate(rows, 1):
        where = f"{name} row {n}"
        test: dict[str, Any] = {"vars": {}, "assert": []}
        places: list[str] = []
        columns: list[str] = []  # the column of each assert
        limits: dict[int, tuple[str, float]] = {}  # __config:__expectedN:threshold: {assert index: (column, it)}
        metric = None
        extra, missing = row.pop(None, None), [c for c, v in row.items() if v is None]
        if extra or missing:  # promptfoo's CSV reader refuses rows of another length too
            problems.add(where, f"has {len(row) + len(extra or ()) - len(missing)} cells but the header has "
                                f"{len(row)} columns; quote cells that hold commas")
            continue
        for column, value in row.items():
            if column.startswith("__expected"):
                if value.strip():
                    test["assert"].append(assertion_from_string(value.strip()))
                    places.append(f"{where} column {column}")
                    columns.append(column)
            elif column.startswith("__config:"):
                with problems.collect(f"{where} column {column}"):
                    limits.update(_csv_config(column, value))
            elif column in ("__prefix", "__suffix"):
                test.setdefault("options", {})[column[2:]] = value
            elif column == "__description":
                if value:
                    test["description"] = value
            elif column == "__metric":
                metric = value
            elif column == "__threshold":
                try:
                    test["threshold"] = float(value) if value.strip() else None
                except ValueError:
                    problems.add(f"{where} column __threshold", f"'{value}' is not a number")
            elif column.startswith("__metadata:"):
                key = column.removeprefix("__metadata:")
                meta = test.setdefault("metadata", {})
                if key.endswith("[]") and value.strip():  # a list: comma-separated, \, a comma inside an item
                    meta[key[:-2]] = [v.strip().replace("\\,", ",") for v in re.split(r"(?<!\\),", value)]
                elif value.strip():
                    meta[key] = value
            elif column == "__metadata":
                problems.add(f"{where} column __metadata", "needs a key: name the column __metadata:KEY")
            elif column == "__providerOutput":
                problems.add(f"{where} column __providerOutput", "not supported here (the workbench generates "
                                                                 "every output)")
            else:
                test["vars"][column] = value
        for index, (column, _) in limits.items():
            if index >= len(columns):
                problems.add(f"{where} column {column}", f"sets assert {index + 1}'s threshold, but this row has "
                                                         f"{len(columns)} assert(s) (its non-empty __expected "
                                                         f"columns, in order: {', '.join(columns) or 'none'})")
        test["assert"] = [{**a, **({"metric": metric} if metric else {}),
                           **({"threshold": limits[i][1]} if i in limits else {})}
                          for i, a in enumerate(test["assert"])]
        if test.get("threshold") is None:
            test.pop("threshold", None)
        out.append(_Test(where, test, tuple(places)))
    return out


def _csv_config(column: str, value: str) -> dict[int, tuple[str, float]]:
    """promptfoo's ``__config:__expectedN:threshold`` column: {the index of the assert it sets: (the column, the
    threshold)}. As promptfoo's csv.ts reads it: ``__expected`` is the row's first assert, ``__expectedN`` its Nth,
    counting the row's non-empty ``__expected`` columns in order (not the column of that name); a blank cell sets
    nothing."""
    parts = column.removeprefix("__config:").split(":")
    if len(parts) != 2 or not re.fullmatch(r"__expected\d*", parts[0]) or parts[1] != "threshold":
        raise BatchInputError("write __config:__expected:threshold or __config:__expectedN:threshold (threshold is "
                              "the one setting a CSV column gives an assert)")
    if not value.strip():
        return {}
    if not _is_number(value):
        raise BatchInputError(f"'{value}' is not a number")
    number = int(parts[0].removeprefix("__expected") or 1)
    if number < 1:
        raise BatchInputError("__expected0 names no assert: the first is __expected or __expected1")
    return {number - 1: (column, float(value))}


def assertion_from_string(text: str) -> dict[str, Any]:
    """An assert from promptfoo's CSV shorthand: ``[not-]type[(threshold)][:value]`` for a type promptfoo knows,
    ``grade:``/``llm-rubric:`` a rubric, ``python:``/``file://x.py`` Python, ``javascript:``/``fn:`` JavaScript;
    any other text means equals that text."""
    for prefix, kind in (("javascript:", "javascript"), ("fn:", "javascript"), ("eval:", "javascript"),
                         ("grade:", "llm-rubric"), ("llm-rubric:", "llm-rubric"), ("python:", "python")):
        if text.startswith(prefix):
            value = text[len(prefix):]
            return {"type": kind, "value": value.strip()}
    if text.startswith("file://") and (text.endswith(".py") or ".py:" in text):
        return {"type": "python", "value": text}
    if text.startswith("file://") and any(text.endswith(s) or f"{s}:" in text for s in (".js", ".ts")):
        return {"type": "javascript", "value": text}
    written, colon, value = text.partition(":")
    kind, _, threshold = written.partition("(")
    plain = kind.removeprefix("not-")
    if plain not in PROMPTFOO_ASSERT_TYPES or (threshold and not _is_number(threshold.removesuffix(")"))) \
            or (threshold and not threshold.endswith(")")):
        return {"type": "equals", "value": text}
    out: dict[str, Any] = {"type": kind}
    if plain in ("contains-all", "contains-any", "icontains-all", "icontains-any"):
        out["value"] = [v.strip() for v in value.split(",")]
    elif colon:
        out["value"] = value if plain == "equals" else value.strip()
    limit = float(threshold[:-1]) if threshold else _THRESHOLD_DEFAULTS.get(plain)
    if limit is not None:
        out["threshold"] = limit
    return out


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


# -- vars ----------------------------------------------------------------------------------------------


def _vars_of(given: Any, where: str, files: SuiteFiles, problems: Problems) -> dict[str, Any]:
    """A test's vars as written: a mapping, or ``file://vars.yaml`` (.json) holding one."""
    if isinstance(given, str) and given.startswith("file://"):
        with problems.collect(f"{where}.vars"):
            path = files.path(given.removeprefix("file://"))
            if path.suffix.lower() not in (".yaml", ".yml", ".json"):
                raise BatchInputError(f"{path.name}: a vars file is read as YAML or JSON (a mapping of names to "
                                      "values)")
            try:
                text = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise BatchInputError(f"cannot read {path}: {exc}") from None
            return {str(k): v for k, v in _mapping(_parsed(text, path.suffix.lower()), "a mapping of names to "
                                                                                          "values").items()}
        return {}
    if given is None:
        return {}
    if not isinstance(given, dict):
        problems.add(f"{where}.vars", "must be a mapping of names to values or a file://vars.yaml path")
        return {}
    return {str(k): v for k, v in given.items()}


def expand_vars(variables: dict[str, Any], files: SuiteFiles, where: str, problems: Problems) -> list[dict[str, str]]:
    """Each combination of the vars, as promptfoo expands them: a list of texts is a combination per element,
    a ``file://`` glob one per file (each read), the cartesian product over several, the first var slowest;
    then values that use other vars (``{{name}}``) are filled from them."""
    choices: list[list[str]] = []
    for name, value in variables.items():
        at = f"{where}.vars.{name}"
        if isinstance(value, str) and value.startswith("file://"):
            values = _var_files(files, value.removeprefix("file://"), at, problems)
        elif isinstance(value, list) and value and all(isinstance(v, str) for v in value):
            values = list(value)
        elif isinstance(value, list) and not value:
            problems.add(at, "is an empty list, so the test would have no cases; give at least one value")
            values = [""]
        else:
            values = [_text(value)]
        choices.append(values or [""])
    names = list(variables)
    return [nested(dict(zip(names, combination)), where, problems) for combination in itertools.product(*choices)]


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _var_files(files: SuiteFiles, pattern: str, where: str, problems: Problems) -> list[str]:
    """A ``file://`` var's value(s), as promptfoo 0.115's renderPrompt (dist/src/evaluatorHelpers.js) loads them: a
    .yaml/.yml file's data as JSON.stringify writes it (compact: ``vars[varName] =
    JSON.stringify(js_yaml.load(...))``), any other file's text trimmed, a .json file's too (it is not parsed:
    ``vars[varName] = fs.readFileSync(filePath, 'utf8').trim()``); scripts are refused."""
    try:
        paths = [p for p in files.paths(pattern) if p.exists()]
    except BatchInputError as exc:
        problems.add(where, str(exc))
        return []
    if not paths:
        problems.add(where, f"no file matches {pattern}")
    out = []
    for path in paths:
        suffix = path.suffix.lower()
        if suffix in SCRIPT_SUFFIXES:
            problems.add(where, f"{path.name} is a script; promptfoo runs it to get the value and the workbench does "
                                "not run scripts for vars: save its output in a .txt, .json or .yaml file")
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            problems.add(where, f"cannot read {path}: {exc}")
            continue
        if suffix in (".yaml", ".yml"):
            with problems.collect(f"{where} ({path.name})"):
                data = _parsed(text, suffix)
                out.append("" if data is None and not text.strip() else js_stringify(data))  # "": undefined
        else:
            out.append(text.strip())  # promptfoo trims a text it loads for a var
    return out


def nested(variables: dict[str, str], where: str, problems: Problems) -> dict[str, str]:
    """Vars whose values use other vars (``{{name}}``) filled from those, as promptfoo renders vars before the
    prompt (one level: each value from the others as given)."""
    out = {}
    for name, value in variables.items():
        out[name] = value
        if "{{" in value or "{%" in value:
            with problems.collect():
                out[name] = render(value, variables, where=f"{where}.vars.{name}")
    return out
