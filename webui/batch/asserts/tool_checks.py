"""Asserts on a row's tool calls (#44): promptfoo's ``tool-call-f1`` and our ``called-tool``, and the calls the
OpenAI call checks read on a row that ran the tool loop.

The calls of a row are those its tool loop made, every step's (``Observed.tool_calls``), or, on a row without a
loop, those its output is (the tool calls, or the message with them, that promptfoo's openai provider returns:
webui.batch.run.provider_prompt), as is-valid-openai-tools-call reads them.

``tool-call-f1`` (promptfoo's, after 0.115): the set of called tool names against the expected names (a list, or
a comma-separated text): precision = |called ∩ expected| / |called|, recall = |called ∩ expected| / |expected|,
the score their harmonic mean (0 when nothing matches), passing at the threshold, default 1 (exactly the expected
tools, each at least once, in any order).

``called-tool`` (ours): ``{name: TOOL, arguments: SCHEMA}`` passes when some call of TOOL has arguments valid
against the JSON schema; ``called-tool:TOOL`` (no schema) when TOOL was called at all.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from webui.batch.asserts.values import ValueForm, excerpt, schema_problem, schema_validator
from webui.batch.asserts.errors import BatchInputError
from webui.batch.asserts.types import Outcome
from webui.batch.asserts.output_checks import function_call_problem, tools_call_problem

if TYPE_CHECKING:
    from webui.batch.asserts.types import AssertData, KindData, Observed

F1_THRESHOLD = 1.0
"""promptfoo's default for tool-call-f1: exactly the expected tools."""


def seen_calls(seen: Observed) -> list[Mapping[str, Any]]:
    """The row's calls as OpenAI writes them ({type, function: {name, arguments}}): its tool loop's, else those its
    output is."""
    if seen.tool_calls is not None:
        return list(seen.tool_calls)
    value = seen.output_value
    if value is None:
        try:
            value = json.loads(seen.output.strip())
        except ValueError:
            return []
    return _calls_in(value)


def _calls_in(value: Any) -> list[Mapping[str, Any]]:
    if isinstance(value, Mapping) and isinstance(value.get("tool_calls"), list):
        value = value["tool_calls"]
    elif isinstance(value, Mapping) and isinstance(value.get("function_call"), Mapping):
        return [{"type": "function", "function": value["function_call"]}]
    elif isinstance(value, Mapping) and isinstance(value.get("name"), str) and "arguments" in value:
        return [{"type": "function", "function": value}]  # a function_call itself
    return [c for c in value if isinstance(c, Mapping)] if isinstance(value, list) else []


def call_name(call: Mapping[str, Any]) -> str | None:
    """A call's tool name (promptfoo reads ``function.name``, else ``name``)."""
    function = call.get("function")
    name = function.get("name") if isinstance(function, Mapping) else None
    name = name if name is not None else call.get("name")
    return name if isinstance(name, str) and name else None


def loop_calls_problem(calls: Sequence[Mapping[str, Any]], given: Any, tools: bool) -> str:
    """is-valid-openai-tools-call (``tools``) or -function-call on a tool loop's calls: each one valid against the
    tools (functions) ``given``; "": they are."""
    if not calls:
        return "the model made no tool call"
    if tools:
        return tools_call_problem(list(calls), given)
    return next((why for why in (function_call_problem(c.get("function"), given) for c in calls) if why), "")


def tool_call_f1(a: AssertData, seen: Observed) -> Outcome:
    expected = set(a.value)
    called = {name for name in map(call_name, seen_calls(seen)) if name}
    both = len(expected & called)
    precision = both / len(called) if called else 0.0
    recall = both / len(expected)
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    why = (f"tool call F1 {f1:.3f} (precision {precision:.3f}, recall {recall:.3f}); expected: "
           f"{', '.join(sorted(expected))}; called: {', '.join(sorted(called)) or '(none)'}")
    return Outcome(True, why, f1, True)


