"""promptfoo test suites: read a ``promptfooconfig.yaml`` into a batch job, write results in promptfoo's shape.

What is read: ``prompts`` (texts with ``{{vars}}``; chats: a JSON list of
``{role, content}`` messages written as text, or such a list in YAML;
``{id/label, raw}`` objects; ``file://`` files, globs too: .txt/.md texts split
on lines of ``---`` as promptfoo splits them, .json/.yaml chats, .jsonl a chat a line),
``tests`` (inline, or a ``file://`` YAML/JSON list) with ``vars``, ``assert``,
``description`` and ``metadata`` (other test keys are refused by name),
``defaultTest`` (its ``vars`` and ``assert`` apply to every test) and
``providers``. Each provider becomes one setting, labelled by its
``label`` or ``id``, with its ``config`` (``temperature``, ``max_tokens``,
``top_p``, ``seed``, ``stop``... as the OpenAI API names them) as that setting's
parameters. ``workbench:NAME`` runs on the loaded model NAME (any loaded model:
local, another loader's ``NAME@loader``, or a remote server connected in the Model
tab; ``launch.py batch`` loads it); any other id runs on the model in use. Asserts keep promptfoo's names (contains, icontains,
contains-any, contains-all, equals, regex, starts-with, is-json, similar,
python with ``file://``, latency, llm-rubric (judged by the loaded model),
their ``not-`` forms, ``weight`` and ``threshold``; ``{{vars}}`` in a value are the test's); any other type
(javascript, levenshtein...) is an error that names it, never skipped.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import yaml

from webui.batch.assert_kinds import ASSERT_KINDS
from webui.batch.asserts import Assert, parse_assert, row_score
from webui.batch.errors import BatchInputError
from webui.batch.grid import Setting
from webui.batch.prompts import PromptRow, chat_messages_of, render
from webui.batch.results import ResultRow
from webui.engine.params import InvalidParameter, SamplingParams

CONFIG_SUFFIXES = (".yaml", ".yml")


def supported() -> list[str]:
    """promptfoo's assert types we run (promptfoo names them as we do): the kinds with a promptfoo reader."""
    return [name for name, kind in ASSERT_KINDS.items() if kind.promptfoo is not None]


def is_config(name: str | Path) -> bool:
    return Path(name).suffix.lower() in CONFIG_SUFFIXES


def load_config(path: Path) -> tuple[str, list[PromptRow], list[Setting]]:
    """(description, prompt rows, settings) of a promptfoo config file."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BatchInputError(f"cannot read the promptfoo config '{path}': {exc}") from None
    return read_config(text, Path(path).parent)


def read_config(text: str, base: Path) -> tuple[str, list[PromptRow], list[Setting]]:
    """Like :func:`load_config` for config text; ``file://`` paths are relative to ``base``."""
    try:
        config = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise BatchInputError(f"promptfoo config: not valid YAML ({exc})") from None
    if not isinstance(config, dict):
        raise BatchInputError("promptfoo config: expected a mapping with prompts, providers and tests")
    unknown_top = set(config) - {"description", "prompts", "providers", "tests", "defaultTest", "outputPath",
                                 "sharing", "env", "evaluateOptions", "scenarios", "derivedMetrics", "nunjucksFilters"}
    if unknown_top:
        raise BatchInputError(f"promptfoo config: unknown key(s) {', '.join(sorted(unknown_top))}")
    if config.get("scenarios"):
        raise BatchInputError("promptfoo config: scenarios are not supported; list their tests under tests")
    prompts = _prompts(config.get("prompts"), base)
    default = config.get("defaultTest") or {}
    if not isinstance(default, dict):
        raise BatchInputError("promptfoo config: defaultTest must be a mapping (vars, assert)")
    _known_test_keys(default, "defaultTest")
    tests = _tests(config.get("tests"), base) or [{}]
    rows: list[PromptRow] = []
    for t, test in enumerate(tests):
        where = f"tests[{t}]"
        _known_test_keys(test, where)
        variables = _nested({**_vars(default.get("vars"), "defaultTest"), **_vars(test.get("vars"), where)}, where)
        asserts = [*_asserts(default.get("assert"), "defaultTest", base, variables),
                   *_asserts(test.get("assert"), where, base, variables)]
        name = str(test.get("description") or f"test {t + 1}")
        for p, (label, prompt) in enumerate(prompts):
            at = f"{where} with prompt '{label}'"
            row_id = name if len(prompts) == 1 else f"{name} · {label}"
            origin = {"prompt": label, "promptIdx": p, "testIdx": t, "description": test.get("description")}
            filled = _text_or_chat(render(prompt, variables, where=at), at) if isinstance(prompt, str) else \
                tuple({"role": m["role"], "content": render(m["content"], variables, where=at)} for m in prompt)
            if isinstance(filled, str):
                rows.append(PromptRow(len(rows), filled, variables, asserts, row_id, origin=origin))
            else:  # a chat: its messages, and their JSON as its text (promptfoo's raw)
                rows.append(PromptRow(len(rows), json.dumps(filled, ensure_ascii=False), variables, asserts, row_id,
                                      filled, origin))
    return str(config.get("description") or "promptfoo suite"), rows, _settings(config.get("providers"))


