"""Embeddings of texts from a loaded model, computed between the engine's steps, and how close two texts are.

The model computes the vectors (loaders/base.py ``EmbeddingModel``); this module runs it on the scheduler
thread of the engine that serves it (``Engine.call_between_steps``), a few batches at a time, so a forward
never races a running batch and generation goes on between the calls. /v1/embeddings
(webui/api/embeddings.py) and the batch runner's ``similar`` and ``answer-relevance`` asserts use it.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Mapping, Sequence

from loaders.base import EmbeddingModel, LoadedModel, is_embedding_model
from loaders.embedding import EMBED_BATCH
from webui.engine.types import EngineError

if TYPE_CHECKING:
    from webui.engine import Engine

PER_CALL = EMBED_BATCH * 4
"""Inputs embedded in one call between engine steps (the engine waits for no more than that)."""


class EmbeddingsUnavailable(EngineError):
    """The model gives no embeddings; the message says what to load instead."""


def embedding_model(model: LoadedModel | None) -> EmbeddingModel:
    """``model``, which must give embeddings."""
    if model is None:
        raise EmbeddingsUnavailable("no model is loaded; load one in the Model tab")
    if not is_embedding_model(model):
        raise EmbeddingsUnavailable(f"'{model.name}' gives no embeddings (the {model.loader} loader computes none); "
                                    f"load a model through the transformers loader, or a sentence-embedding model")
    return model


def embed_ids(engine: Engine, model: EmbeddingModel, inputs: Sequence[Sequence[int]],
              background: bool = False) -> list[list[float]]:
    """One vector per input of token ids, computed between the steps of ``engine`` (which serves ``model``);
    ``background`` (a batch job's): one forward batch per call, so the engine's other work goes on between them."""
    per_call = EMBED_BATCH if background else PER_CALL
    out: list[list[float]] = []
    for start in range(0, len(inputs), per_call):
        out += engine.call_between_steps(functools.partial(model.embed, inputs[start:start + per_call]))
    return out


def text_ids(model: EmbeddingModel, text: str) -> list[int]:
    """``text`` as the model embeds it: its tokens, with the tokenizer's special tokens, cut to the context."""
    return model.tokenizer.encode(text, add_special_tokens=True)[:model.context_length]


@dataclass(frozen=True)
class TextEmbeddings:
    """Texts and their vectors from one model (``source``: what the vectors are, e.g. "tiny (mean-pooled hidden
    states)"); a text with no tokens has none (None)."""

    source: str
    vectors: Mapping[str, tuple[float, ...] | None] = field(default_factory=dict)

    def cosine(self, a: str, b: str) -> float | None:
        """The cosine of the two texts' vectors (1 for two empty texts, 0 for one); None when either text was not
        embedded."""
        if a not in self.vectors or b not in self.vectors:
            return None
        va, vb = self.vectors[a], self.vectors[b]
        if va is None or vb is None:
            return float(va is None and vb is None)
        dot = sum(x * y for x, y in zip(va, vb))
        norm = math.sqrt(sum(x * x for x in va) * sum(y * y for y in vb))
        return dot / norm if norm else 0.0


def embed_texts(engine: Engine, model: EmbeddingModel, texts: Sequence[str]) -> TextEmbeddings:
    """The vectors of ``texts`` (each once), computed between the steps of ``engine``."""
    unique = list(dict.fromkeys(texts))
    ids = {text: text_ids(model, text) for text in unique}
    wanted = [text for text in unique if ids[text]]
    vectors = embed_ids(engine, model, [ids[text] for text in wanted])
    found: dict[str, tuple[float, ...] | None] = {text: None for text in unique}
    found.update({text: tuple(vector) for text, vector in zip(wanted, vectors)})
    return TextEmbeddings(model.embedding_source, found)
