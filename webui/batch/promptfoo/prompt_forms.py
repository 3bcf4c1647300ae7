"""promptfoo's prompts: each form a suite's ``prompts:`` may take, read into (label, prompt, own parameters).

Texts with ``{{vars}}``; chats (a JSON list of ``{role, content}`` written as text, or such a list in YAML);
``{id/label, raw}`` objects; ``{id/label, messages}`` chats (a message's content a text or a ``file://`` file,
trimmed); ``file://`` files, globs too: .txt/.md texts split on lines of ``---`` as promptfoo splits them,
.json/.yaml chats (Anthropic's ``{system, messages}`` too), .jsonl a chat a line, .csv a prompt a row (as promptfoo
0.115 reads them); ``{file://path: label}`` mappings and ``{id: file://path, label, config}`` objects; prompt
functions (.py, .js) refused by name. The suite around them: :mod:`webui.batch.promptfoo.reader`.
"""

from __future__ import annotations

import csv
import io
import re
from typing import Any

import yaml

from webui.batch.asserts.errors import BatchInputError
from webui.batch.asserts.suite_files import SuiteFiles
from webui.batch.promptfoo.providers import provider_params
from webui.batch.promptfoo.tests import Problems
from webui.batch.run.prompts import chat_messages_of
from webui.engine.params import InvalidParameter, SamplingParams
from webui.safeload import load_json, load_yaml


Prompt = str | tuple[dict[str, str], ...]
"""A promptfoo prompt: a text, or a chat (its messages)."""


PromptSpec = tuple[str, Prompt, dict[str, Any] | None]
"""A prompt's label, the prompt, and its own sampling parameters (None: its providers')."""


def read_prompts(given: Any, files: SuiteFiles, problems: Problems, notes: list[str]
             ) -> tuple[list[PromptSpec], list[str | None]]:
    """Each prompt, and each one's id (its ``id``; None: it has none); a prompt that cannot be read is a problem,
    the others are read on."""
    if given is None:
        problems.add("", "prompts is missing; list at least one prompt")
        return [], []
    if isinstance(given, dict):  # {path or text: label}, promptfoo's mapping form
        given = [{source: label} for source, label in given.items()]
    out: list[PromptSpec] = []
    ids: list[str | None] = []
    for i, item in enumerate(given if isinstance(given, list) else [given]):
        with problems.collect():
            found = _prompt(item, i, files, notes)
            own = item.get("id") if isinstance(item, dict) and len(found) == 1 else None
            out += found
            ids += [None if own is None else str(own)] * len(found)
    if not out and not problems.found:
        problems.add("", "prompts is empty; list at least one prompt")
    return out, ids


def _prompt(item: Any, i: int, files: SuiteFiles, notes: list[str]) -> list[PromptSpec]:
    where = f"promptfoo config: prompts[{i}]"
    if isinstance(item, dict) and len(item) == 1 and not set(item) & {"raw", "id", "label", "config"}:
        (source, label), = item.items()  # {file://path: label} (or {text: label}), as promptfoo reads a mapping
        is_file = str(source).startswith("file://") or files.is_file(str(source))
        item = {"id" if is_file else "raw": f"file://{str(source).removeprefix('file://')}" if is_file else source,
                "label": label}
    if isinstance(item, dict) and "raw" not in item and str(item.get("id", "")).startswith("file://"):
        ignored = set(item) - {"label", "id", "config"}
        if ignored:
            raise BatchInputError(f"{where}: {', '.join(sorted(ignored))} not supported here (a prompt file takes "
                                  f"id, label and config)")
        found = _prompt_files(files, str(item["id"]).removeprefix("file://"), where)
        label = item.get("label")
        params = _prompt_params(item.get("config"), f"{where} ({label or item['id']}).config", notes)
        return [((name if not label else str(label) if len(found) == 1 else f"{label} #{n + 1}"), prompt, params)
                for n, (name, prompt) in enumerate(found)]
    if isinstance(item, dict) and "raw" not in item and "messages" in item:
        return [_messages_prompt(item, i, files, notes)]
    if isinstance(item, dict):
        raw = item.get("raw")
        if not isinstance(raw, str):
            raise BatchInputError(f"{where} needs 'raw' (the prompt text) or 'messages' (a chat: a list of "
                                  f"{{role, content}})")
        ignored = set(item) - {"raw", "label", "id", "config"}
        if ignored:  # named, never dropped unseen
            raise BatchInputError(f"{where}: {', '.join(sorted(ignored))} not supported here (a prompt takes "
                                  f"raw, label, id and config)")
        label = str(item.get("label") or item.get("id") or f"prompt {i + 1}")
        return [(label, raw, _prompt_params(item.get("config"), f"{where} ({label}).config", notes))]
    if isinstance(item, list):  # a chat written in YAML: a list of {role, content}
        return [(f"prompt {i + 1}", chat_messages_of(item, where), None)]
    if isinstance(item, str) and item.startswith("file://"):
        return [(label, prompt, None) for label, prompt in _prompt_files(files, item.removeprefix("file://"), where)]
    if isinstance(item, str):
        return [(item.splitlines()[0][:40] if item.strip() else f"prompt {i + 1}", item, None)]
    raise BatchInputError(f"{where} must be a text, a chat (a list of {{role, content}}), file://path or "
                          f"{{raw: ...}}")


