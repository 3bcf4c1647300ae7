"""promptfoo providers read into batch settings: which model, chat template or raw, and ``config`` as parameters.

``workbench:NAME`` runs on the loaded model NAME (any loaded model: local, another
loader's ``NAME@loader``, or a remote server connected in the Model tab); any other
id runs on the model in use. ``openai:completion:NAME`` sends the prompt raw (no chat
template, as a completions endpoint reads it); ``openai:chat:NAME``, ``workbench:NAME``
and the others go through the chat template. A provider's ``config`` is read as the
OpenAI API names parameters (temperature, max_tokens, top_p, seed, stop, penalties...),
plus ``response_format`` (json_object / json_schema: structured output), ``prompt.prefix``/``suffix`` and
``tools`` (webui.batch.run.provider_prompt: ``tool_choice`` "required" or a named function
constrains the reply to calls, as the API does), and the keys
promptfoo's Hugging Face provider takes (max_new_tokens, top_k, repetition_penalty,
do_sample...). Keys that cannot change an output (apiKey, apiBaseUrl, organization,
headers...) are named once in the run's notes; any other key is refused by name, never
dropped unseen.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from webui.batch.asserts.errors import BatchInputError
from webui.batch.asserts.suite_files import SuiteFiles
from webui.batch.run.grid import Setting
from webui.batch.run.provider_prompt import KEYS, provider_prompt
from webui.engine.params import InvalidParameter, SamplingParams, api_names

NO_EFFECT = {
    "apiKey": "the workbench needs no API key", "apiKeyEnvar": "the workbench needs no API key",
    "apiKeyRequired": "the workbench needs no API key", "apiBaseUrl": "the provider runs on the workbench's model",
    "apiHost": "the provider runs on the workbench's model", "organization": "the workbench has no organizations",
    "headers": "no HTTP request is made", "timeout": "a cell runs until it is done or cancelled",
    "maxRetries": "no HTTP request is made", "cost": "cost is 0 here", "user": "it names the caller only",
    "cache_control": "prompt caching does not change outputs (the workbench's prefix cache is always on)",
    "use_cache": "the response cache is the Batch tab's 'use cached responses'",
    "wait_for_model": "the model is loaded before the run", "logprobs": "perplexity asserts ask for logprobs",
    "top_logprobs": "perplexity asserts ask for logprobs",
}
"""Provider config keys that cannot change an output: named in the notes with why, not applied."""
HF_NAMES = {"max_new_tokens": "max_tokens", "max_completion_tokens": "max_tokens"}
"""promptfoo's other names for our API parameters (Hugging Face's, OpenAI's newer)."""
REFUSED = {
    "num_return_sequences": "write evaluateOptions.repeat (or the Batch tab's samples) for several outputs",
    "n": "write evaluateOptions.repeat (or the Batch tab's samples) for several outputs",
    "max_time": "a time limit would cut outputs; limit max_tokens instead",
    "max_length": "it counts the prompt too; write max_new_tokens (or max_tokens) instead",
    "num_beams": "beam search is not a sampler here",
    "passthrough": "extra request fields are not sent anywhere; write the parameters themselves",
}
"""Provider config keys that would change outputs and are not applied: refused with what to do instead."""


