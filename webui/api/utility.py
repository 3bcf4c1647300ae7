"""Token utilities and the engine's numbers, over the API.

* vLLM's ``POST /tokenize`` (a ``prompt``, or ``messages`` through the chat template) and ``POST /detokenize``;
* text-generation-webui's ``POST /v1/internal/logits``: the next-token distribution for a prompt, raw and after
  the sampling parameters (what the Insight tab shows);
* ``GET /v1/internal/stats``: each loaded model's engine (running, waiting, tokens/s, prefix cache);
* ``GET /metrics``: the same and the API's request counts, in Prometheus' text format.
"""

from __future__ import annotations

import asyncio
from collections import Counter

from fastapi import APIRouter, Request
from fastapi.responses import PlainTextResponse
from pydantic import Field

from loaders.base import LoadedModel, is_stepped
from webui.api.body import JSONBodyRoute
from webui.api.documents import documents_as_text, read_files
from webui.api.errors import APIError
from webui.api.protocol import ChatMessage, SamplingRequest, TextRequest, chat_rows
from webui.api.routes import render_messages, request_template, serving
from webui.chat import ChatPromptError, chat_messages
from webui.chat.templates import ChatTemplate, TemplateError
from webui.insight import next_tokens

router = APIRouter(route_class=JSONBodyRoute)  # bodies read whole or refused (webui/api/body.py)


def _local(request: Request, name: str | None, what: str, logits: bool = False
           ) -> tuple[LoadedModel, tuple[tuple[str, float], ...]]:
    """The loaded model a request names, if it can do what is asked: tokenize (or, with ``logits``, give
    next-token logits); a remote server does neither."""
    model, loras = serving(request).resolve_model(name)
    caps = model.capabilities
    if not (caps.stepped if logits else caps.tokenizes):
        raise APIError(400, f"{what} needs a local model; '{model.name}' is a remote server", param="model")
    return model, loras


def _chat_text(request: Request, model: LoadedModel, messages: list[ChatMessage], template: str | None,
               add_generation_prompt: bool = True, continue_final_message: bool = False) -> str:
    """The chat as the model reads it (file parts read as text), through the request's or the model's template."""
    if not messages:
        raise APIError(400, "messages must not be empty", param="messages")
    rows = chat_rows(documents_as_text(messages, read_files(messages, serving(request).config)))
    chosen = request_template(serving(request).services.templates, template, model)
    try:
        if add_generation_prompt or continue_final_message:
            return render_messages(model.tokenizer, rows, None, chosen, continue_final_message)
        return (chosen or ChatTemplate("")).render(model.tokenizer, chat_messages(rows), add_generation_prompt=False)
    except (ChatPromptError, TemplateError) as exc:
        raise APIError(400, str(exc), param="messages") from exc


class TokenizeRequest(TextRequest):
    model: str | None = None
    prompt: str | None = None
    messages: list[ChatMessage] | None = None
    add_special_tokens: bool | None = None  # vLLM's defaults: true for a prompt, false for messages
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    chat_template: str | None = None
    return_token_strs: bool = False


@router.post("/tokenize")
def tokenize(body: TokenizeRequest, request: Request) -> dict:
    if (body.prompt is None) == (body.messages is None):
        raise APIError(400, "send either 'prompt' (text) or 'messages' (a chat, read through its template)",
                       param="prompt")
    model, _ = _local(request, body.model, "tokenize")
    if body.messages is not None:
        text = _chat_text(request, model, body.messages, body.chat_template, body.add_generation_prompt,
                          body.continue_final_message)
        special = bool(body.add_special_tokens)
    else:
        text, special = body.prompt or "", body.add_special_tokens is not False  # prompt: given (checked above)
    ids = model.tokenizer.encode(text, add_special_tokens=special)
    return {"count": len(ids), "max_model_len": model.context_length, "tokens": ids,
            "token_strs": model.tokenizer.token_strings(ids) if body.return_token_strs else None}


class DetokenizeRequest(TextRequest):
    model: str | None = None
    tokens: list[int]


@router.post("/detokenize")
def detokenize(body: DetokenizeRequest, request: Request) -> dict:
    model, _ = _local(request, body.model, "detokenize")
    if is_stepped(model):  # its ids are the logits' rows (every model that tokenizes today is stepped)
        vocab = model.vocab_size
        bad = [i for i, t in enumerate(body.tokens) if not 0 <= t < vocab]
        if bad:
            raise APIError(400, f"tokens[{bad[0]}]: {body.tokens[bad[0]]} is not a token id of {model.name} "
                                f"(0 to {vocab - 1})", param="tokens")
    return {"prompt": model.tokenizer.decode(body.tokens, skip_special_tokens=False)}


