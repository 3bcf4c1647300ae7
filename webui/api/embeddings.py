"""``POST /v1/embeddings`` in OpenAI's shape: a vector per input from a loaded model.

The vectors come from a sentence-embedding model when the request names one, else from the LLM named (its last
hidden states mean-pooled); the response's ``model`` says which ("tiny (mean-pooled hidden states)"). They are
computed between the engine's steps (webui/embeddings.py), so chats and batches keep going.
"""

from __future__ import annotations

import asyncio
import base64
import struct

from fastapi import APIRouter, Request

from loaders.base import EmbeddingModel
from webui.api.auth import request_priority
from webui.api.body import JSONBodyRoute
from webui.api.errors import APIError
from webui.api.protocol import EmbeddingRequest
from webui.api.routes import serving
from webui.embeddings import EmbeddingsUnavailable, embed_ids, embedding_model
from webui.engine.sequence import fewest_tokens
from webui.engine.types import BACKGROUND

router = APIRouter(route_class=JSONBodyRoute)  # bodies read whole or refused (webui/api/body.py)


def input_ids(model: EmbeddingModel, inputs: list[str | list[int]]) -> list[list[int]]:
    """Each input as token ids (texts with the tokenizer's special tokens), checked: every id is the model's and
    no input is longer than its context; a 400 naming the input otherwise."""
    vocab = model.vocab_size
    out = []
    for i, item in enumerate(inputs):
        fewest = fewest_tokens(model.tokenizer, vocab, item, model.context_length) if isinstance(item, str) else 0
        if fewest > model.context_length:  # refused before tokenizing: a 10 MB input took seconds (#43)
            raise APIError(400, f"input[{i}] has at least {fewest} tokens, more than the {model.context_length} of "
                                f"{model.name}'s context; shorten it or split it", param="input",
                           code="context_length_exceeded")
        ids = model.tokenizer.encode(item, add_special_tokens=True) if isinstance(item, str) else item
        if not ids:
            raise APIError(400, f"input[{i}] has no tokens; send some text", param="input")
        if len(ids) > model.context_length:
            raise APIError(400, f"input[{i}] has {len(ids)} tokens, more than the {model.context_length} of "
                                f"{model.name}'s context; shorten it or split it", param="input",
                           code="context_length_exceeded")
        bad = next((t for t in ids if not 0 <= t < vocab), None)
        if bad is not None:
            raise APIError(400, f"input[{i}]: {bad} is not a token id of {model.name} (0 to {vocab - 1})",
                           param="input")
        out.append(list(ids))
    return out


def encoded(vector: list[float], encoding_format: str) -> list[float] | str:
    """A vector as the response carries it: numbers, or base64 of little-endian float32 (OpenAI's form)."""
    if encoding_format == "base64":
        return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")
    return vector


@router.post("/v1/embeddings")
async def embeddings(body: EmbeddingRequest, request: Request) -> dict:
    s = serving(request)
    named, loras = s.resolve_model(body.model)
    if loras:
        raise APIError(400, "embeddings are the base model's; name the model without an adapter", param="model")
    try:
        model = embedding_model(named)
    except EmbeddingsUnavailable as exc:
        raise APIError(400, str(exc), param="model") from exc
    if body.dimensions is not None and body.dimensions != model.embedding_size:
        raise APIError(400, f"dimensions: {model.embedding_source} gives vectors of {model.embedding_size} numbers "
                            f"and cannot shorten them; leave dimensions out or send {model.embedding_size}",
                       param="dimensions")
    ids = input_ids(model, body.inputs())
    vectors = await asyncio.to_thread(embed_ids, s.engine_for(named), model, ids,
                                      request_priority(request) == BACKGROUND)
    tokens = sum(len(x) for x in ids)
    request.state.prompt_tokens = tokens
    return {"object": "list", "model": model.embedding_source,
            "data": [{"object": "embedding", "index": i, "embedding": encoded(v, body.encoding_format)}
                     for i, v in enumerate(vectors)],
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}