Prompt = str | tuple[dict[str, str], ...]
"""A promptfoo prompt: a text, or a chat (its messages)."""


def _prompts(given: Any, base: Path) -> list[tuple[str, Prompt]]:
    if given is None:
        raise BatchInputError("promptfoo config: prompts is missing; list at least one prompt")
    items = given if isinstance(given, list) else [given]
    out: list[tuple[str, Prompt]] = []
    for i, item in enumerate(items):
        where = f"promptfoo config: prompts[{i}]"
        if isinstance(item, dict):
            raw = item.get("raw")
            if not isinstance(raw, str):
                raise BatchInputError(f"{where} needs 'raw' (the prompt text)")
            ignored = set(item) - {"raw", "label", "id"}
            if ignored:  # e.g. a prompt's own config: named, never dropped unseen
                raise BatchInputError(f"{where}: {', '.join(sorted(ignored))} not supported here (a prompt takes "
                                      f"raw, label and id; set parameters in a provider's config)")
            out.append((str(item.get("label") or item.get("id") or f"prompt {i + 1}"), raw))
        elif isinstance(item, list):  # a chat written in YAML: a list of {role, content}
            out.append((f"prompt {i + 1}", chat_messages_of(item, where)))
        elif isinstance(item, str) and item.startswith("file://"):
            out += _prompt_files(base, item.removeprefix("file://"), where)
        elif isinstance(item, str):
            out.append((item.splitlines()[0][:40] if item.strip() else f"prompt {i + 1}", item))
        else:
            raise BatchInputError(f"{where} must be a text, a chat (a list of {{role, content}}), file://path or "
                                  f"{{raw: ...}}")
    if not out:
        raise BatchInputError("promptfoo config: prompts is empty; list at least one prompt")
    return out


def _nested(variables: dict[str, str], where: str) -> dict[str, str]:
    """Vars whose values use other vars (``{{name}}``) filled from those, as promptfoo renders vars before the
    prompt (one level: each value from the others as given)."""
    return {name: render(value, variables, where=f"{where}.vars.{name}") if "{{" in value else value
            for name, value in variables.items()}


def _text_or_chat(text: str, where: str) -> Prompt:
    """A prompt's text once its vars are filled in: promptfoo sends a JSON list of messages as that chat, any
    other text as one user message."""
    if text.lstrip().startswith("["):
        try:
            data = json.loads(text)
        except ValueError:
            return text
        if isinstance(data, list) and data and all(isinstance(m, dict) and "role" in m for m in data):
            return chat_messages_of(data, where)
    return text


