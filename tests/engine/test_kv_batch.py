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


def test_decoding_matches_transformers_own_cache_and_keeps_its_step_state(tiny_model_dir):
    """The decode step's shortcuts (the block table kept while the same rows decode with the same blocks; a lone
    row whose blocks are consecutive read as a view of the pool, with an all-true mask) give the logits of
    transformers' own DynamicCache loop: alone, in a batch whose rows' blocks interleave, and alone again with
    blocks that are no longer consecutive, across block boundaries."""
    from transformers import DynamicCache

    from loaders.kv_batch import BLOCK

    model = load_model(tiny_model_dir)
    net, pool = model.model, model._pool

    def reference(prompt: list[int], tokens: list[int]) -> list[torch.Tensor]:
        cache = DynamicCache(config=net.config)
        with torch.inference_mode():
            out = [net(input_ids=torch.tensor([prompt]), cache=cache, use_cache=True).logits[0, -1]]
            for token in tokens:
                out.append(net(input_ids=torch.tensor([[token]]), cache=cache, use_cache=True).logits[0, -1])
        return out

    a, b = model.new_cache(), model.new_cache()
    a_prompt, b_prompt = list(range(10, 25)), list(range(30, 45))
    a_tokens, b_tokens = [200 + i for i in range(3 * BLOCK)], [400 + i for i in range(BLOCK + 4)]
    a_want, b_want = reference(a_prompt, a_tokens), reference(b_prompt, b_tokens)
    a_got = [model.forward([a], [a_prompt])[0]]
    states = []
    for token in a_tokens[:BLOCK]:  # alone: its blocks are consecutive
        a_got.append(model.forward([a], [[token]])[0])
        states.append(pool.decoding)
        assert pool.decoding.run is not None
    assert len(set(map(id, states))) == 2  # made again only when the row took a new block
    b_got = [model.forward([b], [b_prompt])[0]]
    for token_a, token_b in zip(a_tokens[BLOCK:], b_tokens):  # together: both take blocks in turn
        rows = model.forward([a, b], [[token_a], [token_b]])
        a_got.append(rows[0]), b_got.append(rows[1])
    model.release(b)
    assert a.blocks != list(range(a.blocks[0], a.blocks[0] + len(a.blocks)))
    for token in a_tokens[BLOCK + len(b_tokens):]:  # alone again, its blocks apart: gathered
        a_got.append(model.forward([a], [[token]])[0])
        assert pool.decoding.run is None
    model.release(a)
    for name, got, want in (("a", a_got, a_want), ("b", b_got, b_want)):
        assert len(got) == len(want)
        for step, (x, y) in enumerate(zip(got, want)):
            assert torch.allclose(x, y, atol=1e-4), f"{name} differs from transformers' own cache at step {step}"