def _messages_prompt(item: dict[str, Any], i: int, files: SuiteFiles, notes: list[str]) -> PromptSpec:
    """promptfoo's chat prompt object ``{id, label, messages: [{role, content}], config}``: a chat whose message
    contents are texts or ``file://`` files (read as templates, trimmed as promptfoo trims loaded text)."""
    where = f"promptfoo config: prompts[{i}]"
    ignored = set(item) - {"messages", "label", "id", "config"}
    if ignored:
        raise BatchInputError(f"{where}: {', '.join(sorted(ignored))} not supported here (a chat prompt takes "
                              f"messages, label, id and config)")
    given = item["messages"]
    if not isinstance(given, list) or not given:
        raise BatchInputError(f"{where}.messages must be a non-empty list of {{role, content}}")
    messages = []
    for n, message in enumerate(given):
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str) and content.startswith("file://"):
            message = {**message, "content": _message_file(files, content.removeprefix("file://"),
                                                           f"{where}.messages[{n}]")}
        messages.append(message)
    label = str(item.get("label") or item.get("id") or f"prompt {i + 1}")
    return (label, chat_messages_of(messages, f"{where} ({label})"),
            _prompt_params(item.get("config"), f"{where} ({label}).config", notes))


def _message_file(files: SuiteFiles, name: str, where: str) -> str:
    """A chat message's ``file://`` content: the file's text, trimmed; a script is refused by name."""
    if re.search(r"\.(py|js|ts|mjs|cjs)(:[\w.]+)?$", name):
        raise BatchInputError(f"{where}: {name} is a prompt function, which the workbench does not run; save the "
                              f"text it returns in a .txt, .md or .j2 file")
    try:
        return files.path(name).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise BatchInputError(f"{where}: cannot read {name}: {exc}") from None


def _prompt_params(given: Any, where: str, notes: list[str]) -> dict[str, Any] | None:
    """A prompt's config: sampling parameters as the OpenAI API names them, applied over each provider's for this
    prompt's rows (as promptfoo merges a prompt's config over the provider's)."""
    if given is None:
        return None
    if not isinstance(given, dict):
        raise BatchInputError(f"{where} must be a mapping of parameters (temperature, max_tokens...)")
    if "seed" in given:  # a seed is the setting's: its samples count from it
        raise BatchInputError(f"{where}: seed not supported here (a prompt's config takes sampling parameters such "
                              f"as temperature, max_tokens, top_p, stop; set a seed in a provider's config)")
    fields = provider_params(given, where, notes)
    try:
        SamplingParams.from_api(fields, SamplingParams())
    except (InvalidParameter, ValueError) as exc:
        raise BatchInputError(f"{where}: {exc}") from None
    return fields or None


def text_or_chat(text: str, where: str) -> Prompt:
    """A prompt's text once its vars are filled in: promptfoo sends a JSON list of messages as that chat, any
    other text as one user message."""
    if text.lstrip().startswith("["):
        try:
            data = load_json(text)
        except ValueError:
            return text
        if isinstance(data, list) and data and all(isinstance(m, dict) and "role" in m for m in data):
            return chat_messages_of(data, where)
    return text


