"""The OpenAI routes: thin adapters from request bodies to the engine and back."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from loaders.base import LoadedModel, ModelLoadError, PromptImage, Tokenizer, is_stepped
from webui.api.auth import request_priority
from webui.api.body import JSONBodyRoute
from webui.api.documents import PartIndex, documents_as_text, request_documents, with_document_tokens
from webui.api.errors import APIError, speaks_anthropic
from webui.api.images import request_images
from webui.api.messages_models import anthropic_model, anthropic_page
from webui.api.modes import instruction_template, needs_template, request_mode
from webui.api.protocol import ChatCompletionRequest, CompletionRequest, chat_rows
from webui.api.chunks import (ChatChunker, Chunker, CompletionChunker, StreamHead, chat_logprobs,
                              completion_logprobs, envelope)
from webui.api.serving import (DONE, FINISH_REASONS, Choice, Serving, Submission, collect, error_chunk, finished,
                               new_id, note_usage, now, sse, usage)
from webui.chat.tools import ToolPlan, plan_tools, render_with_tools, reply_calls
from webui.chat import ChatPromptError, render_chat_prompt
from webui.chat.modes import ChatMode
from webui.chat.templates import ChatTemplate, TemplateError, TemplateStore, check_source, guess
from webui.documents import Document
from webui.engine import GenerationRequest, Interleaved, InvalidParameter, RequestStream
from webui.engine.params import SamplingParams
from webui.engine.sequence import encode_prompt
from webui.engine.types import TokenLogprob
from webui.images import image_placeholder
from webui.insight import prompt_logprobs

router = APIRouter(route_class=JSONBodyRoute)  # bodies read whole or refused (webui/api/body.py)


def serving(request: Request) -> Serving:
    return request.app.state.serving


def note_seen(request: Request, prompt: Any, params: SamplingParams, model: LoadedModel, loras: tuple,
              sources: dict[str, str]) -> None:
    """What the model saw, for a request that is kept (webui/api/capture.py): the prompt as rendered by the chat
    template, the parameters as resolved and where each not at its neutral value came from, the model, loader and
    adapters."""
    request.state.seen = {"prompt": prompt, "params": params.to_dict(), "sources": sources, "model": model.name,
                          "loader": model.loader, "loras": [list(x) for x in loras]}


def keep_answer(request: Request, body: dict) -> dict:
    """The answer as a whole, for a request that is kept (a stream's put together from its choices)."""
    request.state.answer = body
    return body


def _log_prompt(request: Request, prompt: Any) -> None:
    if serving(request).config.log_prompts:
        request.state.prompt = prompt


def model_entries(request: Request) -> list[dict]:
    """Every model id a request may name: loaded models and their aliases, attached adapters, and the models dir's
    others (not loaded), in OpenAI's shape."""
    s = serving(request)
    created = now()
    data = [{"id": name, "object": "model", "created": created, "owned_by": "llm-workbench"}
            for name in s.model_names() + s.adapter_ids()]
    loaded = set(s.model_names())
    data += [{"id": e.name, "object": "model", "created": created, "owned_by": "llm-workbench (not loaded)"}
             for e in s.services.models.catalog.available() if e.name not in loaded and e.name.removesuffix(".gguf")
             not in loaded]
    return data


@router.get("/v1/models")
def list_models(request: Request) -> dict:
    """OpenAI's list, or Anthropic's (paged) for a request with ``anthropic-version`` (webui/api/messages_models.py)."""
    if speaks_anthropic(request.scope):
        return anthropic_page(model_entries(request), request.query_params,
                              request.query_params.getlist("lifecycle[]") + request.query_params.getlist("lifecycle"))
    return {"object": "list", "data": model_entries(request)}


@router.get("/v1/models/{model_id:path}")
def retrieve_model(model_id: str, request: Request) -> dict:
    for model in model_entries(request):
        if model["id"] == model_id:
            return anthropic_model(model) if speaks_anthropic(request.scope) else model
    raise APIError(404, f"the model '{model_id}' does not exist", type="not_found_error", param="model",
                   code="model_not_found")


@dataclass
class PreparedChat:
    """A chat request read and rendered, before anything is submitted: what start_chat submits, and what a token
    count (the Messages API's count_tokens) counts."""

    model: LoadedModel
    loras: tuple[tuple[str, float], ...]
    params: SamplingParams
    plan: ToolPlan | None
    prompt: str
    messages: list[dict]
    images: tuple[PromptImage, ...]
    documents: dict[PartIndex, Document]


@dataclass
class ChatRun:
    """A chat request on its way: the model answering, the tools offered (None: none), one stream per choice (each
    says its prompt's token count)."""

    model: LoadedModel
    plan: ToolPlan | None
    streams: list[RequestStream]


async def prepare_chat(body: ChatCompletionRequest, request: Request) -> PreparedChat:
    """Everything a chat request goes through before its tokens come, but submitting it: the model and adapters it
    names, sampling parameters, tools, images and documents, the chat template and mode, the prompt as rendered
    (kept when the request is)."""
    s = serving(request)
    model, loras = s.resolve_model(body.model, body.loras)
    params = s.sampling_params(body)
    plan = plan_tools(body.tools, body.tool_choice, body.parallel_tool_calls)
    calls_only = plan.grammar() if plan is not None else None
    if calls_only is not None:
        if params.structured_outputs:
            raise InvalidParameter("tool_choice", "tool_choice 'required' or a named function constrains the reply "
                                                  "to tool calls; it cannot be combined with response_format or "
                                                  "structured_outputs", body.tool_choice)
        params = params.replace(structured_outputs=calls_only)
    config = s.config
    images = await request_images(body.messages, model, config)
    documents = await request_documents(body.messages, config)  # file parts, read as text into their messages
    messages = chat_rows(documents_as_text(body.messages, documents), image_placeholder(model) if images else "")
    chat_mode = request_mode(body, s.services.characters, model)  # text-generation-webui's extras
    template = instruction_template(body, s.services.templates, model) or (
        request_template(s.services.templates, body.chat_template, model)
        if needs_template(chat_mode) or body.chat_template is not None else None)
    if chat_mode is not None and (stops := chat_mode.stops(template or ChatTemplate(""))):
        params = params.replace(stop=tuple(dict.fromkeys((*params.stop, *stops))))
    if body.add_generation_prompt is False and not body.continue_final_message:
        raise APIError(400, "add_generation_prompt false is only taken with continue_final_message true (the reply "
                            "continues the last assistant message)", param="add_generation_prompt")
    if body.continue_final_message and (plan is not None or messages[-1]["role"] != "assistant"):
        raise APIError(400, "continue_final_message needs the last message to be the assistant's start of the reply "
                            "(and no tools)", param="continue_final_message")
    try:
        prompt = render_messages(model.tokenizer, messages, plan, template, body.continue_final_message, chat_mode)
    except (ChatPromptError, ModelLoadError) as exc:
        raise APIError(400, str(exc), param="messages") from exc
    _log_prompt(request, messages)
    sources = s.param_sources(body, params)
    if calls_only is not None:
        sources["structured_outputs"] = "request (tool_choice)"
    note_seen(request, prompt, params, model, loras, sources)
    return PreparedChat(model, loras, params, plan, prompt, messages, images, documents)


async def start_chat(body: ChatCompletionRequest, request: Request) -> ChatRun:
    """prepare_chat, then the request's streams on the engine. The Responses and Messages APIs
    (webui/api/responses.py, webui/api/messages.py) read their bodies into a ChatCompletionRequest and start here
    too."""
    chat = await prepare_chat(body, request)
    model = chat.model
    try:
        streams = serving(request).submit(Submission(
            [chat.prompt], chat.params, model, body.n, body.logprobs_wanted(), add_special_tokens=False,
            prompt_param="messages", loras=chat.loras, messages=chat.messages, images=chat.images,
            priority=request_priority(request)))
    except APIError as exc:  # too long for the context: say what each document takes of it
        raise await asyncio.to_thread(with_document_tokens, exc, chat.documents, model) from exc
    return ChatRun(model, chat.plan, streams)


def count_prompt(chat: PreparedChat) -> int | None:
    """The prompt's tokens as the engine reads them (webui/engine/sequence.py: images' tokens counted), without
    generating: the Responses API's input_tokens, the Messages API's count_tokens. None for a remote server's model
    that does not tokenize here."""
    model = chat.model
    if is_stepped(model):
        ids, _ = encode_prompt(model, GenerationRequest(chat.prompt, chat.params, add_special_tokens=False,
                                                        messages=chat.messages, images=chat.images))
        return len(ids)
    return len(model.tokenizer.encode(chat.prompt, add_special_tokens=False)) if model.capabilities.tokenizes \
        else None


@router.post("/v1/chat/completions", response_model=None)  # a JSON body, or an SSE stream
async def chat_completions(body: ChatCompletionRequest, request: Request) -> dict | StreamingResponse:
    run = await start_chat(body, request)
    model, plan, streams = run.model, run.plan, run.streams
    rid, created = new_id("chatcmpl"), now()

    def whole(choices: list[Choice]) -> dict:
        return envelope(rid, "chat.completion", created, model.name, [
            {"index": c.index, **chat_message(c, plan), "logprobs": chat_logprobs(c.logprobs) if body.logprobs else None}
            for c in choices], usage=usage(choices))

    if body.stream:
        head = StreamHead(rid, created, model.name, body.include_usage)
        return _streaming(request, streams, ChatChunker(head, len(streams), plan, bool(body.logprobs)), whole)
    return keep_answer(request, whole(await collect(streams, request)))


def chat_message(choice: Choice, plan: ToolPlan | None) -> dict:
    """The "message" and "finish_reason" of a finished choice: tool calls read from the text when tools were
    offered."""
    message: dict[str, Any] = {"role": "assistant", "content": choice.text, "refusal": None}
    finish = finished(choice.finish_reason or "cancelled")  # (a stream the client left is kept unfinished)
    if plan is not None:
        content, calls = reply_calls(choice.text, plan, choice.finish_reason)
        if calls:
            message.update(content=content, tool_calls=[c.to_dict() for c in calls])
            finish = "tool_calls" if choice.finish_reason == "stop" else finish
    return {"message": message, "finish_reason": finish}


def request_template(templates: TemplateStore, given: str | None, model: LoadedModel) -> ChatTemplate | None:
    """The request's chat_template (vLLM's field: Jinja text; here also a built-in's or saved template's name);
    None: the model's own, which a model without one cannot use (a 400 naming chat_template)."""
    if given is None:
        if not model.capabilities.renders_chats and not model.tokenizer.chat_template:
            raise APIError(400, f"the model '{model.name}' has no chat template of its own; send chat_template: a "
                                f"Jinja template or one of {', '.join(templates.names())} (its special tokens "
                                f"suggest '{guess(model.tokenizer)}')", param="chat_template")
        return None
    if model.capabilities.renders_chats:
        raise APIError(400, f"chat_template cannot apply to '{model.name}': a remote server renders chats itself",
                       param="chat_template")
    try:
        if given in templates.names():
            return ChatTemplate(given, templates.source(given))
        check_source(given)
    except TemplateError as exc:
        raise APIError(400, f"chat_template: {exc}", param="chat_template") from exc
    return ChatTemplate("request", given)


def render_messages(tokenizer: Tokenizer, messages: list[dict], plan: ToolPlan | None,
                    template: ChatTemplate | None = None, continue_last: bool = False,
                    mode: ChatMode | None = None) -> str:
    """The chat prompt (``template`` None: the model's own; ``continue_last``: the last message is the start of
    the reply; ``mode``: a chat mode, None: instruct); with tools (offered now or in the history) through the
    template's own tool support, or the fallback written into the messages."""
    if plan is None and not any(m["role"] == "tool" or m.get("tool_calls") for m in messages):
        return render_chat_prompt(tokenizer, messages, template=template, continue_last=continue_last, mode=mode)
    return render_with_tools(tokenizer, messages, plan, template)[0]


@router.post("/v1/completions", response_model=None)  # a JSON body, or an SSE stream
async def completions(body: CompletionRequest, request: Request) -> dict | StreamingResponse:
    s = serving(request)
    model, loras = s.resolve_model(body.model, body.loras)
    scores_only = body.scores_only  # max_tokens 0: one token is generated (it checks the prompt) and dropped
    if body.echo and body.logprobs is not None and not model.capabilities.stepped:
        raise APIError(400, f"echo with logprobs scores the prompt's tokens, which needs a local model; "
                            f"'{model.name}' is a remote server", param="echo")
    params = s.sampling_params(body.model_copy(update={"max_tokens": 1}) if scores_only else body)
    prompts = body.prompts()
    _log_prompt(request, prompts)
    note_seen(request, prompts, params, model, loras, s.param_sources(body, params))
    streams = s.submit(Submission(prompts, params, model, body.n, body.logprobs, loras=loras,
                                  priority=request_priority(request)))
    rid, created = new_id("cmpl"), now()
    echoed = [echo_text(model, p) if body.echo else "" for p in prompts]
    try:
        scored = await score_prompts(s, model, prompts, body, loras) if body.echo and body.logprobs is not None \
            else [None] * len(prompts)
    except BaseException:
        for stream in streams:
            stream.cancel()
        raise

    def prefix(index: int) -> str:
        return echoed[index // body.n]

    def prefix_logprobs(index: int) -> dict | None:
        return scored[index // body.n]

    if body.stream and not scores_only:
        head = StreamHead(rid, created, model.name, body.include_usage)
        chunker = CompletionChunker(head, len(streams), body.n, echoed, scored, body.logprobs is not None)
        return _streaming(request, streams, chunker, lambda choices: envelope(
            rid, "text_completion", created, model.name,
            [{"index": c.index, "text": prefix(c.index) + c.text, "logprobs": None,
              "finish_reason": FINISH_REASONS.get(c.finish_reason or "cancelled")} for c in choices],
            usage=usage(choices, len(prompts))))
    choices = await collect(streams, request)
    if scores_only:
        for c in choices:
            c.text, c.token_ids, c.logprobs, c.finish_reason = "", [], [], "length"
    out = [{"index": c.index, "text": prefix(c.index) + c.text,
            "logprobs": joined_logprobs(prefix_logprobs(c.index), c.logprobs, len(prefix(c.index)))
            if body.logprobs is not None else None,
            "finish_reason": finished(c.finish_reason)} for c in choices]
    body_out = keep_answer(request, envelope(rid, "text_completion", created, model.name, out,
                                             usage=usage(choices, len(prompts))))
    if body.stream:  # max_tokens 0, streamed: the whole answer as one chunk per choice
        return StreamingResponse(iter([sse({**body_out, "choices": [c], "usage": None}) for c in out] +
                                      ([sse({**body_out, "choices": []})] if body.include_usage else []) +
                                      [DONE]), media_type="text/event-stream")
    return body_out


def echo_text(model: LoadedModel, prompt: str | list[int]) -> str:
    return prompt if isinstance(prompt, str) else model.tokenizer.decode(prompt, skip_special_tokens=False)


async def score_prompts(s: Serving, model: LoadedModel, prompts: list[str | list[int]], body: CompletionRequest,
                        loras: tuple[tuple[str, float], ...]) -> list[dict]:
    """echo with logprobs: each prompt token's logprob (the first has none) in the completions logprobs shape."""
    engine = s.engine_for(model)
    out = []
    for prompt in prompts:
        ids = model.tokenizer.encode(prompt, add_special_tokens=True) if isinstance(prompt, str) else list(prompt)
        scored = await asyncio.to_thread(prompt_logprobs, engine, ids, body.logprobs or 0, loras)
        tokens, offsets, position = [], [], 0
        for text, _ in scored:
            tokens.append(text)
            offsets.append(position)
            position += len(text)
        out.append({"tokens": tokens, "token_logprobs": [lp.logprob if lp else None for _, lp in scored],
                    "top_logprobs": [{t: v for _, t, v in lp.top} if lp else None for _, lp in scored],
                    "text_offset": offsets})
    return out


def joined_logprobs(prompt: dict | None, items: list[TokenLogprob], offset: int) -> dict:
    """The generated tokens' logprobs, after the prompt's when it was echoed and scored."""
    generated = completion_logprobs(items, offset)
    if prompt is None:
        return generated
    return {key: prompt[key] + generated[key] for key in generated}


def _streaming(request: Request, streams: list[RequestStream], chunker: Chunker,
               whole: Callable[[list[Choice]], dict]) -> StreamingResponse:
    """SSE: the chunker's opening chunks, its chunks for each event, its closing ones, then [DONE].

    A client that disconnects cancels the generator, which cancels every stream. ``whole`` puts the choices
    together as the body the request would have had unstreamed, kept when the request is (webui/api/capture.py).
    """
    async def events() -> AsyncIterator[str]:
        seen = [Choice(i) for i in range(len(streams))]

        def ended() -> None:
            note_usage(request, seen)
            keep_answer(request, whole(seen))

        try:
            for c in chunker.opening():
                yield sse(c)
            async for index, item in Interleaved(streams):
                if isinstance(item, BaseException):
                    yield error_chunk(f"generation failed: {item}")
                    break
                seen[index].add(item)
                for c in chunker.feed(index, item):
                    yield sse(c)
            else:
                for c in chunker.closing(seen):
                    yield sse(c)
            ended()  # before [DONE]: a kept request is written before the client reads its end (capture.py)
            yield DONE
        finally:
            ended()

    return StreamingResponse(events(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
