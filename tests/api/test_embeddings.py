"""/v1/embeddings through the official `openai` client, against the real server and the real default model."""

from __future__ import annotations

import math

import httpx
import openai
import pytest

from tests.api.conftest import APIServer, start_api
from tests.api.test_openai_client import MODEL, fresh

pytestmark = pytest.mark.real_model
SOURCE = f"{MODEL} (mean-pooled hidden states)"
TEXTS = ["The capital of France is Paris.", "Paris is the capital city of France.", "I ate a banana for lunch."]


def embed(api, **fields):
    with fresh(api) as c:
        return c.embeddings.create(**{"model": MODEL, **fields})


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b))  # the vectors come L2-normalised


def close(a: list[float], b: list[float], tol: float = 1e-4) -> bool:
    return len(a) == len(b) and max(abs(x - y) for x, y in zip(a, b)) < tol


def token_count(api, text: str) -> list[int]:
    answer = httpx.post(api.root + "/tokenize", json={"model": MODEL, "prompt": text},
                        headers={"Authorization": f"Bearer {api.key}"}, timeout=60)
    return answer.json()["tokens"]


def test_one_text_gives_one_normalised_vector_named_by_its_source(api):
    r = embed(api, input=TEXTS[0], encoding_format="float")
    assert r.object == "list" and r.model == SOURCE and len(r.data) == 1
    (item,) = r.data
    assert item.object == "embedding" and item.index == 0 and len(item.embedding) == 576  # SmolLM2's hidden size
    assert math.isclose(math.sqrt(sum(x * x for x in item.embedding)), 1.0, rel_tol=1e-4)
    tokens = len(token_count(api, TEXTS[0]))
    assert r.usage.prompt_tokens == tokens and r.usage.total_tokens == tokens


def test_a_batch_equals_its_inputs_one_by_one_and_base64_decodes_to_the_floats(api):
    batch = embed(api, input=TEXTS, encoding_format="float")
    assert [d.index for d in batch.data] == [0, 1, 2]
    singles = [embed(api, input=text, encoding_format="float").data[0].embedding for text in TEXTS]
    assert all(close(d.embedding, s) for d, s in zip(batch.data, singles))
    packed = embed(api, input=TEXTS)  # the client asks for base64 unless told otherwise, and decodes it
    assert all(close(list(d.embedding), f.embedding, 1e-6) for d, f in zip(packed.data, batch.data))
    assert batch.usage.prompt_tokens == sum(len(token_count(api, t)) for t in TEXTS)
    # a paraphrase is nearer than an unrelated sentence
    vectors = [d.embedding for d in batch.data]
    assert cosine(vectors[0], vectors[1]) > cosine(vectors[0], vectors[2])


def test_token_ids_embed_as_their_text_and_the_alias_names_the_model(api):
    ids = token_count(api, TEXTS[0])
    by_text = embed(api, input=TEXTS[0], encoding_format="float").data[0].embedding
    by_ids = embed(api, input=ids, encoding_format="float")
    assert close(by_ids.data[0].embedding, by_text)
    several = embed(api, input=[ids, ids[:3]], encoding_format="float", model="gpt-test")
    assert several.model == SOURCE and len(several.data) == 2 and close(several.data[0].embedding, by_text)
    assert embed(api, input="x", dimensions=576).data[0].embedding is not None  # its own size is taken


@pytest.mark.parametrize("fields, param, words", [
    ({"dimensions": 64}, "dimensions", "576"),
    ({"input": ""}, "input", "empty string"),
    ({"input": []}, "input", "empty list"),
    ({"input": ["a", ""]}, "input", "input[1] is empty"),
    ({"input": [[1, 2], []]}, "input", "input[1] is empty"),
    ({"input": ["a"] * 2049}, "input", "at most 2048"),
    ({"input": [1] * 8193}, "input", "8192"),
    ({"input": [1, 10**9]}, "input", "not a token id"),
    ({"encoding_format": "int8"}, "encoding_format", "float"),
], ids=["dimensions", "empty-text", "empty-list", "empty-item", "empty-ids", "too-many", "too-long", "bad-id",
        "format"])
def test_bad_requests_are_400s_naming_the_field(api, fields, param, words):
    with pytest.raises(openai.BadRequestError) as e:
        embed(api, **{"input": "hello", **fields})
    assert e.value.status_code == 400 and e.value.body["param"] == param
    assert words in e.value.message


def test_an_unknown_model_is_not_found_and_a_wrong_key_is_refused(api):
    with pytest.raises(openai.NotFoundError) as e:
        embed(api, input="hello", model="no-such-model")
    assert e.value.body["param"] == "model" and e.value.body["code"] == "model_not_found"
    with fresh(api, "not-the-key") as c, pytest.raises(openai.AuthenticationError):
        c.embeddings.create(model=MODEL, input="hello")


@pytest.fixture(scope="module")
def embed_api(tmp_path_factory, default_model_dir, tiny_model_dir):
    """The default model in use, and a sentence-embedding folder (the tiny model's files) loaded beside it."""
    from tests.engine.test_embeddings import sentence_folder

    models = tmp_path_factory.mktemp("embed-models") / "models"
    models.mkdir()
    sentence_folder(tiny_model_dir, models / "mini-embed")
    ctx, base, key = start_api(tmp_path_factory, default_model_dir, "--models-dir", str(models), "--also-load",
                               "mini-embed")
    with ctx as server:
        yield APIServer(base, key, server)


def test_a_sentence_embedding_model_answers_under_its_own_name_and_writes_no_text(embed_api):
    r = embed(embed_api, model="mini-embed", input=TEXTS, encoding_format="float")
    assert r.model == "mini-embed" and len(r.data) == 3 and len(r.data[0].embedding) == 32  # the tiny model's size
    assert embed(embed_api, input="hello").model == SOURCE  # the LLM in use, when it is named
    with pytest.raises(openai.BadRequestError) as e:
        embed(embed_api, model="mini-embed", input="x" * 400)  # more than its max_seq_length of 32 tokens
    assert e.value.body["param"] == "input" and "more than the 32" in e.value.message
    with pytest.raises(openai.BadRequestError) as e:
        embed(embed_api, model="mini-embed", input=[1, 10**6])
    assert e.value.body["param"] == "input" and "input[0]: 1000000 is not a token id of mini-embed" in e.value.message
    with fresh(embed_api) as c, pytest.raises(openai.BadRequestError) as e:
        c.chat.completions.create(model="mini-embed", messages=[{"role": "user", "content": "Hi"}], max_tokens=2)
    assert e.value.body["param"] == "model" and "is an embedding model and writes no text" in e.value.message
