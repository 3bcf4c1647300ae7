"""Embeddings from the tiny model: mean-pooled last hidden states, batched as computed alone, between engine steps."""

from __future__ import annotations

import json
import math

import pytest
import torch

from loaders.base import LoadOptions, ModelLoadError, is_embedding_model, is_stepped, is_text_backend
from loaders.registry import default_registry
from tests.engine.scripted import ScriptedModel
from webui.embeddings import EmbeddingsUnavailable, TextEmbeddings, embed_texts, embedding_model
from webui.engine import Engine, GenerationRequest, SamplingParams
from webui.engine.types import GeneratesNoText

TEXTS = ["The capital of France is Paris.", "hi", "A much longer sentence about dragons who like green tea."]


def test_a_vector_is_the_normalised_mean_of_the_last_hidden_states(tiny_model):
    assert is_embedding_model(tiny_model)
    assert tiny_model.embedding_source == f"{tiny_model.name} (mean-pooled hidden states)"
    ids = tiny_model.tokenizer.encode(TEXTS[0])
    with torch.inference_mode():
        hidden = tiny_model.model(input_ids=torch.tensor([ids]), output_hidden_states=True).hidden_states[-1][0]
    mean = hidden.float().mean(0)
    expected = (mean / mean.norm()).tolist()
    (got,) = tiny_model.embed([ids])
    assert len(got) == tiny_model.embedding_size
    assert max(abs(a - b) for a, b in zip(got, expected)) < 1e-5
    assert math.isclose(sum(x * x for x in got), 1.0, rel_tol=1e-5)


def test_inputs_of_different_lengths_embed_together_as_they_do_alone(tiny_model):
    inputs = [tiny_model.tokenizer.encode(t) for t in TEXTS] * 7  # more than one batch
    together = tiny_model.embed(inputs)
    alone = [tiny_model.embed([ids])[0] for ids in inputs[:3]]
    for i, vector in enumerate(together):
        assert max(abs(a - b) for a, b in zip(vector, alone[i % 3])) < 1e-5
    with pytest.raises(ValueError, match="no tokens"):
        tiny_model.embed([[]])


def test_embedding_between_steps_leaves_a_running_reply_as_it_was(tiny_model):
    engine = Engine(tiny_model)
    try:
        params = SamplingParams(temperature=0, max_new_tokens=30, ban_eos=True)
        alone = engine.generate(GenerationRequest("Hello", params)).token_ids
        stream = engine.submit(GenerationRequest("Hello", params))
        events = iter(stream)
        next(events)
        found = embed_texts(engine, embedding_model(tiny_model), [*TEXTS, TEXTS[0], ""])
        rest = [t for e in events for t in e.token_ids]
        assert alone[-len(rest):] == rest
    finally:
        engine.close()
    assert set(found.vectors) == {*TEXTS, ""} and found.vectors[""] is None
    assert found.cosine(TEXTS[0], TEXTS[0]) == pytest.approx(1.0)
    assert -1 <= found.cosine(TEXTS[0], TEXTS[1]) < 0.999  # type: ignore[operator]
    assert found.cosine("", "") == 1.0 and found.cosine("", TEXTS[0]) == 0.0
    assert found.cosine("never embedded", TEXTS[0]) is None


def test_a_model_without_embeddings_is_named_with_what_to_load(tiny_model):
    with pytest.raises(EmbeddingsUnavailable, match="no model is loaded"):
        embedding_model(None)
    with pytest.raises(EmbeddingsUnavailable, match="'scripted' gives no embeddings .* load a model through the "
                                                    "transformers loader"):
        embedding_model(ScriptedModel(tiny_model.tokenizer, [1]))
    assert TextEmbeddings("x").cosine("a", "b") is None


