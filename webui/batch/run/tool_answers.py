"""Who answers a batch provider's tool calls, so a suite can test tool use (#44).

A provider's config may give, beside its ``tools``:

* ``tool_results``: canned results, by tool name. A text answers every call of that tool; a list of
  ``{arguments, result}`` answers a call whose arguments equal an item's (as JSON values: key order aside, 1 and
  1.0 the same), the first that does, and an item without ``arguments`` answers any call (write it last: a
  fallback). A call of a tool with no canned result, or whose arguments match no item, gets an error result,
  which the model reads and the row records.
* ``tools_from: local``: the workbench's own tools answer (webui.tools.ToolBox over the user data dir: the
  built-ins calculate, get_datetime and roll_dice, tool files, MCP servers). Without ``tools``, every local tool
  is offered (listed when the run starts; the model then chooses, tool_choice auto).
* ``max_tool_steps``: the turns that may call tools before the model must answer (default
  webui.chat.tool_loop.MAX_STEPS).

With either of the first two, each row runs the tool loop (webui.chat.tool_loop): its output is the final answer
and its calls are kept with the row (webui.batch.run.loop_rows).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any, Mapping

from webui.batch.asserts.values import same_json
from webui.batch.asserts.errors import BatchInputError
from webui.chat.tool_loop import MAX_STEPS
from webui.chat.tools import ToolPlan
from webui.tools.spec import ToolResult, failed

KEYS = ("tool_results", "tools_from", "max_tool_steps")
"""The provider config keys read here."""
MOST_STEPS = 50
"""The largest max_tool_steps a suite may ask for."""
LOOP_NEEDS = "tool_results (canned results) or tools_from: local"


@dataclass(frozen=True)
class CannedResult:
    """One canned result: what a call gets, and the arguments it answers (None: any)."""

    result: str
    arguments: Mapping[str, Any] | None = field(default=None, hash=False)

    def to_dict(self) -> dict[str, Any]:
        return {"result": self.result, **({"arguments": dict(self.arguments)} if self.arguments is not None else {})}


@dataclass(frozen=True)
class ToolAnswers:
    """How a provider's calls are answered: canned results by tool name, or the local tools; and the step limit."""

    canned: Mapping[str, tuple[CannedResult, ...]] = field(default_factory=dict, hash=False)
    local: bool = False
    max_steps: int = MAX_STEPS

    def to_dict(self) -> dict[str, Any]:
        return {"canned": {name: [item.to_dict() for item in items] for name, items in self.canned.items()},
                "local": self.local, "max_steps": self.max_steps}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ToolAnswers:
        canned = {str(name): tuple(CannedResult(str(item["result"]), item.get("arguments")) for item in items)
                  for name, items in (data.get("canned") or {}).items()}
        return cls(canned, bool(data.get("local", False)), int(data.get("max_steps", MAX_STEPS)))

    def call(self, name: str, arguments: Any, timeout: float | None = None) -> ToolResult:
        """A call answered from the canned results (what webui.chat.tool_loop's caller does)."""
        started = time.monotonic()
        items = self.canned.get(name)
        if not items:
            given = ", ".join(self.canned) or "none"
            return failed(name, "unavailable", f"the test gives no result for {name} (it gives results for: "
                                               f"{given})")
        try:
            parsed = json.loads(arguments) if isinstance(arguments, str) else arguments
        except ValueError:
            parsed = None
        for item in items:
            if item.arguments is None or same_json(parsed, dict(item.arguments)):
                return ToolResult(name, item.result, None, time.monotonic() - started)
        return failed(name, "bad_arguments", f"the test gives no result for {name} with the arguments {arguments}")


def check_local_choice(config: Mapping[str, Any], where: str) -> None:
    """With ``tools_from: local`` and no tools listed, the tools are known only when the run starts: a tool_choice
    other than auto (which would name or require them) is refused by name."""
    if config.get("tools_from") is None or config.get("tools") is not None or config.get("functions") is not None:
        return
    choice = config.get("tool_choice")
    if choice not in (None, "auto"):
        raise BatchInputError(f"{where}.tool_choice: with tools_from: local and no tools listed, the model is "
                              f"offered every local tool and chooses (auto); list the tools to give tool_choice "
                              f"{json.dumps(choice)}")


