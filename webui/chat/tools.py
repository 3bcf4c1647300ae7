"""OpenAI tool calling: offering tools to a model and reading its calls back, for /v1/chat/completions and for
batch rows whose provider has tools (webui.batch.run.provider_prompt).

Tools reach the model through its own chat template when the template takes
``tools`` (Qwen, Llama 3.1, Hermes, Mistral…). A template without them gets the
fallback: a system block listing the functions and asking for calls written as

    <tool_call>{"name": "<function>", "arguments": {...}}</tool_call>

(the Hermes format many models know), with earlier calls and ``tool`` results
written into the history the same way. ``tool_choice`` "required" or a named
function constrains the reply to such calls, arguments fitting each function's
JSON schema (a Lark grammar through structured output); "auto" lets the model
choose and the reply is read for calls afterwards; "none" leaves tools out.
"""

from __future__ import annotations

import contextlib
import json
import re
import secrets
from dataclasses import dataclass
from typing import Any

from loaders.base import Tokenizer
from webui.chat.prompt import render_chat_prompt
from webui.chat.templates import ChatTemplate
from webui.engine.params import InvalidParameter
from webui.engine.structured import StructuredError, grammar_of

CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"
FALLBACK = ("You can call functions. To call one, reply with only\n"
            '<tool_call>{"name": "<function name>", "arguments": {<the arguments as JSON>}}</tool_call>\n'
            "(one block per call) and nothing else. The functions, as JSON:\n")


@dataclass(frozen=True)
class ToolPlan:
    tools: tuple[dict, ...]  # OpenAI's {"type": "function", "function": {...}} objects, as sent
    choice: str  # "auto", "required" or a function's name ("none" leaves no plan at all)
    parallel: bool

    @property
    def functions(self) -> list[dict]:
        return [t["function"] for t in self.tools]

    def grammar(self) -> dict | None:
        """structured_outputs for "required" or a named function: calls whose arguments fit the schemas."""
        if self.choice == "auto":
            return None
        chosen = [f for f in self.functions if self.choice in ("required", f["name"])]
        schema = {"x-guidance": {"whitespace_flexible": False},  # compact: {"a":1}
                  "anyOf": [{"type": "object", "additionalProperties": False, "required": ["name", "arguments"],
                             "properties": {"name": {"const": f["name"]},
                                            "arguments": closed_schema(f.get("parameters") or {"type": "object"})}}
                            for f in chosen]}
        calls = "call+" if self.parallel else "call"
        return {"grammar": f'start: {calls}\ncall: "{CALL_OPEN}" body "{CALL_CLOSE}"\nbody: %json {json.dumps(schema)}'}


_SUBSCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SUBSCHEMA_MAPS = ("properties", "$defs", "definitions", "patternProperties", "dependentSchemas")
_SUBSCHEMAS = ("items", "additionalProperties", "not", "if", "then", "else", "contains")


