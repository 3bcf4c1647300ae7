"""Kept API requests as a promptfoo suite (#33): what an app sent, turned into tests that run again here (``launch.py
batch suite.yaml``, the Batch tab) or in promptfoo itself.

Each request is one prompt, as its app sent it: a chat request's ``messages`` (promptfoo's chat JSON), a completion
request's ``prompt``, labelled with the request's id, with the sampling parameters it set (stop, top_p, max_tokens,
response_format...) as the prompt's ``config`` (promptfoo merges a prompt's config over its provider's). What
promptfoo's openai provider takes in its own config, a request's ``seed`` and its ``tools`` (with tool_choice,
parallel_tool_calls), goes on the provider: the model that answered (``workbench:MODEL``), one provider for each
model and such config its requests sent, each running only its own requests (its ``prompts`` filter) when there are
several, so that every request is sent again as it was (#46 item 10). What neither can carry is named in the notes,
never dropped unsaid; a request that never reached a model (refused) or is not a chat or completion is left out,
also said.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Sequence

import yaml

from webui.engine.params import api_names
from webui.store.requests import CapturedRequest

ENDPOINTS = {"/v1/chat/completions": "messages", "/v1/completions": "prompt"}
"""Endpoints whose requests become prompts, and the field holding what the model reads."""
NOT_PARAMETERS = frozenset(("model", "messages", "prompt", "stream", "stream_options", "store", "metadata", "user",
                            "n"))
"""Body fields that are not a prompt's parameters and change nothing a suite reproduces (``n``: promptfoo runs each
prompt once)."""
PROVIDER_KEYS = ("seed", "tools", "tool_choice", "parallel_tool_calls", "functions", "function_call")
"""Body fields a promptfoo openai provider's config takes and a prompt's config does not: its provider's."""
PROMPT_KEYS = frozenset(api_names().values()) - NOT_PARAMETERS - set(PROVIDER_KEYS) | {"response_format"}
"""Body fields a prompt's config carries: the sampling parameters, and the reply's format."""
OTHER_NAMES = {"max_completion_tokens": "max_tokens"}
"""Newer OpenAI names of parameters, carried under the name a promptfoo config and our reader take."""


@dataclass
class Suite:
    """A promptfoo config made of requests, and what could not go in it."""

    text: str
    prompts: int
    notes: list[str] = field(default_factory=list)


def promptfoo_suite(items: Sequence[CapturedRequest], description: str = "") -> Suite:
    """The promptfoo YAML for ``items`` (kept requests, in order); ValueError when none can be a prompt."""
    prompts: list[dict[str, Any]] = []
    groups: dict[tuple[str, str], list[str]] = {}  # (model, its provider config as JSON) -> request ids
    notes: list[str] = []
    for item in items:
        prompt, why = _prompt(item)
        if prompt is None:
            notes.append(f"{item.id}: left out ({why})")
            continue
        prompts.append(prompt)
        model = item.model or str(item.request.get("model") or "")
        config = {k: item.request[k] for k in PROVIDER_KEYS if item.request.get(k) is not None}
        groups.setdefault((model, json.dumps(config, sort_keys=True)), []).append(item.id)
        carried = NOT_PARAMETERS | set(PROVIDER_KEYS) | PROMPT_KEYS | set(OTHER_NAMES)
        left = sorted(set(item.request) - carried)
        if left:
            notes.append(f"{item.id}: {', '.join(left)} not carried (neither a promptfoo prompt's config nor its "
                         "provider's takes them)")
    if not prompts:
        raise ValueError("none of these requests can be a prompt: " + "; ".join(notes) if notes else
                         "no requests to export")
    per_model: dict[str, int] = {}
    for model, _ in groups:
        per_model[model] = per_model.get(model, 0) + 1
    seen: dict[str, int] = {}
    providers = []
    for (model, config_json), ids in groups.items():
        seen[model] = seen.get(model, 0) + 1
        label = model if per_model[model] == 1 else f"{model} #{seen[model]}"
        providers.append({"id": f"workbench:{model}", "label": label, **({"config": json.loads(config_json)}
                                                                          if config_json != "{}" else {}),
                          **({"prompts": ids} if len(groups) > 1 else {})})
    suite = {"description": description or f"{len(prompts)} API requests kept by the workbench",
             "prompts": prompts, "providers": providers}
    return Suite(yaml.safe_dump(suite, sort_keys=False, allow_unicode=True, width=120), len(prompts), notes)


def _prompt(item: CapturedRequest) -> tuple[dict[str, Any] | None, str]:
    """(the prompt a request makes, or None and why not)."""
    key = ENDPOINTS.get(item.endpoint)
    if key is None:
        return None, f"{item.endpoint} is not a chat or completion request"
    if item.status != 200 or not isinstance(item.request, dict):
        return None, f"refused with status {item.status}, so no model read it"
    said = item.request.get(key)
    if key == "messages" and isinstance(said, list) and said:
        raw = json.dumps(said, ensure_ascii=False)
    elif key == "prompt" and isinstance(said, str):
        raw = said
    else:
        return None, "its prompt is a list or token ids, which a promptfoo prompt cannot be"
    config = {k: v for k, v in item.request.items() if k in PROMPT_KEYS and v is not None}
    for other, name in OTHER_NAMES.items():
        if item.request.get(other) is not None and name not in config:
            config[name] = item.request[other]
    return {"label": item.id, "raw": raw, **({"config": config} if config else {})}, ""