def _prompt_files(base: Path, pattern: str, where: str) -> list[tuple[str, Prompt]]:
    """Prompts from file(s) (a glob gives every file it matches, in name order): .txt/.md texts (several split by
    lines of ---), .json a chat (a list of messages) or a list of chats, .jsonl a chat per line, .yaml/.yml a chat
    or a list of prompts."""
    paths = sorted(base.glob(pattern)) if any(c in pattern for c in "*?[") else [base / pattern]
    if not paths:
        raise BatchInputError(f"{where}: no file matches {pattern}")
    out: list[tuple[str, Prompt]] = []
    for path in paths:
        suffix = path.suffix.lower()
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise BatchInputError(f"{where}: cannot read {path}: {exc}") from None
        if suffix in (".txt", ".md", ""):
            parts = [p.strip() for p in text.split("\n---\n") if p.strip()]
            out += [(path.name + (f" #{n + 1}" if len(parts) > 1 else ""), p) for n, p in enumerate(parts)]
        elif suffix in (".json", ".yaml", ".yml"):
            try:
                data = json.loads(text) if suffix == ".json" else yaml.safe_load(text)
            except (ValueError, yaml.YAMLError) as exc:
                raise BatchInputError(f"{where}: {path.name} is not valid {suffix[1:].upper()}: {exc}") from None
            chats = data if isinstance(data, list) and data and all(isinstance(c, list) for c in data) else [data]
            for n, chat in enumerate(chats):
                label = path.name + (f" #{n + 1}" if len(chats) > 1 else "")
                out.append((label, chat if isinstance(chat, str) else chat_messages_of(chat, f"{where}: {label}")))
        elif suffix == ".jsonl":
            lines = [line for line in text.splitlines() if line.strip()]
            for n, line in enumerate(lines):
                label = f"{path.name} #{n + 1}"
                try:
                    out.append((label, chat_messages_of(json.loads(line), f"{where}: {label}")))
                except ValueError as exc:
                    raise BatchInputError(f"{where}: {label} is not valid JSON: {exc}") from None
        else:
            raise BatchInputError(f"{where}: {path.name}: prompt files are read as .txt, .md, .json, .jsonl or "
                                  f".yaml; JavaScript/Python prompt functions are not")
    return out


def _tests(given: Any, base: Path) -> list[dict[str, Any]]:
    if given is None:
        return []
    if isinstance(given, str):
        given = [given]
    out: list[dict[str, Any]] = []
    for i, item in enumerate(given if isinstance(given, list) else [None]):
        if isinstance(item, str) and item.startswith("file://"):
            out += _test_file(base / item.removeprefix("file://"), f"tests[{i}]")
        elif isinstance(item, dict):
            out.append(item)
        else:
            raise BatchInputError(f"promptfoo config: tests[{i}] must be a mapping (vars, assert) or a "
                                  "file://tests.yaml path")
    return out


TEST_KEYS = ("description", "vars", "assert", "metadata")
"""A test's keys we read (metadata only labels it); any other (options with its transform, threshold, a
provider of its own...) would change what runs or passes, so it is refused by name, never dropped unseen."""


def _known_test_keys(test: Mapping[str, Any], where: str) -> None:
    unknown = set(test) - set(TEST_KEYS)
    if unknown:
        raise BatchInputError(f"promptfoo config: {where}: {', '.join(sorted(map(str, unknown)))} not supported "
                              f"here (a test takes {', '.join(TEST_KEYS)})")


def _test_file(path: Path, where: str) -> list[dict[str, Any]]:
    if path.suffix.lower() not in (".yaml", ".yml", ".json"):
        raise BatchInputError(f"promptfoo config: {where}: {path.name}: test files are read as YAML or JSON lists")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise BatchInputError(f"promptfoo config: {where}: cannot read {path}: {exc}") from None
    if not isinstance(data, list) or not all(isinstance(t, dict) for t in data):
        raise BatchInputError(f"promptfoo config: {where}: {path.name} must hold a list of tests")
    return data


