"""The batch KV cache: logits in a padded batch match each sequence run alone, through joins and leaves."""

from __future__ import annotations

import torch

from tests.conftest import load_model


def solo_logits(model, prompt: list[int], continuation: list[int]) -> list[torch.Tensor]:
    """Next-token logits after the prompt and after each continuation token, one sequence alone."""
    handle = model.new_cache()
    out = [model.forward([handle], [prompt])[0]]
    for token in continuation:
        out.append(model.forward([handle], [[token]])[0])
    model.release(handle)
    return out


def test_batched_rows_match_solo_through_joins_and_leaves(tiny_model_dir):
    model = load_model(tiny_model_dir)
    assert model.capabilities.batched_forward
    prompts = [[5, 6, 7], list(range(10, 30)), [42], list(range(100, 109))]
    cont = [[1000 + i for i in range(8)] for _ in prompts]
    expected = [solo_logits(model, p, c) for p, c in zip(prompts, cont)]

    handles = [model.new_cache() for _ in prompts]
    got = [[] for _ in prompts]
    # step 0: sequences 0 and 1 prefill; step 1: they decode together while 2 prefills; 3 joins later
    active = {0: 0, 1: 0}  # sequence -> tokens of its continuation already fed
    schedule = {1: [2], 3: [3]}
    leave_at = {4: 1}  # sequence 1 leaves before step 4 (released)
    for step in range(12):
        if step in leave_at:
            gone = leave_at[step]
            model.release(handles[gone])
            del active[gone]
        for new in schedule.get(step, []):
            active[new] = 0
        order = sorted(active)
        feeds = []
        for i in order:
            fed = active[i]
            if not got[i]:
                feeds.append(prompts[i])
            else:
                feeds.append([cont[i][fed]])
                active[i] = fed + 1
        if not order:
            break
        logits = model.forward([handles[i] for i in order], feeds)
        for row, i in enumerate(order):
            got[i].append(logits[row])
        for i in [i for i in order if active[i] >= len(cont[i])]:
            model.release(handles[i])
            del active[i]
    for i in range(len(prompts)):
        for a, b in zip(got[i], expected[i]):
            assert torch.allclose(a, b, atol=1e-4), f"sequence {i} drifted in the batch"
    assert len(got[0]) == 9 and len(got[1]) == 4  # sequence 1 left early


def test_padding_columns_are_trimmed_when_the_longest_leaves(tiny_model_dir):
    model = load_model(tiny_model_dir)
    short, long = model.new_cache(), model.new_cache()
    model.forward([short, long], [[1, 2], list(range(3, 40))])
    model.forward([short, long], [[7], [7]])
    assert model._batch.width == 38
    model.release(long)
    model.forward([short], [[8]])
    assert model._batch.width == 4 and len(model._batch.rows) == 1


def test_a_joined_sequence_not_fed_leaves_the_batch(tiny_model_dir):
    model = load_model(tiny_model_dir)
    a, b = model.new_cache(), model.new_cache()
    model.forward([a, b], [[1, 2, 3], [4, 5]])
    model.forward([a, b], [[6], [6]])
    model.forward([a], [[7]])  # b was dropped without release
    assert model._batch.rows == [a]


def test_prompt_chunks_of_several_sequences_prefill_in_one_forward_like_alone(tiny_model_dir):
    """Different cached lengths (none included) and chunk lengths, padded into one forward: every row's logits,
    and its decoding afterwards, match the sequence run alone."""
    from loaders.kv_batch import _group_by_length

    model = load_model(tiny_model_dir)
    firsts = [[5, 6, 7, 8], [], list(range(10, 30)), [42]]
    seconds = [[9, 10, 11], [12, 13, 14, 15], [31, 32], [43, 44, 45]]
    cont = [700 + i for i in range(4)]
    expected = [solo_logits(model, f + s, cont) for f, s in zip(firsts, seconds)]
    handles = [model.new_cache() for _ in firsts]
    started = [(h, f) for h, f in zip(handles, firsts) if f]
    model.forward([h for h, _ in started], [f for _, f in started])  # some already hold a prefix
    assert len(_group_by_length(list(enumerate(seconds)))) == 1  # similar lengths: one padded forward
    got = model.forward(handles, seconds)
    assert not torch.isnan(got).any()
    for i, h in enumerate(handles):
        assert h.length == len(firsts[i]) + len(seconds[i]) and h.own.layers[0].keys.shape[2] == h.length
        assert torch.allclose(got[i], expected[i][0], atol=1e-4), f"sequence {i} differs after the padded prefill"
    for step, token in enumerate(cont):
        rows = model.forward(handles, [[token]] * len(handles))
        for i in range(len(handles)):
            assert torch.allclose(rows[i], expected[i][step + 1], atol=1e-4), f"sequence {i} drifted at {step}"
    for h in handles:
        model.release(h)


def test_chunks_of_very_different_lengths_are_not_padded_together():
    from loaders.kv_batch import _group_by_length

    groups = _group_by_length([(0, [1] * 200), (1, [1] * 5), (2, [1] * 6), (3, [1] * 190)])
    assert [[i for i, _ in g] for g in groups] == [[1, 2], [3, 0]]
