"""The Responses API's items: a request's ``input`` read into items (each checked, a 400 naming ``input[i]...``, and
given an id, as they are stored and listed), and a conversation's items as chat messages for ``start_chat``.

Items: messages (role user, system, developer or assistant; content a string or parts: input_text, input_image,
input_file, output_text), function_call and function_call_output, and item_reference (an item of a stored response,
by its id). An assistant message and the function calls after it are one chat message (the reply that made them).
"""

from __future__ import annotations

import re
import secrets
from typing import Any, Callable

from webui.api.errors import APIError, to_api_error
from webui.api.responses_protocol import RENAMED_PARAMS

ROLES = ("user", "system", "developer", "assistant")
HOSTED_ITEMS = ("file_search_call", "web_search_call", "computer_call", "computer_call_output", "code_interpreter_call",
                "image_generation_call", "local_shell_call", "local_shell_call_output", "mcp_call", "mcp_list_tools",
                "mcp_approval_request", "mcp_approval_response", "custom_tool_call", "custom_tool_call_output",
                "shell_call", "shell_call_output", "apply_patch_call", "apply_patch_call_output", "reasoning",
                "compaction")


def item_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(24)}"


def _bad(path: str, message: str) -> APIError:
    return APIError(400, f"{path}: {message}", param=path)


def read_input(given: str | list[Any] | None, reference: Callable[[str], dict[str, Any] | None]) -> list[dict]:
    """The request's input as stored items, each with an id; ``reference`` finds an item_reference's item."""
    if given is None:
        return []
    if isinstance(given, str):
        return [_message({"role": "user", "content": given}, "input")]
    out = []
    for i, item in enumerate(given):
        path = f"input[{i}]"
        if not isinstance(item, dict):
            raise _bad(path, "each input item must be an object (a message, function_call, function_call_output "
                             "or item_reference)")
        kind = item.get("type", "message" if "role" in item else None)
        if kind == "message":
            out.append(_message(item, path))
        elif kind == "function_call":
            for key in ("call_id", "name", "arguments"):
                if not isinstance(item.get(key), str):
                    raise _bad(f"{path}.{key}", f"a function_call item needs '{key}' (a string)")
            out.append({"id": item.get("id") or item_id("fc"), "type": "function_call", "call_id": item["call_id"],
                        "name": item["name"], "arguments": item["arguments"], "status": "completed"})
        elif kind == "function_call_output":
            if not isinstance(item.get("call_id"), str):
                raise _bad(f"{path}.call_id", "a function_call_output item needs 'call_id' (the call's call_id)")
            output = item.get("output")
            if not isinstance(output, (str, list)):
                raise _bad(f"{path}.output", "a function_call_output item needs 'output': a string or input_text "
                                             "parts")
            parts = output if isinstance(output, str) else [_output_part(p, f"{path}.output[{j}]")
                                                            for j, p in enumerate(output)]
            out.append({"id": item.get("id") or item_id("fco"), "type": "function_call_output",
                        "call_id": item["call_id"], "output": parts, "status": "completed"})
        elif kind == "item_reference":
            found = reference(item["id"]) if isinstance(item.get("id"), str) else None
            if found is None:
                raise APIError(404, f"{path}: no stored response of this API key has an item with the id "
                                    f"{item.get('id')!r}", type="not_found_error", param=f"{path}.id")
            out.append(found)
        elif kind in HOSTED_ITEMS:
            raise _bad(f"{path}.type", f"'{kind}' items belong to hosted tools or reasoning models, which are not "
                                       f"served here")
        else:
            raise _bad(f"{path}.type", f"unknown input item type {kind!r}; send message, function_call, "
                                       f"function_call_output or item_reference items")
    return out


def _message(item: dict, path: str) -> dict:
    role = item.get("role")
    if role not in ROLES:
        raise _bad(f"{path}.role", f"role must be one of {', '.join(ROLES)}, got {role!r}")
    content = item.get("content")
    if isinstance(content, str):
        parts = [_text_part(content, role)]
    elif isinstance(content, list):
        parts = [_part(p, f"{path}.content[{j}]", role) for j, p in enumerate(content)]
    else:
        raise _bad(f"{path}.content", "a message needs 'content': a string or a list of content parts")
    return {"id": item.get("id") or item_id("msg"), "type": "message", "role": role, "content": parts,
            "status": "completed"}


def _text_part(text: str, role: str) -> dict:
    return {"type": "output_text", "text": text, "annotations": []} if role == "assistant" else \
        {"type": "input_text", "text": text}


