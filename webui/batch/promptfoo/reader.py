"""promptfoo test suites: read a ``promptfooconfig.yaml`` into a batch job, write results in promptfoo's shape.

What is read: ``prompts`` (every form promptfoo 0.115 takes: :mod:`webui.batch.promptfoo.prompt_forms`;
rendered as promptfoo 0.115 does: a prompt that is JSON has its strings rendered, and each var loses one trailing
newline),
``tests``, ``defaultTest`` and ``scenarios`` (read by
:mod:`webui.batch.promptfoo.tests`: test files, CSV, vars, expansion, ``options``
prefix/suffix/transform) and ``providers`` (read by :mod:`webui.batch.promptfoo.providers`:
each provider one setting, labelled by its ``label`` or ``id``, its ``config`` that
setting's parameters; ``launch.py batch`` loads a ``workbench:NAME`` provider's model).
What a suite names that cannot change an output is listed in the suite's notes. Run-wide keys
(evaluateOptions, outputPath, env, sharing, derivedMetrics, ``$ref`` templates,
defaultTest's grading options): :mod:`webui.batch.promptfoo.options`.
Asserts keep promptfoo's names (contains, icontains,
contains-any, contains-all, equals, regex, starts-with, is-json, similar,
python and javascript (inline or ``file://``, with ``config``), latency,
llm-rubric and the other model-graded kinds (judged by the run's judge, with ``rubricPrompt``;
webui.batch.asserts.graded), their ``not-`` forms, ``weight``,
``threshold``, ``metric`` and ``transform``; values filled from the test's vars);
any other type (levenshtein...) is an error that names it, never skipped. Every
problem of a suite is reported at once. Transforms: webui.batch.asserts.transform.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import yaml

from webui.batch.asserts.kinds import ASSERT_KINDS
from webui.batch.promptfoo.dialect import DIALECT
from webui.batch.promptfoo.kinds import promptfoo_kind
from webui.batch.promptfoo.nunjucks import custom_filters
from webui.batch.asserts.assertion import Assert, parse_assert, with_transforms
from webui.batch.asserts.classify import CLASSIFIER, names_classifier
from webui.batch.asserts.errors import BatchInputError
from webui.safeload import DataTooLarge, load_json, load_yaml
from webui.batch.asserts.suite_files import SuiteFiles
from webui.batch.run.grid import Setting
from webui.batch.run.prompts import PromptRow, render
from webui.batch.promptfoo.options import SuiteOptions, metric_names, resolve_refs, suite_options, with_grader
from webui.batch.promptfoo.prompt_forms import Prompt, read_prompts, text_or_chat
from webui.batch.promptfoo.providers import provider_setting
from webui.batch.promptfoo.tests import SET_KEY, Case, Problems, read_cases
from webui.batch.asserts.transform import check_transforms, resolved

CONFIG_SUFFIXES = (".yaml", ".yml")


def supported() -> list[str]:
    """promptfoo's assert types we run (promptfoo names them as we do): the kinds promptfoo has
    (webui.batch.promptfoo.kinds)."""
    return [name for name in ASSERT_KINDS if promptfoo_kind(name) is not None]


def is_config(name: str | Path) -> bool:
    return Path(name).suffix.lower() in CONFIG_SUFFIXES


@dataclass(frozen=True)
class Suite:
    """A promptfoo suite read for a batch run."""

    description: str
    rows: list[PromptRow]
    settings: list[Setting]
    notes: list[str] = field(default_factory=list)
    """What the suite names that is not applied because it cannot change an output (an apiKey...), each once."""
    options: SuiteOptions = field(default_factory=SuiteOptions)
    """Its run-wide keys: samples (evaluateOptions.repeat), cache, outputPath, derivedMetrics, the judge."""


def load_suite(path: Path, grader: str = "") -> Suite:
    """The suite of a promptfoo config file; ``grader``: see :func:`read_suite`."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BatchInputError(f"cannot read the promptfoo config '{path}': {exc}") from None
    return read_suite(text, Path(path).parent, grader)


def load_config(path: Path) -> tuple[str, list[PromptRow], list[Setting]]:
    """(description, prompt rows, settings) of a promptfoo config file (:func:`load_suite` without its notes)."""
    suite = load_suite(path)
    return suite.description, suite.rows, suite.settings


