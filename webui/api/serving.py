"""What the chat and completions routes share: the model named, submitting n choices, streaming them."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from fastapi import Request

from loaders.base import attached_loras, LoadedModel, PromptImage
from webui.api.errors import APIError
from webui.api.protocol import SamplingRequest
from webui.documents import MAX_DOCUMENT_BYTES
from webui.engine import (INTERACTIVE, Engine, GenerationEvent, GenerationRequest, Interleaved, InvalidParameter,
                          PromptTooLong, RequestStream, SamplingParams)
from webui.engine.params import MAX_SEED, specs
from webui.models import Slot
from webui.services import Services

# The OpenAI API has no "timeout" or "cancelled" finish: a request cut by our time limit reads as "length".
DONE = "data: [DONE]\n\n"  # a stream's last event
FINISH_REASONS = {"stop": "stop", "length": "length", "timeout": "length", "cancelled": "stop"}


@dataclass(frozen=True)
class APIConfig:
    api_keys: tuple[str, ...] = field(default=(), repr=False)
    admin_keys: tuple[str, ...] = field(default=(), repr=False)  # also open the management endpoints
    served_model_names: tuple[str, ...] = ()  # aliases clients may use for the loaded model
    timeout: float | None = 600.0  # seconds a request may generate
    queue_timeout: float | None = 120.0  # seconds a request may wait for its first step
    log_prompts: bool = False
    max_body_bytes: int | None = 8 * 2**20  # larger request bodies get a 413 before they are read (None: no limit)
    max_image_bytes: int | None = 5 * 2**20  # the largest image a message may carry (None: no limit)
    local_images_dir: Path | None = None  # image_url parts may name files under this folder (resolved)
    allow_image_urls: bool = False  # image_url parts may be http(s) URLs the server fetches
    allow_private_image_urls: bool = False  # ... from loopback and private addresses too
    image_fetch_timeout: float = 20.0  # seconds a remote image may take to download, redirects included
    max_document_bytes: int | None = MAX_DOCUMENT_BYTES  # the largest file a file part may carry (None: no limit)
    max_file_bytes: int | None = 200 * 2**20  # the largest upload to /v1/files (it has this limit, not the above)


def finished(reason: str | None) -> str:
    """The OpenAI finish_reason for a finished choice's engine finish reason."""
    if reason is None:
        raise ValueError("the choice has not finished")
    return FINISH_REASONS[reason]


@dataclass
class Choice:
    """One choice as it is collected: text, tokens, logprobs, finish."""

    index: int
    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    logprobs: list = field(default_factory=list)
    finish_reason: str | None = None
    stop_string: str | None = None  # the stop string that ended it, if one did
    prompt_tokens: int = 0
    cached_tokens: int = 0
    first_token: float | None = None

    def add(self, event: GenerationEvent) -> None:
        self.text += event.text
        self.token_ids.extend(event.token_ids)
        self.logprobs.extend(event.logprobs)
        if event.finish_reason is not None:
            self.finish_reason, self.stop_string = event.finish_reason, event.stop_string
            assert event.usage is not None and event.timings is not None, "a finished event says its usage"
            self.prompt_tokens = event.usage.prompt_tokens
            self.cached_tokens = event.usage.cached_tokens
            self.first_token = event.timings.first_token


@dataclass(frozen=True)
class Submission:
    """What a request puts on the engine (``Serving.submit``): its prompts, each ``n`` times, with these sampling
    parameters, on this model and adapters. ``logprobs``: the top alternatives each token reports (None: no
    logprobs); ``prompt_param``: the request field a refused prompt is blamed on; ``messages`` and ``images``: a
    chat's turns and the images its prompt's placeholders stand for."""

    prompts: Sequence[str | list[int]]
    params: SamplingParams
    model: LoadedModel
    n: int = 1
    logprobs: int | None = None
    add_special_tokens: bool = True
    prompt_param: str = "prompt"
    loras: tuple[tuple[str, float], ...] = ()
    messages: list[dict] | None = None
    images: tuple[PromptImage, ...] = ()
    priority: int = INTERACTIVE


def _truncate_all() -> int:
    maximum = specs()["truncation_length"].maximum
    if maximum is None:
        raise TypeError("truncation_length's spec needs a maximum")
    return int(maximum)


TRUNCATE_ALL = _truncate_all()  # capped at the model's context when used