def called_tool(a: AssertData, seen: Observed) -> Outcome:
    wanted = json.loads(str(a.value))
    name, schema = wanted["name"], wanted.get("arguments")
    calls = seen_calls(seen)
    mine = [c for c in calls if call_name(c) == name]
    if not mine:
        called = ", ".join(dict.fromkeys(n for n in map(call_name, calls) if n)) or "none"
        return Outcome(False, f"{name} was not called (called: {called})")
    if schema is None:
        return Outcome(True, "")
    whys = [_arguments_problem(c, json.dumps(schema, separators=(",", ":"))) for c in mine]
    if any(not why for why in whys):
        return Outcome(True, "")
    if len(mine) == 1:
        return Outcome(False, f"{name} was called, but its arguments do not match the schema: {whys[0]}")
    return Outcome(False, f"{name} was called {len(mine)} times, never with arguments that match the schema: "
                          f"{whys[0]}")


def _arguments_problem(call: Mapping[str, Any], schema: str) -> str:
    function = call.get("function")
    arguments = function.get("arguments") if isinstance(function, Mapping) else call.get("arguments")
    if isinstance(arguments, str):
        text = arguments
        try:
            arguments = json.loads(text) if text.strip() else {}
        except ValueError as exc:
            return f"its arguments are not JSON ({exc}): {excerpt(text)}"
    return schema_problem(schema, arguments)


class CalledToolValue(ValueForm):
    """called-tool's value: a tool's name, and optionally a JSON schema its arguments must fit
    (``called-tool:get_weather``, ``called-tool:{"name": "get_weather", "arguments": {...}}``; a mapping in the
    dict form), held as compact JSON text ``{"name", "arguments"?}``."""

    name = "called tool"

    def hold(self, kind: KindData, value: Any, options: Mapping[str, Any]) -> tuple[Any, Mapping[str, Any]]:
        example = f'{kind.name}:get_weather or {kind.name}:{kind.example}'
        if not isinstance(value, str) or not value.strip():
            raise BatchInputError(f"{kind.name} needs a tool name, or {{name, arguments: schema}}, e.g. {example}; "
                                  f"got {value!r:.80}")
        text = value.strip()
        try:
            data = json.loads(text) if text.startswith("{") else {"name": text}
        except json.JSONDecodeError as exc:
            raise BatchInputError(f"{kind.name}: the value is not valid JSON ({exc.msg} at column {exc.colno}): "
                                  f"{excerpt(text)}; e.g. {example}") from None
        if not isinstance(data.get("name"), str) or not data["name"] or set(data) - {"name", "arguments"}:
            raise BatchInputError(f"{kind.name} takes {{name: TOOL, arguments: JSON schema}} (arguments optional), "
                                  f"e.g. {example}; got {excerpt(text)}")
        if "arguments" in data:
            try:
                schema_validator(json.dumps(data["arguments"], ensure_ascii=False, separators=(",", ":")))
            except BatchInputError as exc:
                raise BatchInputError(f"{kind.name}: arguments must be a JSON schema of the call's arguments: "
                                      f"{str(exc).removeprefix('is-json: ')}") from None
        return json.dumps(data, ensure_ascii=False, separators=(",", ":")), options

    def read(self, kind: KindData, text: str) -> tuple[Any, dict[str, Any]]:
        return text, {}

    def read_dict(self, kind: KindData, value: Any, given: Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
        return (value if isinstance(value, str) or value is None
                else json.dumps(value, ensure_ascii=False)), {}

    def write(self, item: AssertData) -> str | None:
        data = json.loads(str(item.value))
        return data["name"] if set(data) == {"name"} else str(item.value)

    def write_dict(self, item: AssertData) -> dict[str, Any]:
        data = json.loads(str(item.value))
        return {"value": data["name"] if set(data) == {"name"} else data}


CALLED_TOOL = CalledToolValue()