def closed_schema(schema: Any) -> Any:
    """A copy of a JSON schema in which every object that lists its ``properties`` and does not say
    ``additionalProperties`` (or ``patternProperties``) takes no other keys, as llama.cpp's grammar converter and
    Outlines read such schemas: a model's call then has exactly the keys its tool asks for, not extra ones until
    max_tokens. Objects without ``properties`` stay free-form."""
    if isinstance(schema, list):
        return [closed_schema(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: value for key, value in schema.items()}
    for key in _SUBSCHEMA_LISTS:
        if isinstance(out.get(key), list):
            out[key] = [closed_schema(item) for item in out[key]]
    for key in _SUBSCHEMA_MAPS:
        if isinstance(out.get(key), dict):
            out[key] = {name: closed_schema(item) for name, item in out[key].items()}
    for key in _SUBSCHEMAS:
        if isinstance(out.get(key), (dict, list)):
            out[key] = closed_schema(out[key])
    if isinstance(out.get("properties"), dict) and "additionalProperties" not in out \
            and "patternProperties" not in out:
        out["additionalProperties"] = False
    return out


def plan_tools(tools: list[dict] | None, tool_choice: Any, parallel: bool | None) -> ToolPlan | None:
    """The request's tools and choice, checked (InvalidParameter names the field); None: no tools this time."""
    if tool_choice is not None and not tools and tool_choice != "none":
        raise InvalidParameter("tool_choice", "tool_choice needs tools", tool_choice)
    if not tools or tool_choice == "none":
        return None
    names = []
    for i, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(function, dict) \
                or not isinstance(function.get("name"), str) or not function["name"]:
            raise InvalidParameter(f"tools[{i}]", f'tools[{i}] must be {{"type": "function", "function": '
                                                  f'{{"name": ..., "parameters": {{...}}}}}}', tool)
        parameters = function.get("parameters")
        if parameters is not None and not isinstance(parameters, dict):
            raise InvalidParameter(f"tools[{i}]", f"tools[{i}].function.parameters must be a JSON schema object",
                                   tool)
        if parameters:
            try:
                grammar_of("json", parameters)
            except StructuredError as exc:
                raise InvalidParameter(f"tools[{i}]", f"tools[{i}].function.parameters: {exc}", tool) from None
        names.append(function["name"])
    if tool_choice in (None, "auto", "required"):
        choice = tool_choice or "auto"
    elif isinstance(tool_choice, dict) and isinstance((tool_choice.get("function") or {}).get("name"), str):
        choice = tool_choice["function"]["name"]
        if choice not in names:
            raise InvalidParameter("tool_choice", f"tool_choice names '{choice}', which is not among the tools: "
                                                  f"{', '.join(names)}", tool_choice)
    else:
        raise InvalidParameter("tool_choice", 'tool_choice must be "none", "auto", "required" or '
                                              '{"type": "function", "function": {"name": ...}}', tool_choice)
    return ToolPlan(tuple(tools), choice, parallel is not False)


def template_takes_tools(source: str | None) -> bool:
    """Whether a chat template's Jinja source renders ``tools``."""
    return "tools" in (source or "")


def template_messages(messages: list[dict], plan: ToolPlan | None, native: bool) -> list[dict]:
    """The history as the template gets it. Natively: OpenAI's shape (arguments as objects, which templates
    expect). Otherwise: calls and results written as text, and the functions in the system message."""
    out = []
    for m in messages:
        calls = m.get("tool_calls") or []
        if native:
            entry = {"role": m["role"], "content": m.get("content") or ""}
            if calls:
                entry["tool_calls"] = [{"type": "function", "id": c.get("id"), "function": {
                    "name": c["function"]["name"], "arguments": _arguments(c["function"].get("arguments"))}}
                    for c in calls]
            if m["role"] == "tool":
                entry["tool_call_id"] = m.get("tool_call_id")
            out.append(entry)
        elif m["role"] == "tool":
            out.append({"role": "user", "content": f"<tool_response>\n{m.get('content') or ''}\n</tool_response>"})
        else:
            text = (m.get("content") or "") + "".join(
                CALL_OPEN + json.dumps({"name": c["function"]["name"],
                                        "arguments": _arguments(c["function"].get("arguments"))}) + CALL_CLOSE
                for c in calls)
            out.append({"role": m["role"], "content": text})
    if plan is not None and not native:
        block = FALLBACK + json.dumps(plan.functions, ensure_ascii=False)
        if out and out[0]["role"] == "system":
            out[0] = {"role": "system", "content": out[0]["content"] + "\n\n" + block}
        else:
            out.insert(0, {"role": "system", "content": block})
    return out


def render_with_tools(tokenizer: Tokenizer, messages: list[dict], plan: ToolPlan | None,
                      template: ChatTemplate | None = None) -> tuple[str, list[dict]]:
    """(the chat prompt, the messages as the template got them) with tools offered (``plan``) or in the history:
    through the template's own tool support, or the fallback written into the messages (``template`` None: the
    model's own)."""
    template = template or ChatTemplate("")
    native = template_takes_tools(template.source if template.source is not None else tokenizer.chat_template)
    shaped = template_messages(messages, plan, native)
    if native:
        tools = list(plan.tools) if plan else None
        return template.render(tokenizer, shaped, add_generation_prompt=True, tools=tools), shaped
    return render_chat_prompt(tokenizer, shaped, template=template), shaped


def _arguments(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value if value is not None else {}


@dataclass
class ToolCall:
    name: str
    arguments: str  # JSON text, as OpenAI sends it
    id: str

    def to_dict(self) -> dict:
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


_BLOCK = re.compile(re.escape(CALL_OPEN) + r"\s*(.*?)\s*" + re.escape(CALL_CLOSE), re.S)
_JSON = json.JSONDecoder()


def _call_blocks(text: str) -> list[tuple[int, int, str]]:
    """(start, end, body) of each <tool_call> block. A body that is JSON is read as JSON, so a closing tag inside
    one of its strings ({"city": "x</tool_call>y"}, which the schema allows) does not end the block; otherwise
    the block ends at the first closing tag."""
    blocks, pos = [], 0
    while (start := text.find(CALL_OPEN, pos)) >= 0:
        inner = start + len(CALL_OPEN)
        body_at = len(text) - len(text[inner:].lstrip())
        try:
            _, body_end = _JSON.raw_decode(text, body_at)
        except ValueError:
            body_end = -1
        after = text[body_end:].lstrip() if body_end >= 0 else ""
        if after.startswith(CALL_CLOSE):
            blocks.append((start, len(text) - len(after) + len(CALL_CLOSE), text[body_at:body_end]))
        else:
            match = _BLOCK.match(text, start)
            if match is None:
                break
            blocks.append((start, match.end(), match.group(1)))
        pos = blocks[-1][1]
    return blocks


def _outside_blocks(text: str, blocks: list[tuple[int, int, str]]) -> str:
    """``text`` without its call blocks."""
    kept, pos = [], 0
    for start, end, _ in blocks:
        kept.append(text[pos:start])
        pos = end
    return "".join(kept) + text[pos:]


def read_calls(text: str, plan: ToolPlan) -> tuple[str | None, list[ToolCall]]:
    """(content, calls) of a reply: calls in <tool_call> blocks, or the whole reply as one call's JSON; text that
    is not a call for one of the tools stays content."""
    names = {f["name"] for f in plan.functions}
    blocks = _call_blocks(text)
    bodies = [body for _, _, body in blocks]
    rest = _outside_blocks(text, blocks).strip() if bodies else text.strip()
    if not bodies and text.strip().startswith("{"):
        bodies, rest = [text.strip()], ""
    calls = []
    for body in bodies:
        try:
            data = json.loads(body)
        except ValueError:
            continue
        if isinstance(data, dict) and data.get("name") in names:
            args = data.get("arguments", data.get("parameters", {}))
            calls.append(ToolCall(data["name"], json.dumps(args, ensure_ascii=False), "call_" + secrets.token_hex(12)))
    if not calls:
        return text, []
    if not plan.parallel:
        calls = calls[:1]
    return rest or None, calls


def reply_calls(text: str, plan: ToolPlan, finish_reason: str | None) -> tuple[str | None, list[ToolCall]]:
    """(content, calls) of a finished reply. One cut by max_tokens (or the time limit) in the middle of a call
    gives that call as far as it was generated (its arguments cut, as OpenAI returns them on a cut), never the
    call's markup as content."""
    return cut_calls(text, plan) if finish_reason in ("length", "timeout") else read_calls(text, plan)


def cut_calls(text: str, plan: ToolPlan) -> tuple[str | None, list[ToolCall]]:
    """(content, calls) of a reply that may end inside a tool call: every call whose name was complete, with its
    arguments so far (whole ones as read_calls gives them), and the text outside the calls as content."""
    bare = text.lstrip()
    if CALL_OPEN in text:
        body = text
        outside = _outside_blocks(text, _call_blocks(text))
        content = outside[:outside.find(CALL_OPEN)] if CALL_OPEN in outside else outside
    elif bare.startswith("{"):  # a call written as bare JSON (auto): a call only if a tool's name is complete
        body, content = CALL_OPEN + bare, ""
    else:
        return text, []
    names = {f["name"] for f in plan.functions}
    calls: dict[int, ToolCall] = {}
    reader = CallStream()
    for delta in reader.feed(body) + reader.end():
        if "id" in delta:
            calls[delta["index"]] = ToolCall(delta["function"]["name"], "", delta["id"])
        else:
            calls[delta["index"]].arguments += delta["function"]["arguments"]
    kept = [call for _, call in sorted(calls.items()) if call.name in names]
    if not kept:
        return (text, []) if CALL_OPEN not in text else (content.strip() or None, [])
    for call in kept:
        with contextlib.suppress(ValueError):  # a whole value: written as read_calls writes it
            call.arguments = json.dumps(json.loads(call.arguments), ensure_ascii=False)
    return content.strip() or None, kept if plan.parallel else kept[:1]


def may_be_a_call(text_so_far: str) -> bool:
    """Whether a reply that begins like this may still turn out to be a tool call (so a stream holds it back)."""
    start = text_so_far.lstrip()
    return not start or CALL_OPEN.startswith(start[:len(CALL_OPEN)]) or start.startswith("{")


_CALL_HEAD = re.compile(r'\s*\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"arguments"\s*:\s*')
_NAME_HEAD = re.compile(r'\s*\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"')


class CallStream:
    """Reads a constrained reply ("required" or a named function: the grammar writes each call as
    ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, properties in that order) as it streams, and
    gives OpenAI's tool-call deltas as soon as they are known: the id and name once the name is complete, then
    each new piece of the arguments as it is generated."""

    def __init__(self) -> None:
        self.text, self.pos, self.calls = "", 0, 0
        self.state = "between"  # between calls, in a call's head (before its arguments), or in "arguments"
        self.depth, self.in_string, self.escape = 0, False, False

    def feed(self, text: str) -> list[dict]:
        self.text += text
        out: list[dict] = []
        while True:
            if self.state == "between":
                start = self.text.find(CALL_OPEN, self.pos)
                if start < 0:
                    return out
                self.pos, self.state = start + len(CALL_OPEN), "head"
            elif self.state == "head":
                head = _CALL_HEAD.match(self.text, self.pos)
                if head is None or head.end() == len(self.text):  # not all there yet (more spaces may follow)
                    return out
                out.append({"index": self.calls, "id": "call_" + secrets.token_hex(12), "type": "function",
                            "function": {"name": json.loads(f'"{head.group(1)}"'), "arguments": ""}})
                self.pos, self.state, self.depth = head.end(), "arguments", 0
            else:
                start, ended = self.pos, self._scan()
                if self.pos > start:
                    out.append({"index": self.calls, "function": {"arguments": self.text[start:self.pos]}})
                if not ended:
                    return out
                self.calls, self.state = self.calls + 1, "between"

    def end(self) -> list[dict]:
        """The reply ended (cut off): a call whose name is complete but whose arguments had not begun is given,
        with no arguments."""
        if self.state != "head":
            return []
        head = _NAME_HEAD.match(self.text, self.pos)
        if head is None:
            return []
        self.state, self.pos = "arguments", len(self.text)
        return [{"index": self.calls, "id": "call_" + secrets.token_hex(12), "type": "function",
                 "function": {"name": json.loads(f'"{head.group(1)}"'), "arguments": ""}}]

    def _scan(self) -> bool:
        """Advance over the arguments' JSON; True once its value is complete."""
        while self.pos < len(self.text):
            c = self.text[self.pos]
            self.pos += 1
            if self.in_string:
                self.escape, self.in_string = (False, True) if self.escape else (c == "\\", c != '"')
            elif c == '"':
                self.in_string = True
            elif c in "{[":
                self.depth += 1
            elif c in "}]":
                self.depth -= 1
                if self.depth == 0:
                    return True
        return False


@dataclass
class ReplyPiece:
    """A piece of a streamed reply: ``text``, or a tool call's start (``call`` its index, with ``id`` and ``name``),
    or a piece of that call's arguments (``call`` with ``arguments``)."""

    text: str = ""
    call: int | None = None
    id: str | None = None
    name: str | None = None
    arguments: str = ""


class ReplyReader:
    """Reads a reply with tools offered as it streams, for any API's stream to write out: each call as soon as it is
    known. Constrained to calls ("required" or a named function: ``CallStream``), each call streams as it is
    generated; with "auto", text that may still turn out to be a call is held back, and a reply that began as one is
    read at its end (``reply_calls``), text first."""

    def __init__(self, plan: ToolPlan) -> None:
        self.plan = plan
        self.calls = 0  # the calls given so far
        self._constrained = CallStream() if plan.choice != "auto" else None
        self._held: str | None = ""  # None: decided, the reply is text

    @property
    def is_text(self) -> bool:
        """Whether the reply turned out to be text, not calls ("auto"): the rest of it streams as it comes."""
        return self._held is None and self.calls == 0

    def feed(self, text: str, finish_reason: str | None) -> list[ReplyPiece]:
        """The pieces known once ``text`` came (``finish_reason``: the reply ended with it)."""
        if self._constrained is not None:
            deltas = self._constrained.feed(text) + (self._constrained.end() if finish_reason else [])
            return [self._piece(delta) for delta in deltas]
        if self._held is None:
            return [ReplyPiece(text)] if text else []
        self._held += text
        if finish_reason is None and may_be_a_call(self._held):
            return []
        held, self._held = self._held, None
        content, calls = reply_calls(held, self.plan, finish_reason) if finish_reason else (held, [])
        pieces = [ReplyPiece(content)] if content else []
        for call in calls:
            pieces += [ReplyPiece(call=self.calls, id=call.id, name=call.name),
                       ReplyPiece(call=self.calls, arguments=call.arguments)]
            self.calls += 1
        return pieces

    def _piece(self, delta: dict) -> ReplyPiece:
        function = delta["function"]
        if "id" in delta:
            self.calls = delta["index"] + 1
            return ReplyPiece(call=delta["index"], id=delta["id"], name=function["name"])
        return ReplyPiece(call=delta["index"], arguments=function["arguments"])