def _part(part: Any, path: str, role: str) -> dict:
    kind = part.get("type") if isinstance(part, dict) else None
    if kind in ("input_text", "output_text", "refusal", "text"):
        text = part.get("refusal" if kind == "refusal" else "text")
        if not isinstance(text, str):
            raise _bad(f"{path}.text", f"an {kind} part needs 'text' (a string)")
        return _text_part(text, role)
    if role == "assistant":
        raise _bad(f"{path}.type", f"an assistant message holds output_text parts, not {kind!r}")
    if kind == "input_image":
        if part.get("file_id") is not None:
            raise _bad(f"{path}.file_id", "images by file_id (OpenAI's Files API) are not served here; send "
                                          "image_url (a data: URL)")
        if not isinstance(part.get("image_url"), str):
            raise _bad(f"{path}.image_url", "an input_image part needs 'image_url' (a data: URL, or a URL where "
                                            "the server allows them)")
        return {"type": "input_image", "image_url": part["image_url"], "detail": part.get("detail") or "auto"}
    if kind == "input_file":
        for key in ("file_id", "file_url"):
            if part.get(key) is not None:
                raise _bad(f"{path}.{key}", f"files by {key} are not served here; send file_data (base64 or a "
                                            f"data: URL) and filename")
        if not isinstance(part.get("file_data"), str):
            raise _bad(f"{path}.file_data", "an input_file part needs 'file_data' (base64 or a data: URL)")
        return {"type": "input_file", "file_data": part["file_data"],
                **({"filename": part["filename"]} if isinstance(part.get("filename"), str) else {})}
    raise _bad(f"{path}.type", f"unknown content part type {kind!r}; send input_text, input_image or input_file")


def _output_part(part: Any, path: str) -> dict:
    """A part of a function call's output: text (the result goes into the prompt as a tool message's text)."""
    if not isinstance(part, dict) or part.get("type") != "input_text":
        raise _bad(f"{path}.type", "a function call's output takes input_text parts here (or a string)")
    return _part(part, path, "user")


def _chat_parts(parts: list[dict]) -> list[dict]:
    out: list[dict] = []
    for p in parts:
        if p["type"] == "input_image":
            out.append({"type": "image_url", "image_url": {"url": p["image_url"], "detail": p.get("detail")}})
        elif p["type"] == "input_file":
            out.append({"type": "file", "file": {"file_data": p["file_data"], "filename": p.get("filename")}})
        else:
            out.append({"type": "text", "text": p["text"]})
    return out


def chat_messages(items: list[tuple[str, dict]], instructions: str | None) -> tuple[list[dict], list[str]]:
    """(chat messages, the field each came from) for ``items`` given as (field, item): ``instructions`` first as
    a system message; an assistant message and the function calls right after it are one message (one reply)."""
    messages: list[dict] = []
    origins: list[str] = []
    if instructions:
        messages.append({"role": "system", "content": instructions})
        origins.append("instructions")
    in_reply = False  # the last message is an assistant's, which the calls that follow belong to
    for origin, item in items:
        kind = item["type"]
        if kind == "function_call":
            call = {"id": item["call_id"], "type": "function",
                    "function": {"name": item["name"], "arguments": item["arguments"]}}
            if in_reply:
                messages[-1].setdefault("tool_calls", []).append(call)
                continue
            message: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": [call]}
        elif kind == "function_call_output":
            output = item["output"]
            text = output if isinstance(output, str) else "".join(p.get("text", "") for p in output)
            message = {"role": "tool", "tool_call_id": item["call_id"], "content": text}
        elif item["role"] == "assistant":
            message = {"role": "assistant", "content": "".join(p["text"] for p in item["content"])}
        else:
            message = {"role": item["role"], "content": _chat_parts(item["content"])}
        messages.append(message)
        origins.append(origin)
        in_reply = message["role"] == "assistant"
    return messages, origins


_MESSAGE = re.compile(r"messages\[(\d+)\]")


def translated(exc: Exception, origins: list[str]) -> APIError:
    """A chat request's error in the Responses API's terms: ``messages[i]`` as the input item (or instructions,
    previous_response_id) it came from, chat parameter names as the Responses API's."""
    error = to_api_error(exc)

    def rename(text: str) -> str:
        text = _MESSAGE.sub(lambda m: origins[int(m.group(1))] if int(m.group(1)) < len(origins) else m.group(0),
                            text)
        for old, new in RENAMED_PARAMS.items():
            text = re.sub(rf"\b{old}\b", new, text)
        return text

    param = error.param
    if param == "messages":
        param = "input"
    return APIError(error.status, rename(error.message), error.type, rename(param) if param else param, error.code,
                    error.headers)


def output_as_items(output: list[dict]) -> list[dict]:
    """A response's output items as input items of the next turn (previous_response_id)."""
    return [item for item in output if item.get("type") in ("message", "function_call")]
