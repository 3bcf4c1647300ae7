"""Prompt lists for a batch: .txt, .csv and .jsonl files (or uploaded content), with templating.

* ``.txt``: one prompt per non-empty line; a literal ``\\n`` in a line is a newline
  (``\\\\`` is a backslash). Each row has the variable ``prompt``.
* ``.csv``: a header row; the prompt is the ``prompt`` column, or the template
  filled from the row's columns. Columns named ``assert``, ``asserts`` or
  ``expected`` (optionally numbered: ``assert2``, ``expected_1``) hold asserts,
  one per line in a cell; an optional ``id`` column names the rows.
* ``.jsonl``: one object per line with ``prompt`` (or the template's variables)
  or ``messages`` (a chat: a list of ``{role, content}``, run through the chat
  template as it is), optional ``id`` and ``asserts`` (a list of compact strings
  or ``{"type", "value"}`` objects).

In an ``expected`` cell or key, a value that does not start with an assert kind
(``contains:``, ``regex:``, ...) means ``contains:<value>``: the output must
contain the expected answer. Templates use ``{{ name }}`` placeholders (and
Nunjucks filters and tags, as promptfoo's prompts do); when a template is given it
makes every row's prompt (a ``prompt`` column is then just another variable).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from webui.batch.asserts.kinds import ASSERT_KINDS
from webui.batch.asserts.assertion import Assert, parse_asserts
from webui.batch.asserts.errors import BatchInputError
from webui.safeload import DataTooLarge, load_json
from webui.batch.promptfoo.nunjucks import PLACEHOLDER as _PLACEHOLDER, is_nunjucks, render_nunjucks
from webui.chat.prompt import ROLES

SUFFIXES = (".txt", ".csv", ".jsonl")
ASSERT_COLUMN = re.compile(r"^(assert|asserts|expected)(_?\d+)?$", re.IGNORECASE)
_ESCAPE = re.compile(r"\\(\\|n)")


@dataclass(frozen=True)
class PromptRow:
    """One prompt of a batch. ``index`` is its 0-based position, ``id`` a unique name
    (the ``id`` column/key, else the 1-based position), ``text`` the final prompt."""

    index: int
    text: str
    variables: dict[str, str] = field(default_factory=dict, hash=False)
    asserts: list[Assert] = field(default_factory=list, hash=False)
    id: str = ""
    messages: tuple[dict[str, str], ...] | None = field(default=None, hash=False)
    """A chat prompt's messages ({role, content}, variables filled in; ``text`` is then their JSON); None: a text
    prompt, which runs as one user message."""
    origin: dict[str, Any] | None = field(default=None, hash=False)
    """Where a promptfoo suite's row came from: {"prompt": its label, "promptIdx", "testIdx", "description"}, for
    results in promptfoo's shape; None: not from one."""
    threshold: float | None = field(default=None, hash=False)
    """The weighted score of its asserts that passes the row (promptfoo's test threshold); None: every assert
    must pass."""
    params: dict[str, Any] | None = field(default=None, hash=False)
    """Sampling parameters for this prompt, as the OpenAI API names them, over its setting's (a promptfoo
    prompt's config); None: the setting's alone."""
    settings: tuple[str, ...] | None = field(default=None, hash=False)
    """The labels of the settings that run it (a promptfoo provider's prompts filter); None: every setting."""
    sets: tuple[tuple[tuple[int, ...], float], ...] = field(default=(), hash=False)
    """promptfoo's assert-sets with a threshold: (the indices of their asserts, the threshold): such a set passes
    when its asserts' weighted score reaches the threshold, whatever each of them says."""

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "id": self.id, "text": self.text, "variables": dict(self.variables),
                "asserts": [a.to_dict() for a in self.asserts],
                **({"messages": [dict(m) for m in self.messages]} if self.messages is not None else {}),
                **({"origin": dict(self.origin)} if self.origin is not None else {}),
                **({"threshold": self.threshold} if self.threshold is not None else {}),
                **({"params": dict(self.params)} if self.params else {}),
                **({"settings": list(self.settings)} if self.settings is not None else {}),
                **({"sets": [[list(members), limit] for members, limit in self.sets]} if self.sets else {})}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "PromptRow":
        """The inverse of :meth:`to_dict` (e.g. a stored run's prompts); asserts are validated again."""
        where = f"prompt {data.get('index', '?')}"
        try:
            index, text, row_id = int(data["index"]), str(data["text"]), str(data["id"])
            variables = {str(k): str(v) for k, v in data["variables"].items()}
            specs = list(data["asserts"])
            messages = chat_messages_of(data["messages"], where) if data.get("messages") is not None else None
            origin = dict(data["origin"]) if data.get("origin") is not None else None
            threshold = None if data.get("threshold") is None else float(data["threshold"])
            params = dict(data["params"]) if data.get("params") else None
            settings = None if data.get("settings") is None else tuple(str(s) for s in data["settings"])
            sets = tuple((tuple(int(i) for i in members), float(limit)) for members, limit in data.get("sets", []))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise BatchInputError(f"{where}: not a stored prompt row ({type(exc).__name__}: {exc})") from None
        return cls(index, text, variables, parse_asserts(specs, where), row_id, messages, origin, threshold,
                   params, settings, sets)


