"""What a promptfoo provider does to the prompts it runs, beside its sampling parameters.

``prompt.prefix`` and ``prompt.suffix`` (a provider option of promptfoo's) go around each
text prompt once its vars are filled in, before the chat template, as promptfoo's
providers that take them add them to the prompt they are given. ``tools`` and
``tool_choice`` (or OpenAI's older ``functions`` and ``function_call``; ``tools:
file://tools.yaml`` too) are offered to the model as /v1/chat/completions offers them
(webui.chat.tools: the chat template's own tool support, else the fallback block), and
the reply is read back into what promptfoo's openai chat provider returns for it: the
list of tool calls when the reply is only calls (``function_call`` for functions), the
whole message when it has text too, the text when it has no call. The output is that
value as promptfoo's asserts see it as text (JSON.stringify's compact JSON), and the
value itself is what python and javascript asserts get as ``output``. A ``json_schema``
``response_format`` (read as structured output by webui.batch.promptfoo.providers) makes a reply
that parses its JSON value, as promptfoo's openai provider does; a prompt's own ``config.response_format``
decides that for its rows (:func:`reply_shape`). A provider that also says who
answers the calls (``tool_results``, ``tools_from: local``: webui.batch.run.tool_answers) runs the
tool loop per row instead: its output is the final answer, its calls are kept with the row.
"""

from __future__ import annotations

import json
from datetime import date, datetime, timezone
from dataclasses import dataclass, replace
from typing import Any, Mapping

import yaml

from webui.batch.asserts.errors import BatchInputError
from webui.safeload import load_yaml
from webui.batch.asserts.suite_files import SuiteFiles
from webui.batch.run.tool_answers import KEYS as ANSWER_KEYS, ToolAnswers, check_local_choice, tool_answers
from webui.chat.tools import ToolPlan, plan_tools, reply_calls
from webui.engine.params import InvalidParameter

KEYS = ("prompt", "tools", "tool_choice", "parallel_tool_calls", "functions", "function_call", *ANSWER_KEYS)
"""The provider config keys read here (the others are sampling parameters: webui.batch.promptfoo.providers)."""


@dataclass(frozen=True)
class ProviderPrompt:
    """A provider's prefix and suffix around its text prompts, and the tools it offers."""

    prefix: str = ""
    suffix: str = ""
    tools: ToolPlan | None = None
    functions: bool = False
    """The tools were given as ``functions``: a call comes back as OpenAI's ``function_call``."""
    json_schema: bool = False
    """The provider asks for a ``json_schema`` response_format: a reply that parses is its JSON value, as
    promptfoo's openai provider gives it (its text asserts then read JSON.stringify's compact text)."""
    answers: ToolAnswers | None = None
    """Who answers its tool calls (canned results or the local tools): each row then runs the tool loop
    (webui.batch.run.tool_answers); None: a reply's calls are its output."""

    def text(self, prompt: str) -> str:
        """A text prompt (its vars filled in) as this provider sends it."""
        return self.prefix + prompt + self.suffix

    @property
    def affixed(self) -> bool:
        return bool(self.prefix or self.suffix)

    def key(self) -> str:
        """Equal for providers whose prompts read the same."""
        return json.dumps(self.to_dict(), sort_keys=True, ensure_ascii=False)

    def to_dict(self) -> dict[str, Any]:
        plan = self.tools
        return {"prefix": self.prefix, "suffix": self.suffix, "functions": self.functions,
                "json_schema": self.json_schema,
                "tools": None if plan is None else {"tools": list(plan.tools), "choice": plan.choice,
                                                    "parallel": plan.parallel},
                **({"answers": self.answers.to_dict()} if self.answers is not None else {})}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "ProviderPrompt":
        plan = data.get("tools")
        return cls(str(data.get("prefix", "")), str(data.get("suffix", "")),
                   None if plan is None else ToolPlan(tuple(plan["tools"]), plan["choice"], bool(plan["parallel"])),
                   bool(data.get("functions", False)), bool(data.get("json_schema", False)),
                   None if data.get("answers") is None else ToolAnswers.from_dict(data["answers"]))

    def output(self, text: str, finish_reason: str) -> tuple[str, Any]:
        """(the output as text, the output as promptfoo's openai provider gives it when that is not text; None:
        it is the text) of a reply generated with this provider's tools."""
        content, calls = reply_calls(text, self.tools, finish_reason) if self.tools is not None else (text, [])
        if not calls:
            return self._json_value(text) if self.json_schema else (text, None)
        value: Any
        if self.functions:
            value = {"name": calls[0].name, "arguments": calls[0].arguments}
            key = "function_call"
        else:
            value, key = [call.to_dict() for call in calls], "tool_calls"
        if content:  # the whole message, as our API and OpenAI's return it
            value = {"role": "assistant", "content": content, "refusal": None, key: value}
        return js_stringify(value), value

    @staticmethod
    def _json_value(text: str) -> tuple[str, Any]:
        try:
            value = json.loads(text)
        except ValueError:
            return text, None  # promptfoo logs it and keeps the text
        if isinstance(value, str):  # a JSON string parses to text, which every assert then reads as it is
            return value, None
        return (js_stringify(value), value) if value is not None else (text, None)


def reply_shape(shape: ProviderPrompt | None, params: Mapping[str, Any] | None) -> ProviderPrompt | None:
    """How a reply of a row is read back: its provider's ``shape``, except that a prompt whose own config sets
    ``response_format`` (``params``: the row's API-named parameters, where it is ``structured_outputs``) decides
    whether the reply is parsed. promptfoo's openai chat provider merges the prompt's config over the provider's
    and parses the reply when the merged ``response_format.type`` is ``json_schema`` (0.115,
    dist/src/providers/openai/chat.js: ``if (config.response_format?.type === 'json_schema' && typeof output ===
    'string') output = JSON.parse(output)``); a json_schema is ``{"json": schema}`` here."""
    if not params or "structured_outputs" not in params:
        return shape
    json_schema = "json" in (params["structured_outputs"] or {})
    if shape is None:
        return ProviderPrompt(json_schema=True) if json_schema else None
    return replace(shape, json_schema=json_schema)