def sentence_folder(tiny_model_dir, out, pooling: str = "pooling_mode_mean_tokens", modules: list | None = None):
    """The tiny model's files as a sentence-transformers folder: modules.json, 1_Pooling, sentence_bert_config."""
    out.mkdir()
    for item in tiny_model_dir.iterdir():
        (out / item.name).symlink_to(item)
    kinds = ["Transformer", "Pooling", "Normalize"]
    (out / "modules.json").write_text(json.dumps(modules if modules is not None else [
        {"idx": i, "name": str(i), "path": ["", "1_Pooling", "2_Normalize"][i],
         "type": f"sentence_transformers.models.{kind}"} for i, kind in enumerate(kinds)]))
    (out / "1_Pooling").mkdir()
    size = json.loads((tiny_model_dir / "config.json").read_text())["hidden_size"]
    (out / "1_Pooling" / "config.json").write_text(json.dumps({pooling: True, "word_embedding_dimension": size}))
    (out / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 32}))
    return out


def test_a_sentence_embedding_folder_loads_through_its_own_loader_and_pools_as_it_says(tiny_model, tiny_model_dir,
                                                                                        tmp_path):
    folder = sentence_folder(tiny_model_dir, tmp_path / "mini-embed")
    registry = default_registry()
    assert registry.for_path(folder).name == "embedding" and registry.for_path(tiny_model_dir).name == "transformers"
    model = registry.get("embedding").load(folder, LoadOptions(device="cpu"))
    assert is_embedding_model(model) and not is_stepped(model) and not is_text_backend(model)
    assert model.embedding_source == "mini-embed" and model.context_length == 32  # its max_seq_length
    inputs = [tiny_model.tokenizer.encode(t) for t in TEXTS]
    # the same weights, read as the base model: the same mean-pooled vectors as the LLM's own
    for a, b in zip(model.embed(inputs), tiny_model.embed(inputs)):
        assert max(abs(x - y) for x, y in zip(a, b)) < 1e-5
    cls = registry.get("embedding").load(sentence_folder(tiny_model_dir, tmp_path / "cls", "pooling_mode_cls_token"),
                                         LoadOptions(device="cpu"))
    with torch.inference_mode():
        first = cls.model(input_ids=torch.tensor([inputs[0]])).last_hidden_state[0, 0]
    assert max(abs(x - y) for x, y in zip(cls.embed(inputs[:1])[0], (first / first.norm()).tolist())) < 1e-5
    engine = Engine(model)
    try:
        with pytest.raises(GeneratesNoText, match="'mini-embed' is an embedding model and writes no text"):
            engine.submit(GenerationRequest("Hello", SamplingParams()))
    finally:
        engine.close()


@pytest.mark.parametrize("pooling, modules, message", [
    ("pooling_mode_max_tokens", None, "asks for pooling pooling_mode_max_tokens"),
    ("pooling_mode_mean_tokens", [{"type": "sentence_transformers.models.Dense", "path": "2_Dense"}],
     "modules this loader does not run: sentence_transformers.models.Dense"),
])
def test_a_folder_that_would_embed_otherwise_is_refused_naming_why(tiny_model_dir, tmp_path, pooling, modules,
                                                                    message):
    folder = sentence_folder(tiny_model_dir, tmp_path / "odd", pooling, modules)
    with pytest.raises(ModelLoadError, match=message):
        default_registry().get("embedding").load(folder, LoadOptions(device="cpu"))


def test_pooling_takes_the_mean_of_kept_tokens_the_first_or_the_last_kept_one():
    from loaders.embedding import pool

    hidden = torch.arange(12, dtype=torch.float).reshape(2, 3, 2)  # row 0 has one pad token at the end
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    assert pool(hidden, mask, "mean").tolist() == [[1.0, 2.0], [8.0, 9.0]]
    assert pool(hidden, mask, "cls").tolist() == [[0.0, 1.0], [6.0, 7.0]]
    assert pool(hidden, mask, "last").tolist() == [[2.0, 3.0], [10.0, 11.0]]