def read_config(text: str, base: Path | SuiteFiles) -> tuple[str, list[PromptRow], list[Setting]]:
    """(description, prompt rows, settings) of config text (:func:`read_suite` without its notes)."""
    suite = read_suite(text, base)
    return suite.description, suite.rows, suite.settings


def read_suite(text: str, base: Path | SuiteFiles, grader: str = "") -> Suite:
    """The suite of promptfoo config text; ``file://`` paths are relative to ``base`` (a folder: as promptfoo
    reads them; :class:`SuiteFiles`: confined to an upload where it says so). Every problem found is
    reported at once, each with where it is in the suite. ``grader``: a loaded model's name that judges every
    model-graded assert instead of the graders the suite names (promptfoo's ``eval --grader``)."""
    try:
        config = load_yaml(text)
    except (yaml.YAMLError, DataTooLarge) as exc:
        raise BatchInputError(f"promptfoo config: not valid YAML ({exc})") from None
    if not isinstance(config, dict):
        raise BatchInputError("promptfoo config: expected a mapping with prompts, providers and tests")
    files = base if isinstance(base, SuiteFiles) else SuiteFiles(base)
    problems, notes = Problems(), list[str]()
    config = resolve_refs(config, problems)
    config = with_grader(config, grader, notes) if grader else config
    unknown_top = set(config) - {"description", "prompts", "providers", "tests", "defaultTest", "outputPath",
                                 "sharing", "env", "evaluateOptions", "scenarios", "derivedMetrics", "nunjucksFilters",
                                 "assertionTemplates"}
    if unknown_top:
        problems.add("", f"unknown key(s) {', '.join(sorted(unknown_top))}")
    with custom_filters(_custom_filters(config.get("nunjucksFilters"), files, problems)):
        prompts, prompt_ids = read_prompts(config.get("prompts"), files, problems, notes)
        settings, filters = _settings(config.get("providers"), problems, notes, files)
        runs_with = _runs_with([label for label, _, _ in prompts], settings, filters, problems)
        offered = _offered_tools(settings)
        rows: list[PromptRow] = []
        for case in read_cases(config, files, problems):
            name = case.description or f"test {case.index + 1}"
            sets, groups = _sets(case), _set_groups(case)
            asserts = with_transforms(_asserts(case, files, problems, offered),
                                      _case_transform(case, files, problems))
            runs_on = _test_prompts(case, [label for label, _, _ in prompts], prompt_ids, problems)
            for p, (label, prompt, params) in enumerate(prompts):
                if p not in runs_on:
                    continue
                at = f"{case.where} with prompt '{label}'"
                row_id = name if len(prompts) == 1 else f"{name} · {label}"
                origin = {"prompt": label, "promptIdx": p, "testIdx": case.index, "description": case.description,
                          **({"metadata": case.metadata} if case.metadata else {}),
                          **({"assertSets": groups} if groups else {})}
                with problems.collect():
                    row = _row(len(rows), _affixed(prompt, case.options, at), case.variables, asserts, row_id,
                               origin, case.threshold, at)
                    _check_affixes(row, settings, runs_with[p], at)
                    rows.append(dataclasses.replace(row, params=params, settings=runs_with[p], sets=sets))
        options = suite_options(config, problems, notes, grader)
        metrics = {a.metric for row in rows for a in row.asserts if a.metric}
        for name, expression in options.derived_metrics.items():
            unknown = [n for n in metric_names(expression) if n not in metrics]
            if unknown:
                problems.add(f"derivedMetrics ({name})", f"{', '.join(unknown)}: no assert's metric has that name "
                                                         f"(metrics: {', '.join(sorted(metrics)) or 'none'})")
            metrics.add(name)
        problems.raise_any()
        return Suite(str(config.get("description") or "promptfoo suite"), _unique_ids(rows), settings,
                     list(dict.fromkeys(notes)), options)


