"""promptfoo's side of the assert kinds: how its dict form reads into ours, and its checks where they differ.

Readers: promptfoo's assert (a dict; ``file://`` paths relative to the config's folder) -> the dict form's fields
besides type and weight (:attr:`~webui.batch.promptfoo.kinds.PromptfooKind.read`).

Checks: an assert read from a promptfoo file (``Assert.dialect == "promptfoo"``) is checked as promptfoo 0.115
checks it, so a promptfoo suite gives the same pass/fail here (tests/e2e/test_promptfoo_agreement.py): the output
exactly as given (ours ignores whitespace around it for equals, starts-with and is-xml, since models often start
with a space), case folded by lowercasing (ours casefolds: ß = ss), a regex as JavaScript's ``RegExp`` (run in
QuickJS), contains-json's lenient reading (unclosed braces closed, the object read as YAML's flow mapping) and
contains-xml's one candidate, XML of several elements side by side. Where promptfoo 0.115 ignores ``not-``
(python, levenshtein, ...) or accepts malformed XML (fast-xml-parser does not check that tags match), ours still
negates and needs well-formed XML.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable, Mapping

import yaml

from webui.batch.asserts.values import same_json
from webui.batch.asserts.errors import BatchInputError, ScriptError
from webui.safeload import load_yaml
from webui.batch.asserts.suite_files import SuiteFiles
from webui.batch.asserts.js_regex import js_regex_test
from webui.batch.asserts.types import Outcome
from webui.batch.asserts.xml_checks import xml_problem

if TYPE_CHECKING:
    from webui.batch.asserts.types import AssertData, Observed

DIALECT = "promptfoo"
"""``Assert.dialect`` of the asserts read from a promptfoo file."""


# -- promptfoo's dict form: fields for parse_assert besides type and weight --------------------------------


def read_value(item: Mapping[str, Any], files: SuiteFiles) -> dict[str, Any]:
    return {"value": item.get("value"), **read_threshold(item)}


def read_threshold(item: Mapping[str, Any]) -> dict[str, Any]:
    return {"threshold": item["threshold"]} if item.get("threshold") is not None else {}


_QUOTED_ITEM = re.compile(r'(".*?"|[^,]+)(?=\s*,|\s*$)')
"""promptfoo's contains-any items in a text: comma-separated, a "quoted, item" kept whole."""


def read_list(item: Mapping[str, Any], files: SuiteFiles) -> dict[str, Any]:
    """A list kind's value as promptfoo reads it: a text is split on commas (contains-any keeps "quoted, items"
    whole), numbers in a list are texts."""
    value = item.get("value")
    if isinstance(value, str) and str(item.get("type")).removeprefix("not-") == "contains-any":
        value = [re.sub(r'^"|"$', "", v.strip()) for v in _QUOTED_ITEM.findall(value)]
    elif isinstance(value, str):
        value = [v.strip() for v in value.split(",")]
    elif isinstance(value, list):
        value = [js_text(v) for v in value]
    return {"value": value, **read_threshold(item)}


def js_text(value: Any) -> Any:
    """A number as JavaScript's String() writes it (15, 1.5; 2.0 as 2); anything else as given."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return value
    return str(int(value)) if float(value).is_integer() else str(value)


def read_limit(item: Mapping[str, Any], files: SuiteFiles) -> dict[str, Any]:
    return {"value": item.get("threshold")}  # promptfoo's latency (ms) and cost limits are its threshold


def read_schema(item: Mapping[str, Any], files: SuiteFiles) -> dict[str, Any]:
    """promptfoo reads a schema written as text with YAML (JSON being YAML too)."""
    value = item.get("value")
    if isinstance(value, str) and not value.startswith("file://"):
        try:
            value = load_yaml(value)
        except (yaml.YAMLError, ValueError) as exc:
            raise BatchInputError(f"{item.get('type')}: the schema is neither JSON nor YAML ({exc})") from None
    schema = {"schema": value} if value is not None else {}
    return {**schema, **read_threshold(item)}


def read_script(file_prefix: str) -> Callable[[Mapping[str, Any], SuiteFiles], dict[str, Any]]:
    """promptfoo's python or javascript assert: inline code as it is, a ``file://`` path relative to the config's
    folder (written after ``file_prefix``), and its ``config``."""
    def read(item: Mapping[str, Any], files: SuiteFiles) -> dict[str, Any]:
        value = item.get("value")
        if isinstance(value, str) and value.strip().startswith("file://"):
            value = file_prefix + str(files.path(value.strip().removeprefix("file://")))
        config = {"config": item["config"]} if item.get("config") is not None else {}
        return {"value": value, **config, **read_threshold(item)}
    return read


def read_one_text(item: Mapping[str, Any], files: SuiteFiles) -> dict[str, Any]:
    """levenshtein and rouge-n: promptfoo takes one reference text only (a list is an error there too)."""
    if not isinstance(item.get("value"), str):
        raise BatchInputError(f"{item['type']} needs one reference text as its value, got {item.get('value')!r}")
    return read_value(item, files)


def read_tools(item: Mapping[str, Any], files: SuiteFiles) -> dict[str, Any]:
    """promptfoo takes the tools (functions) from the provider's config; here they are the assert's value: a
    list, or ``file://tools.json`` (or .yaml) relative to the config."""
    value, kind = item.get("value"), item["type"].removeprefix("not-")
    if value is None:
        key = "tools" if "tools" in kind else "functions"
        raise BatchInputError(f"{kind} needs the {key} as its value here (promptfoo reads them from the "
                              f"provider's config.{key}): write value: [...] or value: file://{key}.json")
    if isinstance(value, str) and value.startswith("file://"):
        path = files.path(value.removeprefix("file://"))
        try:
            value = load_yaml(path.read_text(encoding="utf-8"))
        except (OSError, ValueError, yaml.YAMLError) as exc:
            raise BatchInputError(f"{kind}: cannot read {path}: {exc}") from None
    return {"value": value, **read_threshold(item)}


