"""Chat data rules, and the chat export format (version 2) of ChatStore.export/import_json.

    {
      "format": "llm-workbench.chat",       required, exactly this
      "version": 2,                         required: 1 or 2; a newer version is refused
      "title": "My chat",                   required, 1-200 characters, one line
      "system_prompt": "",                  optional string, default ""
      "created": 1717171717.5,              optional, seconds since the epoch, default now
      "messages": [                         required, parents before their children
        {"role": "user",                    required: "system", "user" or "assistant"
         "content": "Hi",                   required string
         "stats": {"tokens": 12},           optional object or null (tokens, ttft, seed...)
         "parent": null}                    version 2: the index of the message it follows (null: a
      ],                                    first message); versions of a message share a parent
      "current": 1,                         version 2, optional: the index of the shown path's last
                                            message (default: the last message)
      "mode": "chat",                       version 2, optional: instruct (default), chat or chat-instruct
      "character": "Ann"                    version 2, optional: the chat's character's name, or null
      "tools": ["roll_dice"]                version 2, optional: the tools the chat offers, by name
      "images": {"<sha256>": "<base64>"}    optional: the bytes of every image a message names, once each
      "documents": {"<sha256>": {"data": "<base64>", "kind": "pdf", "text": "..."}}
                                            optional: every document a message names, once each: its
                                            bytes, how it was read (text, pdf, docx) and its text
    }

A message may carry documents in order: "documents": [{"name": "report.pdf", "digest": "<sha256>"}], each
given in the top-level "documents" (whose bytes must hash to its name).

A message may name images (a vision model's input) in order: "images": ["<sha256>", ...], each the
SHA-256 (hex) of bytes given in the top-level "images"; an image whose bytes do not hash to its name is refused.

Version 1 (no "parent", no "current") is one linear conversation. Unknown keys are
ignored. NaN and Infinity are not JSON and are refused.

text-generation-webui's chat histories (``{"internal": [[user, reply], ...], "visible": [...]}``,
a first pair ``["<|BEGIN-VISIBLE-CHAT|>", greeting]`` for a greeting) are read too, and
``export_tgwui`` writes the shown conversation in that shape.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import html
import json
import math
import re
import time
from dataclasses import dataclass, field
from typing import Any

from webui.chat.modes import MODES
from webui.documents import Document, document_name
from webui.store.errors import StoreError

FORMAT = "llm-workbench.chat"
VERSION = 2
ROLES = ("system", "user", "assistant")
MAX_TITLE_LENGTH = 200
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def check_title(title: object) -> str:
    """Return the title stripped, or raise StoreError saying what is wrong with it."""
    if not isinstance(title, str):
        raise StoreError(f"title must be a string, got {type(title).__name__}")
    title = title.strip()
    if not title:
        raise StoreError("title must not be empty")
    if len(title) > MAX_TITLE_LENGTH:
        raise StoreError(f"title is too long ({len(title)} characters; at most {MAX_TITLE_LENGTH})")
    if _CONTROL.search(title):
        raise StoreError(f"title must not contain control characters (such as line breaks), "
                         f"got {title!r}")
    return title


@dataclass(frozen=True)
class ChatExport:
    """A chat as it travels in the file: no ids, no per-message timestamps."""

    title: str
    system_prompt: str
    created: float
    messages: list[tuple[str, str, dict[str, Any] | None]]
    """(role, content, stats), parents before their children."""
    parents: list[int | None] | None = None
    """Each message's parent, as an index into ``messages`` (None: a first message); None: a linear chat."""
    current: int | None = None
    """The index of the shown path's last message."""
    mode: str = "instruct"
    """The chat's mode (webui.chat.modes.MODES)."""
    character: str | None = None
    """The name of the chat's character (None: none)."""
    images: list[tuple[str, ...]] = field(default_factory=list)
    """Each message's images (SHA-256 names, in order), parallel to ``messages``; empty: no message has any."""
    image_data: dict[str, bytes] = field(default_factory=dict)
    """The bytes of every image named, by name."""
    tools: tuple[str, ...] = ()
    """The tools the chat offers its model, by name."""
    documents: list[tuple[Document, ...]] = field(default_factory=list)
    """Each message's documents (as read), parallel to ``messages``; empty: no message has any."""
    document_data: dict[str, bytes] = field(default_factory=dict)
    """The bytes of every document named, by digest."""

    def __post_init__(self) -> None:
        if self.parents is None:  # one linear conversation
            object.__setattr__(self, "parents", [None] + list(range(len(self.messages) - 1))
                               if self.messages else [])
            object.__setattr__(self, "current", len(self.messages) - 1 if self.messages else None)