def chat_messages_of(value: Any, where: str) -> tuple[dict[str, str], ...]:
    """A chat prompt's messages checked: a non-empty list of {role, content} with a known role and text content
    (OpenAI's "developer" is the system's); content may be a list of text blocks (``{type: text, text}``, as
    OpenAI's and Anthropic's APIs take them), joined into one text as the API joins them."""
    if not isinstance(value, (list, tuple)) or not value:
        raise BatchInputError(f"{where}: a chat prompt is a non-empty list of {{role, content}} messages")
    out = []
    for i, message in enumerate(value):
        role = message.get("role") if isinstance(message, dict) else None
        role = "system" if role == "developer" else role
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):
            content = _block_text(content, f"{where}: message {i}")
        if role not in ROLES or not isinstance(content, str):
            raise BatchInputError(f"{where}: message {i} must be {{role: {'|'.join(ROLES)}, content: text}}, "
                                  f"got {json.dumps(message, ensure_ascii=False)[:80]}")
        out.append({"role": str(role), "content": content})
    return tuple(out)


def _block_text(blocks: list[Any], where: str) -> str:
    """The text of a message's content blocks; a block of another type (an image...) is refused by its type."""
    texts = []
    for n, block in enumerate(blocks):
        kind = block.get("type") if isinstance(block, dict) else None
        if kind != "text" or not isinstance(block.get("text"), str):
            raise BatchInputError(f"{where}: content block {n} is {json.dumps(kind or block)[:40]}; the workbench's "
                                  "models read text, so a chat prompt's content blocks must be {type: text, text}")
        texts.append(block["text"])  # cache_control and the like do not change what the model reads
    return "".join(texts)


# -- templating ----------------------------------------------------------------------

def template_variables(template: str) -> list[str]:
    """The placeholder names a template uses, in order; a malformed placeholder is an error."""
    names: list[str] = []
    for match in _PLACEHOLDER.finditer(template):
        name = match.group(1).strip()
        if not name or "{" in name or "}" in name:
            raise BatchInputError(f"template: '{match.group(0)}' is not a placeholder; write {{{{name}}}} "
                                  "with the name of a column or variable")
        names.append(name)
    rest = _PLACEHOLDER.sub("", template)
    if "{{" in rest:
        raise BatchInputError(f"template: '{{{{' at '{_excerpt(rest[rest.index('{{'):])}' is not closed with '}}}}'")
    return list(dict.fromkeys(names))


def render(template: str, variables: Mapping[str, str], *, where: str = "", noun: str = "variable") -> str:
    """Fill ``{{ name }}`` placeholders from ``variables``.

    An undefined variable is an error naming it and ``where`` (e.g. "row 3") and
    listing what the row has; ``noun`` is what the caller calls a variable ("column", "key"). A template with
    filters, ``{% if %}`` or ``{% for %}`` is rendered as promptfoo's Nunjucks (:mod:`webui.batch.promptfoo.nunjucks`).
    """
    if is_nunjucks(template, variables):
        return render_nunjucks(template, variables, where=where, noun=noun)
    template_variables(template)

    def fill(match: re.Match[str]) -> str:
        name = match.group(1).strip()
        if name not in variables:
            have = ", ".join(variables) or "none"
            prefix = f"{where}: " if where else ""
            raise BatchInputError(f"{prefix}the template uses {{{{{name}}}}}, but the row has no '{name}' {noun}; "
                                  f"{noun}s: {have}")
        return variables[name]

    return _PLACEHOLDER.sub(fill, template)


def escape_newlines(text: str) -> str:
    """One line of a .txt prompt list for ``text``: the inverse of :func:`unescape_newlines`."""
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def unescape_newlines(text: str) -> str:
    """Turn a literal ``\\n`` into a newline (and ``\\\\`` into one backslash); other text is unchanged."""
    return _ESCAPE.sub(lambda m: "\n" if m.group(1) == "n" else "\\", text)