# -- promptfoo's checks, where they differ from ours -------------------------------------------------------


def equals(a: AssertData, seen: Observed) -> Outcome:
    """The output exactly; an object or list value: the output parsed as JSON and deeply equal to it."""
    if a.options.get("json"):
        try:
            parsed = json.loads(seen.output)
        except ValueError:
            return Outcome(False, f"output is not JSON, expected {a.value}", broken=True)  # as promptfoo
        return Outcome(same_json(parsed, json.loads(str(a.value))), f"output JSON is not {a.value}")
    return Outcome(seen.output == a.value, f"output is '{seen.output}', expected '{a.value}'")


def starts_with(a: AssertData, seen: Observed) -> Outcome:
    return Outcome(seen.output.startswith(str(a.value)), f"output does not start with '{a.value}'")


def icontains(a: AssertData, seen: Observed) -> Outcome:
    return Outcome(str(a.value).lower() in seen.output.lower(), f"output does not contain '{a.value}' (ignoring case)")


def icontains_list(every: bool) -> Callable[[AssertData, Observed], Outcome]:
    def check(a: AssertData, seen: Observed) -> Outcome:
        out = seen.output.lower()
        missing = [t for t in a.value if t.lower() not in out]
        if every:
            return Outcome(not missing, f"output lacks {', '.join(repr(t) for t in missing)} (ignoring case)")
        return Outcome(len(missing) < len(a.value), f"output contains none of {', '.join(map(repr, a.value))} "
                                                    "(ignoring case)")
    return check


def regex(a: AssertData, seen: Observed) -> Outcome:
    try:
        return Outcome(js_regex_test(str(a.value), seen.output), f"output does not match the regex {a.value}")
    except ScriptError as exc:
        return Outcome(False, str(exc), broken=True)


def json_objects(text: str) -> list[Any]:
    """promptfoo's extractJsonObjects: from each ``{``, the text up to where its braces balance (or the end, with
    the missing ``}`` added) read as YAML's flow mapping, so unquoted or unclosed JSON still counts; ``//``
    comments outside strings are dropped. Each object found is skipped past."""
    found, i = [], 0
    while i < len(text):
        if text[i] == "{":
            opened, closed, j = 1, 0, i + 1
            while j < len(text) and opened > closed:
                opened += text[j] == "{"
                closed += text[j] == "}"
                j += 1
                if opened == closed or j == len(text):
                    data = _flow_mapping(text[i:j] + "}" * (opened - closed))
                    if isinstance(data, (dict, list)):
                        found.append(data)
                        i = j - 1
                        break
                    if opened == closed:
                        break
        i += 1
    return found


def _flow_mapping(text: str) -> Any:
    try:
        return yaml.safe_load(re.sub(r'^((?:[^"\'\n]|"[^"\n]*"|\'[^\'\n]*\')*?)//+', r"\1#", text, flags=re.M))
    except yaml.YAMLError:
        return None


def is_xml(a: AssertData, seen: Observed) -> Outcome:
    if not seen.output.startswith("<"):
        return Outcome(False, "output is not XML (it does not start with '<')")
    why = xml_problem(seen.output, a.value, fragment=True)
    return Outcome(not why, why)


_XML_CANDIDATE = re.compile(r"<\?xml[^\n\r\u2028\u2029]*?>[\s\S]*</[^>]+>|\S*<[^>]+>[\s\S]*</[^>]+>")


def contains_xml(a: AssertData, seen: Observed) -> Outcome:
    """promptfoo's one candidate: from the first tag (or XML declaration) to the last closing tag."""
    found = _XML_CANDIDATE.search(seen.output)
    if found is None:
        return Outcome(False, "output contains no XML")
    return is_xml(a, replace(seen, output=found.group(0)))