def export_chat(chat: ChatExport) -> str:
    """Serialise to the version-1 JSON text (indented, UTF-8 characters kept as they are)."""
    messages: list[dict[str, Any]] = [{"role": role, "content": content, "stats": stats, "parent": parent}
                                      for (role, content, stats), parent in zip(chat.messages, chat.parents or [])]
    for message, names in zip(messages, chat.images):
        if names:
            message["images"] = list(names)
    for message, docs in zip(messages, chat.documents):
        if docs:
            message["documents"] = [{"name": d.name, "digest": d.digest} for d in docs]
    document: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION,
        "title": chat.title,
        "system_prompt": chat.system_prompt,
        "created": chat.created,
        "messages": messages,
        "current": chat.current,
    }
    if chat.mode != "instruct" or chat.character is not None:  # written where they say something
        document.update(mode=chat.mode, character=chat.character)
    if chat.tools:
        document["tools"] = list(chat.tools)
    if chat.image_data:
        document["images"] = {name: base64.b64encode(data).decode() for name, data in chat.image_data.items()}
    if chat.document_data:
        read = {d.digest: d for docs in chat.documents for d in docs}
        document["documents"] = {digest: {"data": base64.b64encode(data).decode(), "kind": read[digest].kind,
                                          "text": read[digest].text} for digest, data in chat.document_data.items()}
    return json.dumps(document, indent=2, ensure_ascii=False, allow_nan=False)


