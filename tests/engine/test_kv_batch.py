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


def test_joining_and_leaving_copy_nothing_and_memory_follows_the_tokens_held(tiny_model_dir):
    """Blocks, not a padded batch: a sequence that leaves gives its blocks back (the others' KV stays where it
    is: the same storage, not a copy), and a new one reuses them."""
    from loaders.kv_batch import BLOCK

    model = load_model(tiny_model_dir)
    pool = model._pool
    short, long = model.new_cache(), model.new_cache()
    model.forward([short, long], [[1, 2], list(range(3, 40))])
    model.forward([short, long], [[7], [7]])
    assert len(short.blocks) == 1 and len(long.blocks) == -(-39 // BLOCK) and pool.held == 1 + len(long.blocks)
    storage = pool.keys[0].data_ptr()
    kept = pool.keys[0][:, short.blocks].clone()
    model.release(long)
    assert pool.held == 1
    model.forward([short], [[8]])
    assert pool.keys[0].data_ptr() == storage and torch.equal(pool.keys[0][:, short.blocks[:1], :3],
                                                               kept[:, :, :3])
    newcomer = model.new_cache()
    model.forward([newcomer], [list(range(50, 60))])
    assert set(newcomer.blocks) <= set(range(1, pool.capacity)) and pool.held == 2
    model.release(short), model.release(newcomer)
    assert pool.held == 0 and pool.keys == []  # nothing held: the memory is given back


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
        assert h.length == len(firsts[i]) + len(seconds[i]) and len(h.blocks) == -(-h.length // 16)
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
