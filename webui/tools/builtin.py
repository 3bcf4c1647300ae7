"""The built-in tools, always offered, no file needed: calculate, get_datetime and roll_dice.

They answer as text-generation-webui's tool files of the same names do (the same names, the same JSON), so a
model prompted for either sees the same thing; a tool file of the same name takes their place.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable

from webui.tools.calculator import evaluate
from webui.tools.spec import ToolSpec


@dataclass(frozen=True)
class BuiltinTool:
    spec: ToolSpec
    run: Callable[[dict[str, Any]], Any]  # arguments (already checked against the schema) -> a JSON value


def _calculate(arguments: dict[str, Any]) -> dict[str, Any]:
    expression = arguments["expression"]
    return {"expression": expression, "result": evaluate(expression)}


def _get_datetime(arguments: dict[str, Any]) -> dict[str, Any]:
    now = datetime.now().astimezone()
    return {"date": now.strftime("%Y-%m-%d"), "time": now.strftime("%I:%M %p"), "weekday": now.strftime("%A"),
            "timezone": now.strftime("%Z (UTC%z)"), "iso": now.isoformat(timespec="seconds")}


def _roll_dice(arguments: dict[str, Any]) -> dict[str, Any]:
    count, sides = arguments.get("count", 1), arguments.get("sides", 20)
    dice = random.SystemRandom()  # no shared RNG state: each call draws from the OS
    rolls = [dice.randint(1, sides) for _ in range(count)]
    return {"rolls": rolls, "total": sum(rolls)}


def _spec(name: str, description: str, properties: dict[str, Any], required: list[str]) -> ToolSpec:
    parameters: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        parameters["required"] = required
    return ToolSpec(name, description, parameters, kind="builtin", origin="")


BUILTIN_TOOLS: tuple[BuiltinTool, ...] = (
    BuiltinTool(_spec("calculate", "Evaluate a math expression. Supports +, -, *, /, //, %, ** (power), "
                      "parentheses, pi, e and functions such as sqrt, log, sin, cos, round, min, max, factorial.",
                      {"expression": {"type": "string",
                                      "description": "The math expression to evaluate (e.g. '2 * (3 + 4)')."}},
                      ["expression"]), _calculate),
    BuiltinTool(_spec("get_datetime", "Get the current date and time.", {}, []), _get_datetime),
    BuiltinTool(_spec("roll_dice", "Roll one or more dice with the specified number of sides.",
                      {"count": {"type": "integer", "description": "Number of dice to roll.", "default": 1,
                                 "minimum": 1, "maximum": 1000},
                       "sides": {"type": "integer", "description": "Number of sides per die.", "default": 20,
                                 "minimum": 2, "maximum": 1000}}, []), _roll_dice),
)