def parse_chat(text: str | bytes) -> ChatExport:
    """Parse and check an export; any problem raises StoreError saying where and what."""
    try:
        data = json.loads(text, parse_constant=_refuse_constant)
    except json.JSONDecodeError as e:
        raise _error(f"not valid JSON (line {e.lineno} column {e.colno}: {e.msg})") from None
    except (ValueError, TypeError) as e:
        raise _error(f"not valid JSON ({e})") from None
    if not isinstance(data, dict):
        raise _error(f"expected a JSON object at the top level, got {_kind(data)}")
    if "format" not in data and "internal" in data:
        return _tgwui(data)
    if "format" not in data:
        raise _error(f"missing field 'format' (expected {FORMAT!r}; "
                     "is this a chat exported by the workbench?)")
    if data["format"] != FORMAT:
        raise _error(f"format must be {FORMAT!r}, got {data['format']!r}")
    _check_version(data)
    title = _field(data, "title", str, "a string")
    try:
        title = check_title(title)
    except StoreError as e:
        raise _error(str(e)) from None
    system_prompt = _field(data, "system_prompt", str, "a string", default="")
    created = _field(data, "created", (int, float), "a number", default=None)
    if created is None:
        created = time.time()
    elif not math.isfinite(created) or created < 0:
        raise _error(f"created must be a time in seconds since the epoch, got {created!r}")
    raw_messages = _field(data, "messages", list, "a list")
    messages = [_message(i, m) for i, m in enumerate(raw_messages)]
    if data["version"] == 1:
        return ChatExport(title=title, system_prompt=system_prompt, created=float(created), messages=messages)
    parents = [_parent(i, m) for i, m in enumerate(raw_messages)]
    current = data.get("current", len(messages) - 1 if messages else None)
    if current is not None and (isinstance(current, bool) or not isinstance(current, int)
                                or not 0 <= current < len(messages)):
        raise _error(f"current must be the index of a message (0 to {len(messages) - 1}) or null, got {current!r}")
    mode = _field(data, "mode", str, "a string", default="instruct")
    if mode not in MODES:
        raise _error(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    character = data.get("character")
    if character is not None and not isinstance(character, str):
        raise _error(f"character must be a character's name or null, got {_kind(character)}")
    tools = data.get("tools", [])
    if not isinstance(tools, list) or not all(isinstance(t, str) and t.strip() for t in tools):
        raise _error(f"tools must be a list of tool names, got {_kind(tools)}")
    images, image_data = _images(raw_messages, data.get("images", {}))
    documents, document_data = _documents(raw_messages, data.get("documents", {}))
    return ChatExport(title=title, system_prompt=system_prompt, created=float(created), messages=messages,
                      parents=parents, current=current, mode=mode, character=character, images=images,
                      image_data=image_data, tools=tuple(dict.fromkeys(tools)), documents=documents,
                      document_data=document_data)


def _images(raw_messages: list[Any], given: object) -> tuple[list[tuple[str, ...]], dict[str, bytes]]:
    """Each message's image names and the bytes of those named, checked against their SHA-256 names."""
    if not isinstance(given, dict):
        raise _error(f"images must be an object of SHA-256 names to base64 bytes, got {_kind(given)}")
    out: list[tuple[str, ...]] = []
    data: dict[str, bytes] = {}
    for i, item in enumerate(raw_messages):
        names = item.get("images", [])
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise _error(f"messages[{i}].images must be a list of image names (SHA-256), got {_kind(names)}")
        for name in names:
            if name not in data:
                if not isinstance(given.get(name), str):
                    raise _error(f"messages[{i}].images names {name[:16]}..., whose bytes are not in 'images'")
                try:
                    data[name] = base64.b64decode(given[name], validate=True)
                except (binascii.Error, ValueError):
                    raise _error(f"images[{name[:16]}...] is not valid base64") from None
                if hashlib.sha256(data[name]).hexdigest() != name:
                    raise _error(f"images[{name[:16]}...]: its bytes do not hash to its name (SHA-256)")
        out.append(tuple(names))
    return out, data


def _documents(raw_messages: list[Any], given: object) -> tuple[list[tuple[Document, ...]], dict[str, bytes]]:
    """Each message's documents and the bytes of those named, checked against their SHA-256 names."""
    if not isinstance(given, dict):
        raise _error(f"documents must be an object of SHA-256 names to documents, got {_kind(given)}")
    out: list[tuple[Document, ...]] = []
    data: dict[str, bytes] = {}
    for i, item in enumerate(raw_messages):
        refs = item.get("documents", [])
        if not isinstance(refs, list) or not all(isinstance(r, dict) and isinstance(r.get("name"), str)
                                                 and isinstance(r.get("digest"), str) for r in refs):
            raise _error(f"messages[{i}].documents must be a list of {{\"name\", \"digest\"}} objects")
        docs = []
        for ref in refs:
            digest, entry = ref["digest"], given.get(ref["digest"])
            if not isinstance(entry, dict) or not isinstance(entry.get("data"), str) \
                    or entry.get("kind") not in ("text", "pdf", "docx") or not isinstance(entry.get("text"), str):
                raise _error(f"messages[{i}].documents names {digest[:16]}..., which 'documents' does not give as "
                             '{"data": base64, "kind": text|pdf|docx, "text": ...}')
            if digest not in data:
                try:
                    data[digest] = base64.b64decode(entry["data"], validate=True)
                except (binascii.Error, ValueError):
                    raise _error(f"documents[{digest[:16]}...] is not valid base64") from None
                if hashlib.sha256(data[digest]).hexdigest() != digest:
                    raise _error(f"documents[{digest[:16]}...]: its bytes do not hash to its name (SHA-256)")
            docs.append(Document(document_name(ref["name"]) or "document", digest, entry["text"], entry["kind"]))
        out.append(tuple(docs))
    return out, data


TGWUI_GREETING = "<|BEGIN-VISIBLE-CHAT|>"
TGWUI_TITLE = "Imported from text-generation-webui"


def _tgwui(data: dict[str, Any]) -> ChatExport:
    """text-generation-webui's history: [user, reply] pairs under "internal" (the raw text; "visible" is HTML)."""
    pairs = data["internal"]
    if not isinstance(pairs, list):
        raise _error(f"internal must be a list of [user message, reply] pairs, got {_kind(pairs)}")
    messages: list[tuple[str, str, dict[str, Any] | None]] = []
    for i, pair in enumerate(pairs):
        if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(x, str) for x in pair)):
            raise _error(f"internal[{i}] must be a [user message, reply] pair of strings, got {_kind(pair)}")
        user, reply = pair
        if user.strip() and user != TGWUI_GREETING:
            messages.append(("user", user, None))
        if reply.strip():
            messages.append(("assistant", reply, None))
    if not messages:
        raise _error("the text-generation-webui history holds no messages")
    return ChatExport(title=TGWUI_TITLE, system_prompt="", created=time.time(), messages=messages)