def _vars(given: Any, where: str) -> dict[str, str]:
    if given is None:
        return {}
    if not isinstance(given, dict):
        raise BatchInputError(f"promptfoo config: {where}.vars must be a mapping of names to values")
    return {str(k): v if isinstance(v, str) else json.dumps(v, ensure_ascii=False) for k, v in given.items()}


def _asserts(given: Any, where: str, base: Path, variables: Mapping[str, str]) -> list[Assert]:
    if given is None:
        return []
    if not isinstance(given, list):
        raise BatchInputError(f"promptfoo config: {where}.assert must be a list")
    return [_assert(item, f"{where}.assert[{i}]", base, variables) for i, item in enumerate(given)]


def _filled(value: Any, variables: Mapping[str, str], where: str) -> Any:
    """An assert's value with the test's ``{{vars}}`` filled in, as promptfoo renders a text value and each text
    in a list value (``value: "{{expected}}"``); file:// paths and other values as given."""
    if isinstance(value, list):
        return [_filled(v, variables, where) for v in value]
    if isinstance(value, str) and "{{" in value and not value.startswith("file://"):
        return render(value, variables, where=f"promptfoo config: {where}")
    return value


def _assert(item: Any, where: str, base: Path, variables: Mapping[str, str]) -> Assert:
    if not isinstance(item, dict) or not isinstance(item.get("type"), str):
        raise BatchInputError(f"promptfoo config: {where} needs a type")
    if "value" in item:
        item = {**item, "value": _filled(item["value"], variables, where)}
    kind = item["type"]
    spec = ASSERT_KINDS.get(kind.removeprefix("not-"))
    if spec is None or spec.promptfoo is None:
        raise BatchInputError(f"promptfoo config: {where}: the assert type '{kind}' is not supported here "
                              f"(supported: {', '.join(supported())}, and not- before each)")
    unknown = set(item) - {"type", "value", "threshold", "weight", "metric", "provider"}
    if unknown:
        raise BatchInputError(f"promptfoo config: {where}: unknown key(s) {', '.join(sorted(unknown))}")
    weight = {"weight": item["weight"]} if item.get("weight") is not None else {}
    try:
        return parse_assert({"type": kind, **spec.promptfoo(item, base), **weight})
    except BatchInputError as exc:
        raise BatchInputError(f"promptfoo config: {where}: {exc}") from None


def _settings(given: Any) -> list[Setting]:
    items = given if isinstance(given, list) else [given] if given else [{"id": "loaded model"}]
    out: list[Setting] = []
    for i, item in enumerate(items):
        if isinstance(item, str):
            item = {"id": item}
        if not isinstance(item, dict) or not isinstance(item.get("id", ""), str):
            raise BatchInputError(f"promptfoo config: providers[{i}] must be an id or a mapping with id and config")
        label = str(item.get("label") or item.get("id") or f"provider {i + 1}")
        ignored = set(item) - {"id", "label", "config"}
        if ignored:  # e.g. a provider's prompts filter or transform: named, never dropped unseen
            raise BatchInputError(f"promptfoo config: providers[{i}] ({label}): {', '.join(sorted(ignored))} "
                                  "not supported here (a provider takes id, label and config)")
        config = item.get("config") or {}
        if not isinstance(config, dict):
            raise BatchInputError(f"promptfoo config: providers[{i}].config must be a mapping")
        fields = {k: v for k, v in config.items() if k not in ("apiKey", "apiBaseUrl", "apiHost")}
        try:
            params = SamplingParams.from_api(fields, SamplingParams(temperature=0.0, max_new_tokens=256))
        except (InvalidParameter, ValueError) as exc:
            raise BatchInputError(f"promptfoo config: providers[{i}] ({label}).config: {exc}") from None
        unknown = set(fields) - set(_api_names())
        if unknown:
            raise BatchInputError(f"promptfoo config: providers[{i}] ({label}).config: unknown setting(s) "
                                  f"{', '.join(sorted(unknown))}")
        if any(s.label == label for s in out):
            raise BatchInputError(f"promptfoo config: two providers are labelled '{label}'; give each a label")
        provider, _, model = str(item.get("id", "")).partition(":")
        if provider == "workbench" and not model.strip():
            raise BatchInputError(f"promptfoo config: providers[{i}]: workbench: needs a model name "
                                  "(workbench:SmolLM2-135M-Instruct)")
        out.append(Setting(label, params, None, dict(fields), model=model.strip() if provider == "workbench" else None,
                           provider=str(item.get("id") or label)))
    return out


