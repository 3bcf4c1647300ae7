"""Kept API requests as a promptfoo suite (#33): what an app sent, turned into tests that run again here (``launch.py
batch suite.yaml``, the Batch tab) or in promptfoo itself.

Each request is one prompt, as its app sent it: a chat request's ``messages`` (promptfoo's chat JSON), a completion
request's ``prompt``, labelled with the request's id, with the sampling parameters it set as the prompt's
``config`` (promptfoo merges a prompt's config over its provider's). The model that answered is the provider
(``workbench:MODEL``); with several models each provider runs only its own requests (its ``prompts`` filter). A
seed goes on the provider when all of its requests sent the same one. What a promptfoo prompt cannot carry (tools,
response_format, a different seed per request) is named in the notes, never dropped unsaid; a request that never
reached a model (refused) or is not a chat or completion is left out, also said.
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
                            "n", "seed"))
"""Body fields that are not a prompt's sampling parameters (``n``: promptfoo runs each prompt once; ``seed``: the
provider's)."""


@dataclass
class Suite:
    """A promptfoo config made of requests, and what could not go in it."""

    text: str
    prompts: int
    notes: list[str] = field(default_factory=list)


def promptfoo_suite(items: Sequence[CapturedRequest], description: str = "") -> Suite:
    """The promptfoo YAML for ``items`` (kept requests, in order); ValueError when none can be a prompt."""
    prompts: list[dict[str, Any]] = []
    by_model: dict[str, list[tuple[str, Any]]] = {}
    notes: list[str] = []
    for item in items:
        prompt, why = _prompt(item)
        if prompt is None:
            notes.append(f"{item.id}: left out ({why})")
            continue
        prompts.append(prompt)
        model = item.model or str(item.request.get("model") or "")
        by_model.setdefault(model, []).append((item.id, item.request.get("seed")))
        left = sorted(set(item.request) - NOT_PARAMETERS - set(prompt.get("config", {})))
        if left:
            notes.append(f"{item.id}: {', '.join(left)} not carried (a promptfoo prompt's config takes sampling "
                         "parameters)")
    if not prompts:
        raise ValueError("none of these requests can be a prompt: " + "; ".join(notes) if notes else
                         "no requests to export")
    providers = [_provider(model, kept, len(by_model) > 1, notes) for model, kept in by_model.items()]
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
    names = set(api_names().values())
    config = {k: v for k, v in item.request.items() if k in names and k not in NOT_PARAMETERS}
    return {"label": item.id, "raw": raw, **({"config": config} if config else {})}, ""


def _provider(model: str, kept: list[tuple[str, Any]], filtered: bool, notes: list[str]) -> dict[str, Any]:
    """The provider of ``model``'s requests (their ids and seeds): its seed when they share one."""
    seeds = {seed for _, seed in kept}
    config = {"seed": seeds.pop()} if len(seeds) == 1 and None not in seeds else {}
    if len({seed for _, seed in kept}) > 1:
        notes.append(f"{model}: its requests sent different seeds; a promptfoo provider has one, so they run with "
                     "the provider's (greedy requests repeat regardless)")
    return {"id": f"workbench:{model}", "label": model, **({"config": config} if config else {}),
            **({"prompts": [request_id for request_id, _ in kept]} if filtered else {})}