def _runs_with(labels: list[str], settings: list[Setting], filters: Mapping[str, list[str]],
               problems: Problems) -> list[tuple[str, ...] | None]:
    """For each prompt, the settings that run it (None: all), by each provider's prompts filter: a prompt's label,
    or the start of the labels before ``:`` (promptfoo's groups) or `` #`` (a file's prompts)."""
    def allowed(label: str, names: list[str]) -> bool:
        return any(label == n or label.startswith((f"{n}:", f"{n} #")) for n in names)

    for setting, names in filters.items():
        for n in names:
            if not any(allowed(label, [n]) for label in labels):
                problems.add(f"providers ({setting}).prompts", f"'{n}' is no prompt's label; labels: "
                                                               f"{', '.join(labels)}")
    out: list[tuple[str, ...] | None] = []
    for label in labels:
        chosen = tuple(s.label for s in settings if s.label not in filters or allowed(label, filters[s.label]))
        out.append(None if len(chosen) == len(settings) else chosen)
    return out


def _test_prompts(case: Case, labels: list[str], ids: list[str | None], problems: Problems) -> set[int]:
    """The indices of the prompts a test runs on: all, or those its ``prompts`` names (as promptfoo matches them:
    a prompt's label or id, ``*`` any text, a name before ``:`` the labels it starts); a name no prompt has is a
    problem, as promptfoo refuses it."""
    if case.prompts is None:
        return set(range(len(labels)))
    chosen: set[int] = set()
    for name in case.prompts:
        pattern = re.compile("^" + ".*".join(map(re.escape, name.split("*"))) + "$", re.DOTALL)
        found = {p for p, (label, own) in enumerate(zip(labels, ids))
                 if any(n is not None and pattern.match(n) for n in (label, own)) or label.startswith(f"{name}:")}
        if not found:
            problems.add(f"{case.where}.prompts", f"'{name}' is no prompt's label or id; labels: {', '.join(labels)}")
        chosen |= found
    return chosen


def _custom_filters(given: Any, files: SuiteFiles, problems: Problems) -> dict[str, Path]:
    """promptfoo's ``nunjucksFilters``: {filter name: its JavaScript file (``file://x.js`` or ``./x.js``, relative to
    the suite)}, each a CommonJS module exporting the filter function, run in the javascript asserts' sandbox."""
    if not given:
        return {}
    if not isinstance(given, dict):
        problems.add("nunjucksFilters", "must be a mapping of filter names to JavaScript files ({allcaps: "
                                        "file://allcaps.js})")
        return {}
    out = {}
    for name, value in given.items():
        with problems.collect(f"nunjucksFilters.{name}"):
            path = files.path(str(value).removeprefix("file://"))
            if path.suffix.lower() not in (".js", ".cjs"):
                raise BatchInputError(f"{value}: a filter is a JavaScript file (.js or .cjs) exporting the filter "
                                      "function, as promptfoo loads them")
            if not path.is_file():
                raise BatchInputError(f"{value}: there is no file {path}")
            out[str(name)] = path
    return out


def _row(index: int, prompt: Prompt, variables: dict[str, str], asserts: list[Assert], row_id: str,
         origin: dict[str, Any], threshold: float | None, at: str) -> PromptRow:
    # one trailing newline off each var, as promptfoo's renderPrompt takes it off the test's own vars: the prompt and
    # the asserts (a grader's {{context}}, a script's context.vars) see them so
    given = {name: value.removesuffix("\n") for name, value in variables.items()}
    filled = text_or_chat(_rendered(prompt, given, at), at) if isinstance(prompt, str) else \
        tuple({"role": m["role"], "content": render(m["content"], given, where=at)} for m in prompt)
    if isinstance(filled, str):
        return PromptRow(index, filled, given, asserts, row_id, origin=origin, threshold=threshold)
    # a chat: its messages, and their JSON as its text (promptfoo's raw)
    return PromptRow(index, json.dumps(filled, ensure_ascii=False), given, asserts, row_id, filled, origin,
                     threshold)


def _rendered(prompt: str, variables: Mapping[str, str], where: str) -> str:
    """A text prompt rendered as promptfoo 0.115's renderPrompt renders it: a prompt that is valid JSON (a chat, an
    object, a quoted string) has each of its strings rendered and is written back as JSON with a 2-space indent
    (so a var's quotes and newlines are escaped); any other text is rendered as a template."""
    try:
        data = load_json(prompt)
    except ValueError:
        return render(prompt, variables, where=where)
    if not isinstance(data, (str, list, dict)):
        return render(prompt, variables, where=where)

    def inside(value: Any) -> Any:
        if isinstance(value, str):
            return render(value, variables, where=where)
        if isinstance(value, list):
            return [inside(v) for v in value]
        return {k: inside(v) for k, v in value.items()} if isinstance(value, dict) else value

    return json.dumps(inside(data), ensure_ascii=False, indent=2)