def _check_template(template: str | None) -> None:
    if template is not None and not is_nunjucks(template, {}) and not template_variables(template):
        raise BatchInputError("the template has no {{...}} placeholders, so every row would get the same prompt; "
                              "use e.g. {{prompt}} or a column name")


# -- loaders -------------------------------------------------------------------------

def parse_lines(text: str, template: str | None = None) -> list[PromptRow]:
    """One prompt per non-empty line (a literal ``\\n`` is a newline); rows have the variable ``prompt``."""
    _check_template(template)
    rows: list[PromptRow] = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line:
            continue
        prompt = unescape_newlines(line)
        rows.append(_row(len(rows), {"prompt": prompt}, [], None, template, f"line {number}", "variable", prompt))
    return _finish(rows, "no prompts: the text has no non-empty lines")


def load_prompts(path: Path, template: str | None = None) -> list[PromptRow]:
    """Read a .txt, .csv or .jsonl prompt file (see the module docstring)."""
    path = Path(path)
    _suffix(path.name)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise BatchInputError(f"prompt file '{path}' does not exist") from None
    except (IsADirectoryError, PermissionError) as exc:
        raise BatchInputError(f"cannot read prompt file '{path}': {exc.strerror}") from None
    return load_prompts_text(path.name, data, template)


def load_prompts_text(name: str, content: str | bytes, template: str | None = None,
                      files_allowed: bool = True) -> list[PromptRow]:
    """Like :func:`load_prompts` for uploaded content; ``name``'s suffix picks the format. ``files_allowed``
    False: its asserts may not name files (see :func:`~webui.batch.asserts.assertion.parse_asserts`)."""
    suffix = _suffix(name)
    if isinstance(content, bytes):
        try:
            content = content.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise BatchInputError(f"{name}: not UTF-8 text (byte {exc.start}); save the file as UTF-8") from None
    content = content.removeprefix("\ufeff")
    try:
        if suffix == ".txt":
            return parse_lines(content, template)
        if suffix == ".csv":
            return parse_csv(content, template, files_allowed)
        return parse_jsonl(content, template, files_allowed)
    except BatchInputError as exc:
        raise BatchInputError(f"{name}: {exc}") from None


def parse_csv(text: str, template: str | None = None, files_allowed: bool = True) -> list[PromptRow]:
    """Rows from CSV text with a header; errors count data rows from 1 (the header is not a row)."""
    _check_template(template)
    try:
        table = [r for r in csv.reader(io.StringIO(text, newline=""), strict=True)]
    except csv.Error as exc:
        raise BatchInputError(f"not valid CSV: {exc}") from None
    if not table or not any(c.strip() for c in table[0]):
        raise BatchInputError("the CSV file is empty; it needs a header row (e.g. prompt,expected) and one row "
                              "per prompt")
    header = _header(table[0])
    asserts_cols = [c for c in header if ASSERT_COLUMN.match(c)]
    columns = [c for c in header if c not in asserts_cols]
    if template is None and "prompt" not in columns:
        raise BatchInputError(f"the CSV has no 'prompt' column and no template was given; columns: "
                              f"{', '.join(columns) or 'none'}. Add a 'prompt' column or use a template "
                              "with {{column}} placeholders")
    rows: list[PromptRow] = []
    for number, cells in enumerate(table[1:], 1):
        if not any(c.strip() for c in cells):
            continue
        where = f"row {number}"
        if len(cells) > len(header):
            raise BatchInputError(f"{where} has {len(cells)} cells but the header has {len(header)} columns")
        record = dict(zip(header, cells + [""] * (len(header) - len(cells))))
        variables = {c: record[c] for c in columns}
        specs = [s for c in asserts_cols for s in _cell_asserts(record[c], c)]
        rows.append(_row(len(rows), variables, specs, record.get("id"), template, where, "column",
                         variables.get("prompt"), files_allowed))
    return _finish(rows, "no prompts: the CSV has a header but no rows")