class LogitsRequest(SamplingRequest):
    prompt: str | None = None
    messages: list[ChatMessage] | None = None
    chat_template: str | None = None
    top_logits: int = Field(20, ge=1, le=200)
    use_samplers: bool = True  # text-generation-webui's: "logits" holds the probabilities after the samplers


@router.post("/v1/internal/logits")
async def logits(body: LogitsRequest, request: Request) -> dict:
    if (body.prompt is None) == (body.messages is None):
        raise APIError(400, "send either 'prompt' (text) or 'messages' (a chat, read through its template)",
                       param="prompt")
    model, loras = _local(request, body.model, "the next-token distribution", logits=True)
    if loras:
        raise APIError(400, "the next-token distribution is the base model's; name the model without an adapter",
                       param="model")
    params = serving(request).sampling_params(body)
    if body.messages is not None:
        text = await asyncio.to_thread(_chat_text, request, model, body.messages, body.chat_template)
        special = False
    else:
        text, special = body.prompt or "", True  # prompt: given (checked above)
    engine = serving(request).engine_for(model)
    tokens = await asyncio.to_thread(next_tokens, engine, text, False, params, body.top_logits, "", special)
    return {"model": model.name,
            "logits": {t.token: t.after if body.use_samplers else t.probability for t in tokens},
            "tokens": [{"id": t.token_id, "token": t.token, "probability": t.probability,
                        "after_samplers": t.after, "kept": t.kept, "masked": t.masked} for t in tokens]}


def engine_stats(request: Request) -> list[dict]:
    """Each loaded model's engine: sequences running and waiting, tokens/s over the last seconds, prefix cache."""
    out = []
    for slot in serving(request).services.models.slots():
        stats = slot.engine.stats()
        prefix = stats.prefix_cache
        out.append({"model": slot.name, "running": stats.running, "waiting": stats.waiting,
                    "tokens_per_second": round(stats.tokens_per_second, 2),
                    "memory_bytes": slot.model.memory_bytes(),
                    "prefix_cache": None if prefix is None else {
                        "blocks": prefix.blocks, "bytes": prefix.bytes, "budget_bytes": prefix.budget_bytes,
                        "hit_tokens": prefix.hit_tokens, "prompt_tokens": prefix.prompt_tokens,
                        "hit_rate": round(prefix.hit_rate, 4)}})
    return out


@router.get("/v1/internal/stats")
def stats(request: Request) -> dict:
    models = engine_stats(request)
    return {"models": models, "running": sum(m["running"] for m in models),
            "waiting": sum(m["waiting"] for m in models),
            "tokens_per_second": round(sum(m["tokens_per_second"] for m in models), 2)}


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


METRICS = (  # name, type, help, what to read from a model's stats
    ("workbench_requests_running", "gauge", "Sequences being generated.", lambda m: m["running"]),
    ("workbench_requests_waiting", "gauge", "Requests queued for a free slot.", lambda m: m["waiting"]),
    ("workbench_tokens_per_second", "gauge", "Tokens generated per second, over the last seconds.",
     lambda m: m["tokens_per_second"]),
    ("workbench_model_memory_bytes", "gauge", "Memory the model's weights take.", lambda m: m["memory_bytes"]),
    ("workbench_prefix_cache_bytes", "gauge", "Memory the prefix cache holds.",
     lambda m: m["prefix_cache"] and m["prefix_cache"]["bytes"]),
    ("workbench_prefix_cache_hit_rate", "gauge", "Share of prompt tokens served from the prefix cache.",
     lambda m: m["prefix_cache"] and m["prefix_cache"]["hit_rate"]),
)


@router.get("/metrics", response_class=PlainTextResponse)
def metrics(request: Request) -> PlainTextResponse:
    models = engine_stats(request)
    lines = []
    for name, kind, help_text, read in METRICS:
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
        for m in models:
            value = read(m)
            if value is not None:
                lines.append(f'{name}{{model="{_label(m["model"])}"}} {value}')
    counts: Counter = request.app.state.request_counts
    lines += ["# HELP workbench_api_requests_total API requests answered, by status code.",
              "# TYPE workbench_api_requests_total counter"]
    lines += [f'workbench_api_requests_total{{status="{status}"}} {n}' for status, n in sorted(counts.items())]
    return PlainTextResponse("\n".join(lines) + "\n", media_type="text/plain; version=0.0.4")
