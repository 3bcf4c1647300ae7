"""What the tools package hands out: a tool's spec, a problem with a tool file or server, a call's result.

A tool is described as in OpenAI's function calling and text-generation-webui's tool files:
``{"type": "function", "function": {"name", "description", "parameters"}}``, the parameters a JSON schema
of an object.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Literal

import jsonschema

ToolKind = Literal["builtin", "file", "mcp"]
ErrorKind = Literal["unknown_tool", "bad_arguments", "failed", "timeout", "crashed", "unavailable"]

NAME_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # what OpenAI accepts as a function's name
EMPTY_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}}


@dataclass(frozen=True)
class ToolSpec:
    """A tool the model may call."""

    name: str  # the name the model calls it by (an MCP tool's may carry its server's name, see toolbox.py)
    description: str
    parameters: dict[str, Any] = field(hash=False)  # a JSON schema of the arguments object
    kind: ToolKind
    origin: str  # "" for a built-in, the tool file's path, or the MCP server's name
    remote_name: str = ""  # an MCP tool's own name on its server (may differ from ``name``)

    def openai(self) -> dict[str, Any]:
        """The tool in OpenAI's format, as sent in a request's ``tools`` and as text-generation-webui has it."""
        return {"type": "function",
                "function": {"name": self.name, "description": self.description, "parameters": self.parameters}}


@dataclass(frozen=True)
class ToolProblem:
    """A tool file that could not be used, or an MCP server (or its config) that gave no tools."""

    kind: Literal["file", "mcp", "config"]
    origin: str  # the file's path, the server's name, or the config file's path
    message: str  # says what is wrong and what to do

    def __str__(self) -> str:
        return f"{self.origin}: {self.message}"


@dataclass(frozen=True)
class ToolError:
    """Why a call gave no result: the caller's view of what the model reads as ``error: <message>``."""

    kind: ErrorKind
    message: str


@dataclass(frozen=True)
class ToolResult:
    """A finished call. ``text`` is what goes back to the model, an error included."""

    tool: str
    text: str
    error: ToolError | None
    seconds: float
    truncated: bool = False  # ``text`` was cut to the output limit (it says so at its end)

    @property
    def ok(self) -> bool:
        return self.error is None


def failed(tool: str, kind: ErrorKind, message: str, seconds: float = 0.0) -> ToolResult:
    """A result the model can read (``error: ...``) that also carries the error for the caller."""
    return ToolResult(tool, f"error: {message}", ToolError(kind, message), seconds)


def result_text(value: Any) -> str:
    """A tool's return value as the model reads it: a string as it is, anything else as JSON (as
    text-generation-webui does); a value JSON cannot write goes as its str()."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):  # not JSON (a set, an object): the model still gets something readable
        return str(value)


def truncate(text: str, max_chars: int, length: int | None = None) -> tuple[str, bool]:
    """``text`` cut to ``max_chars`` characters with a marker saying how much was left out. ``length``: how long
    the text was before someone else cut it (a tool's process sends no more than ``max_chars``)."""
    length = len(text) if length is None else length
    if length <= max_chars:
        return text, False
    marker = f"\n[output truncated: {length} characters, only the first {max_chars} are shown]"
    return text[:max_chars] + marker, True


def spec_problem(tool: Any) -> str | None:
    """What is wrong with a ``tool`` dict in OpenAI's function format, or None when it can be offered."""
    if not isinstance(tool, dict):
        return f"`tool` must be a dict, got {type(tool).__name__}"
    if tool.get("type", "function") != "function":
        return f'`tool["type"]` must be "function", got {tool.get("type")!r}'
    function = tool.get("function")
    if not isinstance(function, dict):
        return '`tool` needs a "function" dict: {"type": "function", "function": {"name": ..., ...}}'
    name = function.get("name")
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        return (f'`tool["function"]["name"]` must be 1 to 64 letters, digits, "_" or "-", got {name!r}')
    description = function.get("description", "")
    if not isinstance(description, str):
        return f'`tool["function"]["description"]` must be a string, got {type(description).__name__}'
    return parameters_problem(function.get("parameters", EMPTY_PARAMETERS))


def parameters_problem(parameters: Any) -> str | None:
    """What is wrong with a tool's parameters schema, or None."""
    if not isinstance(parameters, dict):
        return f"the parameters must be a JSON schema (a dict), got {type(parameters).__name__}"
    if parameters.get("type", "object") != "object":
        return f'the parameters schema must describe an object ("type": "object"), got {parameters.get("type")!r}'
    try:
        jsonschema.Draft202012Validator.check_schema(parameters)
    except jsonschema.SchemaError as e:
        return f"the parameters are not a valid JSON schema: {e.message}"
    return None


def arguments_problem(parameters: dict[str, Any], arguments: dict[str, Any]) -> str | None:
    """Why ``arguments`` do not fit the tool's schema (said so the model can correct its call), or None."""
    validator = jsonschema.Draft202012Validator(parameters)
    error = jsonschema.exceptions.best_match(validator.iter_errors(arguments))
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path)
    return f"the arguments do not fit the tool's parameters{f' at {where}' if where else ''}: {error.message}"