def _api_names() -> set[str]:
    from webui.engine.params import api_names

    return set(api_names().values())


# -- results in promptfoo's output shape -------------------------------------------------------------------

def to_promptfoo(rows: Iterable[ResultRow], description: str = "", prompts: Sequence[PromptRow] = (),
                 providers: Mapping[str, str] | None = None) -> str:
    """Results as promptfoo writes ``--output results.json``: results.results[] with prompt (raw, label), vars,
    provider (id, label), response, success, score, testIdx/promptIdx, testCase (description, vars, assert) and
    gradingResult (one componentResult per assert, the assertion as promptfoo writes it), and results.stats.
    ``prompts`` (the run's rows, by index) and ``providers`` (setting label -> promptfoo provider id) give what
    the result rows do not hold; without them the prompt's id is its label and the setting's label its id."""
    by_index = {p.index: p for p in prompts}
    results = []
    for r in rows:
        row = by_index.get(r.prompt_index)
        origin = (row.origin if row is not None else None) or {}
        variables = dict(row.variables) if row is not None else {}
        assertions = [promptfoo_assertion(a) for a in row.asserts] if row is not None else []
        components = [{"pass": a.passed, "score": a.value, "reason": a.detail or "passed",
                       "assertion": assertions[i] if i < len(assertions) else {
                           "type": a.label.partition(":")[0], "value": a.label.partition(":")[2]}}
                      for i, a in enumerate(r.asserts)]
        score = r.score if r.score is not None else (row_score(r.asserts) or (1.0 if r.passed is not False else 0))
        results.append({
            "prompt": {"raw": r.prompt, "label": origin.get("prompt", r.prompt_id)}, "vars": variables,
            "provider": {"id": (providers or {}).get(r.setting, r.setting), "label": r.setting},
            "promptIdx": origin.get("promptIdx", 0), "testIdx": origin.get("testIdx", r.prompt_index),
            "testCase": {**({"description": origin["description"]} if origin.get("description") else {}),
                         "vars": variables, "assert": assertions},
            "response": {"output": r.output, "tokenUsage": {"prompt": r.prompt_tokens,
                                                            "completion": r.completion_tokens,
                                                            "total": r.prompt_tokens + r.completion_tokens}},
            "success": r.passed is not False, "score": score, "latencyMs": _latency_ms(r), "error": r.error,
            "gradingResult": {"pass": r.passed is not False, "score": score, "reason": _reason(r),
                              "componentResults": components}})
    passed = sum(1 for r in results if r["success"])
    return json.dumps({"results": {"version": 3, "results": results,
                                   "stats": {"successes": passed, "failures": len(results) - passed}},
                       "config": {"description": description}}, indent=2, ensure_ascii=False)


def promptfoo_assertion(a: Assert) -> dict[str, Any]:
    """An assert as a promptfoo file writes it: latency's limit as its threshold, a Python check as file://."""
    d = a.to_dict()
    if a.kind == "latency":
        d["threshold"] = d.pop("value")
    elif a.kind == "python" and isinstance(d.get("value"), str) and not d["value"].startswith("file://"):
        d["value"] = "file://" + d["value"]
    return d


def _latency_ms(row: ResultRow) -> int | None:
    if row.ttft is None or not row.tokens_per_second:
        return None
    return round((row.ttft + row.completion_tokens / row.tokens_per_second) * 1000)


def _reason(row: ResultRow) -> str:
    if row.error:
        return row.error
    failed = [f"{a.label}: {a.detail}" for a in row.asserts if not a.passed]
    return "; ".join(failed) or "All assertions passed"