def parse_jsonl(text: str, template: str | None = None, files_allowed: bool = True) -> list[PromptRow]:
    """Rows from JSON Lines: one object per line; keys other than asserts are variables."""
    _check_template(template)
    rows: list[PromptRow] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"line {number}"
        try:
            obj = load_json(line)
        except json.JSONDecodeError as exc:
            raise BatchInputError(f"{where}: not valid JSON ({exc.msg} at column {exc.colno})") from None
        except DataTooLarge as exc:
            raise BatchInputError(f"{where}: {exc}") from None
        if not isinstance(obj, dict):
            raise BatchInputError(f"{where}: each line must be a JSON object like {{\"prompt\": \"...\"}}, "
                                  f"got {type(obj).__name__}")
        specs: list[Any] = []
        variables: dict[str, str] = {}
        for key, value in obj.items():
            if key == "messages":
                continue  # a chat: below
            if key in ("asserts", "assert"):
                specs.extend(value if isinstance(value, list) else [value])
            elif key == "expected":
                specs.extend(_expected(v) for v in (value if isinstance(value, list) else [value]))
            elif key == "vars" and isinstance(value, dict):
                variables.update({str(k): _text(v) for k, v in value.items()})
            else:
                variables[key] = _text(value)
        if "messages" in obj:
            if template is not None:
                raise BatchInputError(f"{where}: a chat (\"messages\") is its own prompt; it takes no template")
            chat = chat_messages_of(obj["messages"], where)
            row = _row(len(rows), variables, specs, variables.get("id"), None, where, "key", json.dumps(chat),
                       files_allowed)
            rows.append(dataclasses.replace(row, messages=chat))
            continue
        if template is None and "prompt" not in variables:
            raise BatchInputError(f"{where}: the object has no \"prompt\" (or \"messages\": a chat) key and no "
                                  f"template was given; keys: {', '.join(obj) or 'none'}")
        rows.append(_row(len(rows), variables, specs, variables.get("id"), template, where, "key",
                         variables.get("prompt"), files_allowed))
    return _finish(rows, "no prompts: the JSONL file has no objects")


# -- helpers -------------------------------------------------------------------------

def _row(index: int, variables: dict[str, str], specs: list[Any], row_id: str | None, template: str | None,
         where: str, noun: str, prompt: str | None, files_allowed: bool = True) -> PromptRow:
    text = render(template, variables, where=where, noun=noun) if template is not None else prompt or ""
    if not text.strip():
        what = "the rendered template" if template is not None else "the prompt"
        raise BatchInputError(f"{where}: {what} is empty")
    asserts = parse_asserts(specs, where, files_allowed)
    return PromptRow(index, text, variables, asserts, (row_id or "").strip() or str(index + 1))


def _finish(rows: list[PromptRow], empty_message: str) -> list[PromptRow]:
    if not rows:
        raise BatchInputError(empty_message)
    seen: dict[str, int] = {}
    for row in rows:
        if row.id in seen:
            raise BatchInputError(f"prompt {row.index + 1}: id '{row.id}' is already used by prompt "
                                  f"{seen[row.id] + 1}; ids must be unique")
        seen[row.id] = row.index
    return rows


def _header(cells: list[str]) -> list[str]:
    header = [c.strip() for c in cells]
    for position, name in enumerate(header, 1):
        if not name:
            raise BatchInputError(f"the CSV header has an empty column name (column {position})")
        if header.index(name) != position - 1:
            raise BatchInputError(f"the CSV header names the column '{name}' twice")
    return header


def _cell_asserts(cell: str, column: str) -> list[str]:
    lines = [line.strip() for line in cell.splitlines() if line.strip()]
    return [_expected(line) for line in lines] if column.lower().startswith("expected") else lines


def _expected(value: Any) -> Any:
    """An ``expected`` value: an assert if it starts with an assert kind, else contains:<value>."""
    if not isinstance(value, str):
        return value if isinstance(value, dict) else {"type": "contains", "value": _text(value)}
    kind = value.partition(":")[0].strip().lower()
    return value if kind in ASSERT_KINDS else {"type": "contains", "value": value.strip()}


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    return json.dumps(value, ensure_ascii=False)


def _suffix(name: str) -> str:
    suffix = Path(name).suffix.lower()
    if suffix not in SUFFIXES:
        raise BatchInputError(f"'{name}': unsupported prompt file type '{suffix or '(none)'}'; "
                              f"use {', '.join(SUFFIXES)}")
    return suffix


def _excerpt(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


def rows_from_texts(texts: Iterable[str]) -> list[PromptRow]:
    """Rows from a list of prompt strings (e.g. the UI's own list), taken verbatim."""
    rows = [PromptRow(i, t, {"prompt": t}, [], str(i + 1)) for i, t in enumerate(texts)]
    for row in rows:
        if not row.text.strip():
            raise BatchInputError(f"prompt {row.index + 1} is empty")
    return _finish(rows, "no prompts given")


def with_asserts(rows: Sequence[PromptRow], specs: Sequence[str], files_allowed: bool = True) -> list[PromptRow]:
    """``rows`` with the asserts in ``specs`` (one compact spec each) added to every row."""
    extra = parse_asserts([s for s in specs if s.strip()], "asserts for all prompts", files_allowed)
    return [dataclasses.replace(r, asserts=[*r.asserts, *extra]) for r in rows]