def export_tgwui(messages: list[tuple[str, str]]) -> str:
    """(role, content) of a conversation as text-generation-webui saves a chat history."""
    pairs: list[list[str]] = []
    for role, content in messages:
        if role == "user":
            pairs.append([content, ""])
        elif role == "assistant":
            if pairs and not pairs[-1][1]:
                pairs[-1][1] = content
            else:  # a reply with no message before it (a greeting)
                pairs.append([TGWUI_GREETING if not pairs else "", content])
    visible = [["" if u == TGWUI_GREETING else html.escape(u), html.escape(r)] for u, r in pairs]
    return json.dumps({"internal": pairs, "visible": visible}, indent=2, ensure_ascii=False)


def _parent(index: int, item: dict[str, Any]) -> int | None:
    parent = item.get("parent")
    if parent is not None and (isinstance(parent, bool) or not isinstance(parent, int) or not 0 <= parent < index):
        raise _error(f"messages[{index}].parent must be the index of an earlier message or null, got {parent!r}")
    return parent


def _check_version(data: dict[str, Any]) -> None:
    if "version" not in data:
        raise _error("missing field 'version'")
    version = data["version"]
    if isinstance(version, int) and not isinstance(version, bool) and version > VERSION:
        raise _error(f"version {version} was written by a newer workbench (this one reads "
                     f"versions 1 to {VERSION}); upgrade the workbench to import it")
    if isinstance(version, bool) or version not in (1, VERSION):
        raise _error(f"version must be 1 or {VERSION}, got {version!r}")


def _message(index: int, item: object) -> tuple[str, str, dict[str, Any] | None]:
    where = f"messages[{index}]"
    if not isinstance(item, dict):
        raise _error(f"{where} must be an object, got {_kind(item)}")
    if "role" not in item:
        raise _error(f"{where} is missing field 'role'")
    role = item["role"]
    if role not in ROLES:
        raise _error(f"{where}.role must be one of {', '.join(ROLES)}, got {role!r}")
    content = _field(item, "content", str, "a string", where=where)
    stats = item.get("stats")
    if stats is not None and not isinstance(stats, dict):
        raise _error(f"{where}.stats must be an object or null, got {_kind(stats)}")
    return role, content, stats


_MISSING = object()


def _field(data: dict[str, Any], key: str, types: type | tuple[type, ...], what: str,
           default: Any = _MISSING, where: str = "") -> Any:
    name = f"{where}.{key}" if where else key
    if key not in data:
        if default is _MISSING:
            raise _error(f"{where} is missing field {key!r}" if where
                         else f"missing field {key!r}")
        return default
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, types):
        raise _error(f"{name} must be {what}, got {_kind(value)}")
    return value


def _kind(value: object) -> str:
    """'a list', or 'a number (42)' for a scalar, for error messages."""
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean",
             int: "a number", float: "a number", type(None): "null"}
    kind = names.get(type(value), type(value).__name__)
    if isinstance(value, (str, int, float)) and not isinstance(value, bool):
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
        kind += f" ({shown})"
    return kind


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not allowed")


def _error(problem: str) -> StoreError:
    return StoreError(f"cannot import chat: {problem}")