def provider_setting(item: Any, i: int, notes: list[str], files: SuiteFiles = SuiteFiles(Path("."))
                     ) -> tuple[Setting, list[str] | None]:
    """One provider: its setting and its prompts filter (None: every prompt); keys that change nothing are
    added to ``notes``; ``file://`` tools are relative to the suite's folder."""
    if not isinstance(item, dict) or not isinstance(item.get("id", ""), str):
        raise BatchInputError(f"providers[{i}] must be an id or a mapping with id and config")
    label = str(item.get("label") or item.get("id") or f"provider {i + 1}")
    where = f"providers[{i}] ({label})"
    ignored = set(item) - {"id", "label", "config", "prompts"}
    if ignored:  # e.g. a provider's transform: named, never dropped unseen
        raise BatchInputError(f"{where}: {', '.join(sorted(ignored))} not supported here (a provider takes id, "
                              "label, config and prompts)")
    chosen = item.get("prompts")
    if chosen is not None and (not isinstance(chosen, list) or not chosen
                               or not all(isinstance(n, str) for n in chosen)):
        raise BatchInputError(f"{where}.prompts must be a list of prompt labels")
    config = item.get("config") or {}
    if not isinstance(config, dict):
        raise BatchInputError(f"{where}.config must be a mapping")
    fields = provider_params(config, f"{where}.config", notes, taken=KEYS)
    pid = str(item.get("id", ""))
    raw = pid.startswith("openai:completion")
    shape = provider_prompt(config, f"{where}.config", files, raw)
    try:
        params = SamplingParams.from_api(fields, SamplingParams(temperature=0.0, max_new_tokens=256))
        calls_only = shape.tools.grammar() if shape is not None and shape.tools is not None else None
        if calls_only is not None:
            if params.structured_outputs:
                raise BatchInputError(f"{where}.config: tool_choice required (or a named function) constrains the "
                                      "reply to tool calls; it cannot be combined with response_format")
            params = params.replace(structured_outputs=calls_only)
    except (InvalidParameter, ValueError) as exc:
        raise BatchInputError(f"{where}.config: {exc}") from None
    provider, _, model = pid.partition(":")
    if provider == "workbench" and not model.strip():
        raise BatchInputError(f"providers[{i}]: workbench: needs a model name (workbench:SmolLM2-135M-Instruct)")
    return Setting(label, params, None, dict(fields), model=model.strip() if provider == "workbench" else None,
                   provider=pid or label, raw=raw, prompt=shape), chosen


def provider_params(config: dict[str, Any], where: str, notes: list[str], taken: tuple[str, ...] = ()
                    ) -> dict[str, Any]:
    """A provider's config as API-named parameters; keys that change nothing noted, ``taken`` keys left to their
    reader, others refused by name."""
    names = set(api_names().values())
    fields: dict[str, Any] = {}
    refused: list[str] = []
    for key, value in config.items():
        key = str(key)
        if key in taken:
            continue
        if key in NO_EFFECT:
            notes.append(f"{where}.{key} is not applied ({NO_EFFECT[key]})")
        elif key in REFUSED:
            refused.append(f"{key} ({REFUSED[key]})")
        elif key in KEYS:
            refused.append(f"{key} (a prompt's config takes sampling parameters; set {key} on the provider)")
        elif key == "return_full_text":
            if value:
                refused.append("return_full_text: true (outputs here are the completion only; set it false)")
            else:
                notes.append(f"{where}.return_full_text is false, as outputs here always are")
        elif key == "do_sample":
            if value is False:
                fields.setdefault("temperature", 0.0)  # greedy, as Hugging Face decodes without sampling
            elif "temperature" not in config:
                fields["temperature"] = 1.0  # Hugging Face samples at temperature 1 unless told
        elif key == "response_format":
            if value is not None:  # type text: none, over a provider's (a prompt's config merges over it)
                fields["structured_outputs"] = _structured(value, f"{where}.response_format") or {}
        elif key in HF_NAMES:
            fields[HF_NAMES[key]] = value
        elif key in names:
            fields[key] = value
        else:
            refused.append(f"{key} (no parameter here has that name; the parameters are the OpenAI API's: "
                           "temperature, max_tokens, top_p, top_k, seed, stop, presence_penalty...)")
    if refused:
        raise BatchInputError(f"{where}: unknown setting(s) " + "; ".join(refused))
    if "max_new_tokens" in config and "max_tokens" in config:
        raise BatchInputError(f"{where}: give max_new_tokens or max_tokens, not both")
    return fields


def _structured(value: Any, where: str) -> dict[str, Any] | None:
    """OpenAI's response_format as our structured output (the API's own reading of it); None for plain text."""
    from webui.api.protocol import response_format_constraint

    if not isinstance(value, dict):
        raise BatchInputError(f"{where} must be a mapping such as {{type: json_object}}")
    try:
        return response_format_constraint(value)
    except InvalidParameter as exc:
        raise BatchInputError(f"{where}: {exc}") from None