def _prompt_files(files: SuiteFiles, pattern: str, where: str) -> list[tuple[str, Prompt]]:
    """Prompts from file(s) (a glob gives every file it matches, in name order): .txt/.md texts (several split by
    lines of ---), .json a chat (a list of messages) or a list of chats, .jsonl a chat per line, .yaml/.yml a chat
    or a list of prompts."""
    function = re.search(r"\.(py|js|ts|mjs|cjs)(:[\w.]+)?$", pattern)
    if function:
        kind = "Python" if function.group(1) == "py" else "JavaScript"
        raise BatchInputError(f"{where}: {pattern} is a {kind} prompt function, which the workbench does not run; "
                              f"save the prompt it returns in a .txt, .json or .yaml file")
    paths = files.paths(pattern)
    if not paths:
        raise BatchInputError(f"{where}: no file matches {pattern}")
    out: list[tuple[str, Prompt]] = []
    for path in paths:
        suffix = path.suffix.lower()
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise BatchInputError(f"{where}: cannot read {path}: {exc}") from None
        if suffix in (".txt", ".md", ""):
            parts = [p.strip() for p in text.split("\n---\n") if p.strip()]
            out += [(path.name + (f" #{n + 1}" if len(parts) > 1 else ""), p) for n, p in enumerate(parts)]
        elif suffix in (".json", ".yaml", ".yml"):
            try:
                data = load_json(text) if suffix == ".json" else load_yaml(text)
            except (ValueError, yaml.YAMLError) as exc:
                raise BatchInputError(f"{where}: {path.name} is not valid {suffix[1:].upper()}: {exc}") from None
            if isinstance(data, dict) and isinstance(data.get("messages"), list):  # Anthropic's {system, messages}
                data = _anthropic_chat(data, f"{where}: {path.name}")
            chats = data if isinstance(data, list) and data and all(isinstance(c, list) for c in data) else [data]
            for n, chat in enumerate(chats):
                label = path.name + (f" #{n + 1}" if len(chats) > 1 else "")
                out.append((label, chat if isinstance(chat, str) else chat_messages_of(chat, f"{where}: {label}")))
        elif suffix == ".jsonl":
            lines = [line for line in text.splitlines() if line.strip()]
            for n, line in enumerate(lines):
                label = f"{path.name} #{n + 1}"
                try:
                    out.append((label, chat_messages_of(load_json(line), f"{where}: {label}")))
                except ValueError as exc:
                    raise BatchInputError(f"{where}: {label} is not valid JSON: {exc}") from None
        elif suffix == ".csv":
            out += _csv_prompts(text)
        else:
            raise BatchInputError(f"{where}: {path.name}: prompt files are read as .txt, .md, .json, .jsonl, .csv "
                                  f"or .yaml; JavaScript/Python prompt functions are not")
    return out


def _csv_prompts(text: str) -> list[tuple[str, Prompt]]:
    """A CSV of prompts as promptfoo 0.115 reads one (its processCsvPrompts): with a comma, a header row and a
    ``prompt`` column (rows without one skipped), an optional ``label`` column, fields trimmed; without a comma,
    one prompt a non-empty line (a first line ``prompt`` is the header). A prompt without a label is labelled
    ``Prompt N - <its text>``. A prompt that is a JSON list of messages is a chat, as any prompt's text."""
    lines = [line for line in re.split(r"\r?\n", text) if line.strip()]
    if "," in text:
        rows = list(csv.reader(io.StringIO(text.removeprefix("\ufeff"))))
        header = [h.strip() for h in rows[0]] if rows else []
        records = [{h: (cells[n].strip() if n < len(cells) else "") for n, h in enumerate(header)}
                   for cells in rows[1:] if any(c.strip() for c in cells)]
        prompts = [(r.get("label", ""), r["prompt"]) for r in records if r.get("prompt")]
    else:
        prompts = [("", line) for line in lines[1 if lines and lines[0].strip().lower() == "prompt" else 0:]]
    return [(label or f"Prompt {n + 1} - {prompt}", prompt) for n, (label, prompt) in enumerate(prompts)]


def _anthropic_chat(data: dict[str, Any], where: str) -> list[Any]:
    """A ``{system, messages}`` prompt (Anthropic's request shape) as one list of messages."""
    unknown = set(data) - {"system", "messages"}
    if unknown:
        raise BatchInputError(f"{where}: {', '.join(sorted(map(str, unknown)))} not supported here (a chat prompt "
                              "object takes system and messages)")
    system = data.get("system")
    if system is None:
        return list(data["messages"])
    return [{"role": "system", "content": system}, *data["messages"]]