def _affixed(prompt: Prompt, options: Mapping[str, str], where: str) -> Prompt:
    """A prompt with a test's options.prefix and options.suffix around it, as promptfoo adds them."""
    prefix, suffix = options.get("prefix", ""), options.get("suffix", "")
    if not (prefix or suffix):
        return prompt
    if not isinstance(prompt, str):
        raise BatchInputError(f"{where}: options.prefix/suffix apply to text prompts, not to a chat")
    return prefix + prompt + suffix


def _check_affixes(row: PromptRow, settings: list[Setting], runs_on: Sequence[str] | None, where: str) -> None:
    """A chat row cannot run on a provider with a prompt.prefix/suffix (they go around a text)."""
    if row.messages is None:
        return
    affixed = [s.label for s in settings if s.prompt is not None and s.prompt.affixed
               and (runs_on is None or s.label in runs_on)]
    if affixed:
        raise BatchInputError(f"{where}: the provider {affixed[0]}'s prompt.prefix/suffix go around a text prompt, "
                              "and this prompt is a chat; put the text in the chat's messages, or run the chat on "
                              "a provider without them (its prompts filter)")


def _offered_tools(settings: list[Setting]) -> dict[str, Any]:
    """The tools an is-valid-openai-tools-call (functions for -function-call) checks when it gives none: the
    providers' (promptfoo reads them from the provider that ran the row), when they all offer the same; None
    when they differ."""
    found: dict[str, dict[str, Any]] = {}
    for s in settings:
        shape = s.prompt
        if shape is not None and shape.tools is not None:
            kind = "is-valid-openai-function-call" if shape.functions else "is-valid-openai-tools-call"
            listed = shape.tools.functions if shape.functions else list(shape.tools.tools)
            found.setdefault(kind, {})[json.dumps(listed, sort_keys=True)] = listed
    return {kind: next(iter(lists.values())) if len(lists) == 1 else None for kind, lists in found.items()}


def _unique_ids(rows: list[PromptRow]) -> list[PromptRow]:
    """Rows with ids that differ: a test expanded over its vars gives several rows of one description, numbered."""
    seen: dict[str, int] = {}
    for row in rows:
        seen[row.id] = seen.get(row.id, 0) + 1
    count: dict[str, int] = {}
    out = []
    for row in rows:
        if seen[row.id] > 1:
            count[row.id] = count.get(row.id, 0) + 1
            row = dataclasses.replace(row, id=f"{row.id} #{count[row.id]}")
        out.append(row)
    return out


def _asserts(case: Case, files: SuiteFiles, problems: Problems, offered: Mapping[str, Any]) -> list[Assert]:
    """A case's asserts, their values filled from its vars as promptfoo renders them; a tools-call assert without
    a value checks the tools the providers offer (``offered``, by kind; None: they differ)."""
    out = []
    for where, item in case.asserts:
        with problems.collect(where):
            kind = str(item.get("type", "")).removeprefix("not-")
            if item.get("value") is None and kind in offered:
                if offered[kind] is None:
                    raise BatchInputError(f"{kind}: the providers offer different tools; give the ones this assert "
                                          "checks as its value")
                item = {**item, "value": offered[kind]}
            out.append(_assert(_filled(item, case.variables, where), files, case.options))
    return out


def _sets(case: Case) -> tuple[tuple[tuple[int, ...], float], ...]:
    """A case's assert-sets with a threshold: (the indices of their asserts among the case's, the threshold)."""
    return tuple((tuple(group["members"]), group["threshold"]) for group in _set_groups(case)
                 if group["threshold"] is not None)