class Serving:
    def __init__(self, services: Services, config: APIConfig):
        self.services, self.config = services, config

    def model_names(self) -> list[str]:
        """Every loaded model's id, and the --served-model-name aliases of the current one."""
        names = self.services.models.names()
        return list(dict.fromkeys([*names, *self.config.served_model_names])) if names else []

    def adapter_ids(self) -> list[str]:
        """``model:adapter`` for every LoRA adapter attached to a loaded model: the model id that selects it."""
        return [f"{slot.name}:{name}" for slot in self.services.models.slots() for name in attached_loras(slot.model)]

    def _slot(self, name: str | None) -> Slot | None:
        """The loaded model an id names (an alias or no name: the current one), or None."""
        models = self.services.models
        if name in (None, "") or (name in self.config.served_model_names and name not in models.names()):
            return self.services.in_use()
        return next((s for s in models.slots() if s.name == name), None)

    def resolve_model(self, name: str | None, loras: Sequence[tuple[str, float]] | None = None
                      ) -> tuple[LoadedModel, tuple[tuple[str, float], ...]]:
        """The model a request names and the LoRA adapters it selects: ``loras`` with their weights, or the
        ``model:adapter`` in the name at its attached weight, or none."""
        if self.services.in_use() is None:
            raise APIError(503, "no model is loaded; load one in the Model tab or start with --model NAME",
                           type="service_unavailable", code="no_model_loaded")
        slot = self._slot(name)
        if loras is not None:
            if slot is None:
                raise APIError(400, f"give adapters either in the model id ('{name}') or in 'loras', not both; "
                                    f"with 'loras', name the base model: one of {', '.join(self.model_names())}",
                               param="loras")
            return slot.model, self._attached(slot.model, loras)
        if slot is not None:
            return slot.model, ()
        base, _, adapter = (name or "").rpartition(":")
        slot = self._slot(base) if base else None
        if slot is not None and adapter:
            if adapter not in attached_loras(slot.model):
                raise APIError(404, f"the LoRA adapter '{adapter}' is not attached to {slot.name}; attached: "
                                    f"{', '.join(attached_loras(slot.model)) or 'none'}", type="not_found_error",
                               param="model", code="model_not_found")
            return slot.model, ((adapter, slot.loras.get(adapter, 1.0)),)
        known = {e.name for e in self.services.models.catalog.available()}
        hint = (f"model '{name}' is in the models dir but not loaded; loaded: {', '.join(self.model_names())} "
                f"(load it in the Model tab)" if name in known else
                f"the model '{name}' does not exist; available: {', '.join(self.model_names())}")
        raise APIError(404, hint, type="not_found_error", param="model", code="model_not_found")

    def engine_for(self, model: LoadedModel) -> Engine:
        """The engine that runs ``model``; a 503 if it was unloaded since the request named it."""
        for slot in self.services.models.slots():
            if slot.model is model:
                return slot.engine
        raise APIError(503, f"the model '{model.name}' was unloaded while this request was being read; send it "
                            "again", type="service_unavailable", code="no_model_loaded")

    @staticmethod
    def _attached(model: LoadedModel, loras: Sequence[tuple[str, float]]) -> tuple[tuple[str, float], ...]:
        attached = attached_loras(model)
        for i, (adapter, weight) in enumerate(loras):
            if adapter not in attached:
                raise APIError(404, f"loras[{i}]: the LoRA adapter '{adapter}' is not attached to {model.name}; "
                                    f"attached: {', '.join(attached) or 'none'}", type="not_found_error",
                               param="loras")
            if not -10 <= weight <= 10:
                raise APIError(400, f"loras[{i}]: a LoRA weight must be in [-10, 10], got {weight:g}", param="loras")
        return tuple((str(a), float(w)) for a, w in loras)

    def sampling_params(self, req: SamplingRequest) -> SamplingParams:
        base = self.services.presets.get(req.preset).params if req.preset else SamplingParams()
        params = req.to_sampling_params(base)
        keep = req.truncate_prompt_tokens
        if keep is None:
            return params
        if isinstance(keep, bool) or not (keep == -1 or keep >= 1):
            raise APIError(400, f"truncate_prompt_tokens must be -1 (as many as the context leaves) or a number of "
                                f"tokens >= 1, got {keep}", param="truncate_prompt_tokens")
        # truncation_length is prompt + output: the prompt keeps its last `keep` tokens, fewer if the reply would
        # not fit the context (-1: all the context leaves)
        total = TRUNCATE_ALL if keep == -1 else min(keep + params.max_new_tokens, TRUNCATE_ALL)
        return params.replace(truncation_length=total)

    def param_sources(self, req: SamplingRequest, params: SamplingParams) -> dict[str, str]:
        """Where each parameter not at its neutral value came from: "request", "preset NAME" (the request's
        preset) or "server default" (the endpoint's max_tokens when none is given)."""
        given, renamed = req.model_fields_set, req.renamed()
        preset = self.services.presets.get(req.preset).params.changed() if req.preset else {}
        structured = bool(req.constraints_given())
        out = {}
        for name, value in params.changed().items():
            api = renamed.get(name, specs()[name].api_name or name)
            if api in given or name in given or (name == "structured_outputs" and structured) or (
                    name == "truncation_length" and req.truncate_prompt_tokens is not None):
                out[name] = "request"
            elif name in preset:
                out[name] = f"preset {req.preset}"
            else:
                out[name] = "server default"
        if "max_new_tokens" not in out:  # always said: it bounds every reply
            api = renamed.get("max_new_tokens", "max_tokens")
            out["max_new_tokens"] = "request" if api in given else (
                f"preset {req.preset}" if "max_new_tokens" in preset else "server default")
        return out

    def submit(self, job: Submission) -> list[RequestStream]:
        """n choices per prompt (choice i of a seeded request uses seed + i, so all differ and all repeat), at the
        job's priority (a batch's rows: BACKGROUND, webui/api/auth.py ``request_priority``).

        A prompt the engine refuses (empty, longer than the context) is a 400 naming ``job.prompt_param``.
        """
        prompts, params, n, prompt_param = job.prompts, job.params, job.n, job.prompt_param
        streams: list[RequestStream] = []
        engine = self.engine_for(job.model)
        most = engine.config.max_running + engine.config.max_waiting
        if len(prompts) * n > most:  # could never be taken whole: a client error, not a busy server
            raise APIError(400, f"this request asks for {len(prompts)} prompt(s) × n={n} = {len(prompts) * n} "
                                f"sequences; the engine takes at most {most} at once (--max-running + "
                                f"--max-waiting): send fewer prompts or a smaller n",
                           param="n" if n > 1 else prompt_param)
        try:
            for prompt in prompts:
                for i in range(n):
                    p = params if params.seed is None or i == 0 else params.replace(seed=(params.seed + i) % MAX_SEED)
                    streams.append(engine.submit(GenerationRequest(
                        prompt, p, add_special_tokens=job.add_special_tokens, logprobs=job.logprobs, loras=job.loras,
                        messages=job.messages, images=job.images, priority=job.priority,
                        queue_timeout=self.config.queue_timeout, timeout=self.config.timeout)))
        except BaseException as exc:
            for s in streams:
                s.cancel()
            if isinstance(exc, PromptTooLong):
                raise APIError(400, str(exc), param=prompt_param, code="context_length_exceeded") from exc
            if isinstance(exc, ValueError) and not isinstance(exc, InvalidParameter):
                raise APIError(400, str(exc), param=prompt_param) from exc
            raise
        return streams