def tool_answers(config: Mapping[str, Any], where: str, plan: ToolPlan | None, raw: bool) -> ToolAnswers | None:
    """The provider's :data:`KEYS` read and checked against the tools it offers (``plan``); None: no loop."""
    results, source, steps = (config.get(key) for key in KEYS)
    if results is None and source is None:
        if steps is not None:
            raise BatchInputError(f"{where}.max_tool_steps limits the tool loop, which runs when the provider gives "
                                  f"{LOOP_NEEDS}; add one of them or leave max_tool_steps out")
        return None
    if results is not None and source is not None:
        raise BatchInputError(f"{where}: give {LOOP_NEEDS}, not both")
    if raw:
        raise BatchInputError(f"{where}: tools are offered to chat models; an openai:completion provider sends the "
                              "prompt as a completion, which takes none (use openai:chat:NAME)")
    max_steps = _max_steps(steps, f"{where}.max_tool_steps")
    listed = config.get("tools") is not None or config.get("functions") is not None
    if listed and plan is None:
        raise BatchInputError(f"{where}: the provider offers no tools (tool_choice none, or an empty list), so no "
                              "call can be answered; offer tools (tool_choice auto) or drop "
                              f"{'tool_results' if results is not None else 'tools_from'}")
    if source is not None:
        if source != "local":
            raise BatchInputError(f"{where}.tools_from must be local (the workbench's own tools: calculate, "
                                  f"get_datetime, roll_dice, tool files, MCP servers), got {source!r:.80}")
        return ToolAnswers({}, True, max_steps)
    if plan is None:
        raise BatchInputError(f"{where}.tool_results answer the calls of the provider's tools, and it offers "
                              "none; add tools: [...] (or tools: file://tools.yaml)")
    return ToolAnswers(_canned(results, f"{where}.tool_results", [f["name"] for f in plan.functions]),
                       False, max_steps)


def _max_steps(given: Any, where: str) -> int:
    if given is None:
        return MAX_STEPS
    if isinstance(given, bool) or not isinstance(given, int) or not 1 <= given <= MOST_STEPS:
        raise BatchInputError(f"{where} must be a whole number of turns from 1 to {MOST_STEPS} (the turns that may "
                              f"call tools before the model must answer), got {given!r:.80}")
    return given


def _canned(given: Any, where: str, names: list[str]) -> dict[str, tuple[CannedResult, ...]]:
    example = "{get_weather: \"Sunny, 21 °C\"}"
    if not isinstance(given, Mapping) or not given:
        raise BatchInputError(f"{where} must map tool names to their results, e.g. {example}; got {given!r:.80}")
    out: dict[str, tuple[CannedResult, ...]] = {}
    for name, value in given.items():
        at = f"{where}.{name}"
        if name not in names:
            raise BatchInputError(f"{at}: {name!r} is not among the provider's tools ({', '.join(names)}); give "
                                  "results for the tools it offers")
        if isinstance(value, str):
            out[str(name)] = (CannedResult(value),)
        elif isinstance(value, list) and value:
            out[str(name)] = tuple(_item(item, f"{at}[{i}]") for i, item in enumerate(value))
        else:
            raise BatchInputError(f"{at} must be the result as text (what the model reads), or a list of "
                                  f"{{arguments, result}}; got {value!r:.80}{_as_text(value)}")
    return out


def _item(item: Any, where: str) -> CannedResult:
    if not isinstance(item, Mapping) or "result" not in item or set(item) - {"arguments", "result"}:
        raise BatchInputError(f"{where} must be {{arguments: {{...}}, result: text}} (arguments left out: any call); "
                              f"got {item!r:.80}")
    result, arguments = item["result"], item.get("arguments")
    if not isinstance(result, str):
        raise BatchInputError(f"{where}.result must be text (what the model reads), got {result!r:.80}"
                              f"{_as_text(result)}")
    if arguments is not None and not isinstance(arguments, Mapping):
        raise BatchInputError(f"{where}.arguments must be a mapping of the call's arguments, e.g. {{city: Paris}}; "
                              f"got {arguments!r:.80}")
    return CannedResult(result, None if arguments is None else json.loads(json.dumps(arguments)))


def _as_text(value: Any) -> str:
    """A hint for a result written as a number or an object: quote it."""
    if isinstance(value, (int, float, dict)) and not isinstance(value, bool):
        return f"; quote it to give it as text: '{json.dumps(value, ensure_ascii=False)}'"
    return ""