def _set_groups(case: Case) -> list[dict[str, Any]]:
    """A case's assert-sets as the export writes them back (webui.batch.promptfoo.export): the indices of their
    asserts among the case's, each one's own weight, and the set's threshold, weight and metric."""
    groups: dict[str, dict[str, Any]] = {}
    for i, (_, item) in enumerate(case.asserts):
        mark = item.get(SET_KEY)
        if mark is not None:
            group = groups.setdefault(mark["where"], {"members": [], "weights": [], "threshold": mark["threshold"],
                                                      "weight": mark["weight"], "metric": mark["metric"]})
            group["members"].append(i)
            group["weights"].append(mark["own"])
    return list(groups.values())


def _case_transform(case: Case, files: SuiteFiles, problems: Problems) -> tuple[str, ...]:
    """The transform a case's ``options`` give its outputs (the test's own, else ``defaultTest``'s): none or one."""
    if "transform" not in case.options:
        return ()
    with problems.collect(f"{case.where}.options.transform"):
        return check_transforms(resolved(case.options["transform"], files))
    return ()


def _filled(item: dict[str, Any], variables: Mapping[str, str], where: str) -> dict[str, Any]:
    item = {k: v for k, v in item.items() if k != SET_KEY}  # an assert-set's mark: read by _sets
    value = item.get("value")
    if isinstance(value, str) and ("{{" in value or "{%" in value):
        return {**item, "value": render(value, variables, where=f"{where}.value")}
    if isinstance(value, list) and any(isinstance(v, str) and "{{" in v for v in value):
        return {**item, "value": [render(v, variables, where=f"{where}.value") if isinstance(v, str) else v
                                  for v in value]}
    return item


def _assert(item: dict[str, Any], files: SuiteFiles, options: Mapping[str, Any] | None = None) -> Assert:
    """One assert; ``options``: the test's, whose rubricPrompt applies to graded kinds without their own and
    whose factuality scores apply to factuality asserts."""
    kind = item["type"]
    spec = ASSERT_KINDS.get(kind.removeprefix("not-"))
    own = promptfoo_kind(spec.name) if spec is not None else None
    if spec is None or own is None or own.read is None:
        raise BatchInputError(f"the assert type '{kind}' is not supported here "
                              f"(supported: {', '.join(supported())}, and not- before each)")
    given = options or {}
    if given.get("rubricPrompt") is not None and "rubricPrompt" in spec.value.keys:
        item = {"rubricPrompt": given["rubricPrompt"], **item}
    if given.get("factuality") is not None and spec.name == "factuality":
        item = {"factuality": given["factuality"], **item}
    if given.get("provider") is not None and item.get("provider") is None and (
            (spec.name == CLASSIFIER) == names_classifier(given["provider"]) and "provider" in spec.value.keys):
        # the test's options.provider, as promptfoo's getFinalTest: a classifier's model, or a graded assert's budget
        item = {**item, "provider": given["provider"]}
    unknown = set(item) - {"type", "value", "threshold", "weight", "metric", "provider", "transform",
                           *(key for key in ("config", "rubricPrompt", "contextTransform") if key in spec.value.keys),
                           *(("factuality",) if spec.name == "factuality" else ())}
    if unknown:
        raise BatchInputError(f"unknown key(s) {', '.join(sorted(unknown))}")
    extra = {key: item[key] for key in ("weight", "metric") if item.get(key) is not None}
    transform = {"transform": resolved(item["transform"], files)} if item.get("transform") is not None else {}
    return parse_assert({"type": kind, **own.read(item, files), **extra, **transform, "dialect": DIALECT})


def _settings(given: Any, problems: Problems, notes: list[str], files: SuiteFiles
              ) -> tuple[list[Setting], dict[str, list[str]]]:
    """The settings, and the prompts filter of each provider that has one (by setting label); a provider that
    cannot be read is a problem, the others are read on; what a provider's config names that changes nothing is
    added to ``notes``."""
    items = given if isinstance(given, list) else [given] if given else [{"id": "loaded model"}]
    out: list[Setting] = []
    filters: dict[str, list[str]] = {}
    for i, item in enumerate(items):
        with problems.collect():
            setting, chosen = provider_setting({"id": item} if isinstance(item, str) else item, i, notes, files)
            if any(s.label == setting.label for s in out):
                raise BatchInputError(f"two providers are labelled '{setting.label}'; give each a label")
            out.append(setting)
            if chosen is not None:
                filters[setting.label] = chosen
    return out, filters