async def collect(streams: list[RequestStream], request: Request) -> list[Choice]:
    """All choices, whole; a client that goes away cancels them."""
    choices = [Choice(i) for i in range(len(streams))]

    async def watch() -> None:
        while True:
            await asyncio.sleep(0.25)
            if await request.is_disconnected():
                for s in streams:
                    s.cancel()
                return

    watcher = asyncio.create_task(watch())
    try:
        async for index, item in Interleaved(streams):
            if isinstance(item, BaseException):
                raise APIError(500, f"generation failed: {item}", type="server_error")
            choices[index].add(item)
    finally:
        watcher.cancel()
    if all(c.finish_reason == "timeout" and not c.token_ids for c in choices):
        raise APIError(503, "the request timed out waiting for a free slot in the engine; try again later",
                       type="service_unavailable", code="queue_timeout")
    note_usage(request, choices)
    return choices


def note_usage(request: Request, choices: list[Choice]) -> None:
    """What the access log line reports for this request."""
    request.state.prompt_tokens = sum(c.prompt_tokens for c in choices[:1])
    request.state.completion_tokens = sum(len(c.token_ids) for c in choices)
    firsts = [c.first_token for c in choices if c.first_token is not None]
    request.state.ttft = min(firsts) if firsts else None
    # no finish seen: the client went away mid-stream, which cancelled the request
    request.state.finish = ",".join(sorted({c.finish_reason or "cancelled" for c in choices}))
    request.state.token_ids = [c.token_ids for c in choices]


def usage(choices: list[Choice], prompts: int = 1) -> dict:
    """OpenAI's usage object; each prompt counts once, its cached tokens as the most any of its choices reused
    (with n > 1 the first choice reads the prompt and the others reuse it)."""
    per_prompt = len(choices) // max(prompts, 1)
    groups = [choices[i:i + per_prompt] for i in range(0, len(choices), per_prompt)] if per_prompt else []
    prompt_tokens = sum(group[0].prompt_tokens for group in groups)
    cached = sum(max(c.cached_tokens for c in group) for group in groups)
    completion = sum(len(c.token_ids) for c in choices)
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion, "total_tokens": prompt_tokens + completion,
            "prompt_tokens_details": {"cached_tokens": cached}}


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


def now() -> int:
    return int(time.time())


def sse(data: dict | str) -> str:
    return f"data: {data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)}\n\n"


def error_chunk(message: str) -> str:
    return sse({"error": {"message": message, "type": "server_error", "param": None, "code": None}})
