"""Token view rows and branching on the real default model: the true top-k, and a branch starts with its token."""

from __future__ import annotations

import math

import pytest
import torch

from webui.engine import GenerationRequest, SamplingParams
from webui.token_view import VIEW_TOP, BranchError, branch_request, branched_row, render, token_rows

pytestmark = pytest.mark.real_model


def chat_ids(model, text: str) -> list[int]:
    prompt = model.tokenizer.apply_chat_template([{"role": "user", "content": text}])
    return model.tokenizer.encode(prompt, add_special_tokens=False)


def test_rows_hold_the_true_top_k_and_branching_starts_with_the_chosen_alternative(real_engine, real_model):
    prompt_ids = chat_ids(real_model, "Name three fruits.")
    params = SamplingParams(temperature=0, max_new_tokens=10)
    result = real_engine.generate(GenerationRequest(prompt_ids, params, logprobs=VIEW_TOP))
    rows = token_rows(result.logprobs)
    assert [r["id"] for r in rows] == result.token_ids

    # the alternatives are the raw distribution's true top-k, with its probabilities
    direct = torch.softmax(real_model.logits(prompt_ids).double(), -1)
    top = direct.topk(VIEW_TOP)
    assert [a[0] for a in rows[0]["alts"]] == top.indices.tolist()
    assert [a[2] for a in rows[0]["alts"]] == pytest.approx(top.values.tolist(), abs=1e-4)
    assert sum(a[2] for a in rows[0]["alts"]) <= 1 + 1e-6
    assert rows[0]["pa"] == 1.0 and all(a[3] == 0.0 for a in rows[0]["alts"][1:])  # greedy samples the top

    pos = 2
    alt = next(a for a in rows[pos]["alts"] if a[0] != rows[pos]["id"])
    request = branch_request(prompt_ids, result.token_ids, pos, alt[0], params)
    assert request.params.max_new_tokens == params.max_new_tokens - pos - 1
    branched = real_engine.generate(request)
    reply_ids = result.token_ids[:pos] + [alt[0]] + branched.token_ids
    assert reply_ids[:pos] == result.token_ids[:pos] and reply_ids[pos] == alt[0] != result.token_ids[pos]
    tok = real_model.tokenizer
    text = tok.decode(reply_ids[:pos + 1]) + branched.text
    assert text.startswith(tok.decode(result.token_ids[:pos]) + alt[1])
    assert text == tok.decode(reply_ids)
    # the continuation is what the model makes after that prefix: greedy from the same ids
    again = real_engine.generate(GenerationRequest(prompt_ids + reply_ids[:pos + 1], request.params))
    assert again.token_ids == branched.token_ids
    assert branched_row(rows[pos], alt[0])["id"] == alt[0]


def test_probabilities_after_processors_show_what_sampling_cut(real_engine, real_model):
    prompt_ids = chat_ids(real_model, "Tell me a story.")
    params = SamplingParams(temperature=0.7, top_k=2, max_new_tokens=3, seed=5)
    rows = token_rows(real_engine.generate(GenerationRequest(prompt_ids, params, logprobs=VIEW_TOP)).logprobs)
    for row in rows:
        after = [a[3] for a in row["alts"]]
        assert sum(1 for p in after if p > 0) <= 2 and after[2:] == [0.0] * (len(after) - 2)  # top_k=2 cut the rest
        assert math.isclose(sum(after), 1.0, abs_tol=1e-4)
        assert row["pa"] > 0
    html = render(rows)
    assert html.count("class='tv-tok'") == len(rows) and ">cut<" in html and "data-branch-token" in html
    assert "data-branch-token" not in render(rows, branchable=False)


def test_branch_positions_and_tokens_are_checked():
    params = SamplingParams(max_new_tokens=4)
    with pytest.raises(BranchError, match="outside the reply's 2 tokens"):
        branch_request([1], [5, 6], 2, 7, params)
    with pytest.raises(BranchError, match="not a token id"):
        branch_request([1], [5, 6], 0, -1, params)
    assert branch_request([1], [5, 6, 7, 8], 3, 9, params) is None  # no budget left after the new token
    with pytest.raises(BranchError, match="not one of the alternatives"):
        branched_row({"id": 5, "text": "a", "p": 0.5, "pa": 1.0, "alts": [[5, "a", 0.5, 1.0]]}, 9)