def js_stringify(value: Any) -> str:
    """JSON.stringify's text of a parsed JSON (or YAML) value: compact, not ASCII-escaped, 2.0 written 2, a YAML
    date as the JavaScript Date js-yaml makes of it writes itself (UTC, milliseconds)."""
    def plain(v: Any) -> Any:
        if isinstance(v, float) and v.is_integer() and abs(v) < 2 ** 53:
            return int(v)
        if isinstance(v, date):
            moment = v if isinstance(v, datetime) else datetime(v.year, v.month, v.day, tzinfo=timezone.utc)
            moment = moment.astimezone(timezone.utc) if moment.tzinfo else moment
            return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        return [plain(x) for x in v] if isinstance(v, list) else v
    return json.dumps(plain(value), ensure_ascii=False, separators=(",", ":"))


def provider_prompt(config: Mapping[str, Any], where: str, files: SuiteFiles, raw: bool) -> ProviderPrompt | None:
    """What a provider's config (its :data:`KEYS`) does to its prompts; None: nothing. ``raw``: the provider
    sends prompts as completions, which take no tools."""
    affix = config.get("prompt")
    prefix = suffix = ""
    if affix is not None:
        unknown = set(affix) - {"prefix", "suffix"} if isinstance(affix, dict) else None
        if unknown is None or unknown or not all(isinstance(v, str) for v in affix.values()):
            raise BatchInputError(f"{where}.prompt must be a mapping of prefix and suffix texts, got {affix!r:.80}")
        prefix, suffix = affix.get("prefix", ""), affix.get("suffix", "")
    check_local_choice(config, where)
    plan, functions = _tools(config, where, files)
    if plan is not None and raw:
        raise BatchInputError(f"{where}: tools are offered to chat models; an openai:completion provider sends "
                              "the prompt as a completion, which takes none (use openai:chat:NAME)")
    answers = tool_answers(config, where, plan, raw)
    form = config.get("response_format")
    json_schema = isinstance(form, Mapping) and form.get("type") == "json_schema"
    if not (prefix or suffix or plan or json_schema or answers):
        return None
    return ProviderPrompt(prefix, suffix, plan, functions, json_schema, answers)


def _tools(config: Mapping[str, Any], where: str, files: SuiteFiles) -> tuple[ToolPlan | None, bool]:
    """The tools a provider offers (as /v1/chat/completions checks them), and whether they are ``functions``."""
    if config.get("functions") is not None and config.get("tools") is not None:
        raise BatchInputError(f"{where}: give tools or functions (OpenAI's older form), not both")
    functions = config.get("functions") is not None or config.get("function_call") is not None
    if functions:
        listed = _loaded(config.get("functions"), f"{where}.functions", files)
        if listed is not None and not (isinstance(listed, list) and all(isinstance(f, dict) for f in listed)):
            raise BatchInputError(f"{where}.functions must be a list of functions ({{name, parameters}})")
        tools = None if listed is None else [{"type": "function", "function": f} for f in listed]
        choice = _function_choice(config.get("function_call"), f"{where}.function_call")
        parallel: Any = False  # a reply has one function_call
    else:
        tools = _loaded(config.get("tools"), f"{where}.tools", files)
        choice, parallel = config.get("tool_choice"), config.get("parallel_tool_calls")
        if tools is not None and not isinstance(tools, list):
            raise BatchInputError(f"{where}.tools must be a list of tools ({{type: function, function: {{name, "
                                  "parameters}}}}) or file://tools.yaml")
    if parallel is not None and not isinstance(parallel, bool):
        raise BatchInputError(f"{where}.parallel_tool_calls must be true or false")
    try:
        plan = plan_tools(tools, choice, parallel)
    except InvalidParameter as exc:
        read = " (functions are read as tools: {type: function, function: FUNCTION})" if functions else ""
        raise BatchInputError(f"{where}: {exc}{read}") from None
    return plan, functions


def _function_choice(given: Any, where: str) -> Any:
    """OpenAI's function_call ("none", "auto" or {name}) as the tool_choice it stands for."""
    if given is None or given in ("none", "auto"):
        return given
    if isinstance(given, dict) and isinstance(given.get("name"), str):
        return {"type": "function", "function": {"name": given["name"]}}
    raise BatchInputError(f'{where} must be "none", "auto" or {{name: FUNCTION}}, got {given!r:.80}')


def _loaded(given: Any, where: str, files: SuiteFiles) -> Any:
    """A tools or functions value: as written, or read from ``file://`` (.json, .yaml) relative to the suite's folder;
    one that uses vars (promptfoo fills them per test) is refused by name."""
    if isinstance(given, str) and given.startswith("file://"):
        path = files.path(given.removeprefix("file://"))
        if path.suffix.lower() not in (".json", ".yaml", ".yml"):
            raise BatchInputError(f"{where}: {given}: tools are read from .json or .yaml files")
        try:
            given = load_yaml(path.read_text(encoding="utf-8"))
        except (OSError, ValueError, yaml.YAMLError) as exc:
            raise BatchInputError(f"{where}: cannot read {path}: {exc}") from None
    if given is not None and "{{" in json.dumps(given):
        raise BatchInputError(f"{where}: tools that use {{{{vars}}}} are not read here (each test would offer "
                              "other tools); write them out")
    return given
