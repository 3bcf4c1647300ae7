"""Paged KV for the transformers family: sequences that join and leave between steps, and nothing is re-copied.

Every sequence's keys and values live in fixed-size blocks of one pool per layer ([kv heads, blocks, BLOCK,
head dim]); a sequence holds the ids of its blocks (its block table) and its length. A step runs a group of
sequences in one forward: their new tokens left-padded to the longest, each row at its own true positions. The
model's attention calls ``StepCache.update``, which writes only the new tokens into their blocks and gathers
each row's blocks into the padded keys and values that attention reads (a 4D mask hides the padding and keeps
each row causal), as a DynamicCache's concatenation copied them every step. So a sequence joining or leaving
copies nothing of the others, and memory grows with the tokens held, block by block (the pool doubles when it
runs out, and is given back when no sequence holds any).
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

BLOCK = 16  # tokens per block
TRASH = 0  # a block no sequence owns: padded inputs write their keys and values there
PAD_ID = 0  # any valid id: padded inputs are masked out


class SequenceCache:
    """The per-sequence handle the engine holds (opaque to it)."""

    __slots__ = ("pool", "own", "blocks", "length", "released", "adapter", "images")

    def __init__(self, pool: "KVPool | None", adapter: str = "__base__", own: Any = None):
        self.pool = pool  # the paged pool; None for models that run one sequence at a time in ``own``
        self.own = own  # a DynamicCache, for those models
        self.blocks: list[int] = []
        self.length = 0  # tokens of this sequence in the cache
        self.released = False
        self.adapter = adapter  # the LoRA adapter (peft name) this sequence runs with
        self.images: Any = None  # its prompt's images (loaders/vision.py ImageInputs), if it has any


class KVPool:
    """The blocks of every layer, and which are free."""

    def __init__(self, device: str, attention: str = "sdpa", first_blocks: int = 256):
        self.device = device
        self.attention = attention  # the model's attention implementation: how a 4D mask must look
        self.keys: list[torch.Tensor] = []  # per layer [kv heads, capacity, BLOCK, head dim]
        self.values: list[torch.Tensor] = []
        self.capacity = 0  # blocks
        self.first_blocks = first_blocks
        self.free: list[int] = []
        self.held = 0  # blocks owned by sequences

    # -- blocks ------------------------------------------------------------------------------
    def reserve(self, handle: SequenceCache, tokens: int) -> None:
        """Give ``handle`` blocks for ``tokens`` tokens in all."""
        need = -(-tokens // BLOCK) - len(handle.blocks)
        if need <= 0:
            return
        if need > len(self.free):
            self._grow(need - len(self.free))
        handle.blocks += [self.free.pop() for _ in range(need)]
        self.held += need

    def release(self, handle: SequenceCache) -> None:
        if handle.released:
            return
        handle.released = True
        self.free += reversed(handle.blocks)
        self.held -= len(handle.blocks)
        handle.blocks = []
        if not self.held:  # nobody holds anything: give the memory back
            self.keys, self.values, self.capacity, self.free = [], [], 0, []

    def _grow(self, more: int) -> None:
        old = self.capacity
        self.capacity = max(2 * old, old + more + (1 if old == 0 else 0), self.first_blocks)
        self.free = list(range(self.capacity - 1, old - 1, -1)) + self.free
        if old == 0:
            self.free.remove(TRASH)
        for layers in (self.keys, self.values):
            for i, t in enumerate(layers):
                grown = t.new_zeros(t.shape[0], self.capacity, *t.shape[2:])
                grown[:, :old] = t
                layers[i] = grown

    def layer(self, index: int, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Layer ``index``'s keys and values, made on first use with ``like``'s heads, head size and dtype."""
        while len(self.keys) <= index:
            shape = (like.shape[0], self.capacity, BLOCK, like.shape[-1])
            self.keys.append(like.new_zeros(shape))
            self.values.append(like.new_zeros(shape))
        return self.keys[index], self.values[index]

    def places(self, handle: SequenceCache, start: int, end: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The (block, offset) of tokens ``start..end-1`` of a sequence."""
        positions = torch.arange(start, end)
        table = torch.tensor(handle.blocks, dtype=torch.long)
        return table[positions // BLOCK].to(self.device), (positions % BLOCK).to(self.device)


class StepCache:
    """What the model gets as its cache for one forward of several rows (see the module's docstring)."""

    is_compileable = False

    def __init__(self, pool: KVPool, write_blocks: torch.Tensor, write_offsets: torch.Tensor,
                 table: torch.Tensor, rows: int, width: int):
        self.pool, self.rows, self.width = pool, rows, width  # width: the longest row's tokens after this step
        self.write_blocks, self.write_offsets = write_blocks, write_offsets  # [rows * new tokens]
        self.blocks = table.shape[1]
        self.table = table.reshape(-1)  # [rows * blocks a row]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args: Any, **kwargs: Any
               ) -> tuple[torch.Tensor, torch.Tensor]:
        heads, dim = key_states.shape[1], key_states.shape[-1]
        keys, values = self.pool.layer(layer_idx, key_states[0])
        for pool, new in ((keys, key_states), (values, value_states)):
            pool[:, self.write_blocks, self.write_offsets] = new.transpose(0, 1).reshape(heads, -1, dim)
        keys, values = (pool.index_select(1, self.table).view(heads, self.rows, self.blocks * BLOCK, dim)
                        .transpose(0, 1)[:, :, :self.width] for pool in (keys, values))
        return keys, values

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.width


def _run(model: Any, pool: KVPool, handles: Sequence[SequenceCache], chunks: Sequence[Sequence[int]],
         with_adapters: bool) -> torch.Tensor:
    """One forward for ``handles``, each fed its chunk (left-padded to the longest); each row's last logits."""
    device = pool.device
    lengths = [h.length for h in handles]
    n = len(handles)
    longest = max(len(c) for c in chunks)
    for h, chunk in zip(handles, chunks):
        pool.reserve(h, h.length + len(chunk))
    blocks = max(len(h.blocks) for h in handles)
    table = torch.tensor([h.blocks + [TRASH] * (blocks - len(h.blocks)) for h in handles], dtype=torch.long)
    if longest == 1:  # one token a row (decoding): its place is the row's length; nothing is padded
        places = torch.tensor(lengths, dtype=torch.long).unsqueeze(1)
        input_ids = torch.tensor([list(c) for c in chunks], dtype=torch.long)
        write_blocks = torch.tensor([h.blocks[n // BLOCK] for h, n in zip(handles, lengths)], dtype=torch.long)
        write_offsets = places.squeeze(1) % BLOCK
        width = max(lengths) + 1
    else:
        input_ids = torch.tensor([[PAD_ID] * (longest - len(c)) + list(c) for c in chunks], dtype=torch.long)
        fed = torch.tensor([len(c) for c in chunks]).unsqueeze(1)
        t = torch.arange(longest).unsqueeze(0)
        real = t >= longest - fed  # [rows, new]: False where a row is padded
        places = (torch.tensor(lengths).unsqueeze(1) + t - (longest - fed)).clamp(min=0)  # each token's place
        write_blocks = torch.where(real, table.gather(1, places // BLOCK), TRASH).reshape(-1)
        write_offsets = torch.where(real, places % BLOCK, 0).reshape(-1)
        width = max(n + len(c) for n, c in zip(lengths, chunks))
    mask = (torch.arange(width).view(1, 1, 1, width) <= places.view(n, 1, -1, 1)).to(device)  # causal, own tokens
    if any(h.images is not None and h.images.both_ways for h in handles):
        from loaders.vision import both_ways_mask

        both = both_ways_mask(handles, places, width)  # Gemma 3: an image's tokens see all of their image
        mask = mask if both is None else mask | both.to(device)
    if pool.attention != "sdpa":  # eager attention adds the mask to its scores
        dtype = next(model.parameters()).dtype
        mask = torch.zeros(mask.shape, dtype=dtype, device=device).masked_fill_(~mask, torch.finfo(dtype).min)
    cache = StepCache(pool, write_blocks.to(device), write_offsets.to(device), table.to(device), n, width)
    extra = {"adapter_names": [h.adapter for h in handles]} if with_adapters else {}
    feed: dict[str, Any] = {"input_ids": input_ids.to(device), "position_ids": places.to(device)}
    if any(h.images is not None for h in handles):
        from loaders.vision import image_feed

        feed = image_feed(model, handles, feed["input_ids"], feed["position_ids"], lengths)
    out = model(**feed, attention_mask=mask, cache=cache, use_cache=True, logits_to_keep=1, **extra)
    for h, chunk in zip(handles, chunks):
        h.length += len(chunk)
        if h.images is not None:
            from loaders.vision import done_with_features

            done_with_features(h)
    return out.logits[:, -1]


def export_kv(pool: KVPool, handle: SequenceCache, start: int, end: int) -> tuple[torch.Tensor, int]:
    """A copy of tokens ``start..end-1`` of one sequence's KV as one tensor [layers, 2 (keys, values), heads,
    tokens, head_dim]; and its size in bytes."""
    if not 0 <= start < end <= handle.length:
        raise ValueError(f"tokens {start}..{end} are not in this sequence's cache ({handle.length} tokens)")
    blocks, offsets = pool.places(handle, start, end)
    block = torch.stack([torch.stack([k[:, blocks, offsets], v[:, blocks, offsets]])
                         for k, v in zip(pool.keys, pool.values)])
    return block, block.numel() * block.element_size()


def import_kv(pool: KVPool, handle: SequenceCache, blocks: Sequence[torch.Tensor], n_tokens: int) -> None:
    """Fill a fresh sequence's cache with the first ``n_tokens`` of ``blocks`` (made by :func:`export_kv`)."""
    if handle.length:
        raise RuntimeError("cached KV can only start an empty sequence")
    kv = torch.cat(list(blocks), dim=3)[:, :, :, :n_tokens]
    if kv.shape[3] != n_tokens:
        raise ValueError(f"the blocks hold {kv.shape[3]} tokens, {n_tokens} were asked for")
    pool.reserve(handle, n_tokens)
    where, offsets = pool.places(handle, 0, n_tokens)
    for index in range(kv.shape[0]):
        keys, values = pool.layer(index, kv[index, 0])
        keys[:, where, offsets] = kv[index, 0].to(keys.dtype)
        values[:, where, offsets] = kv[index, 1].to(values.dtype)
    handle.length = n_tokens


def _group_by_length(items: list[tuple[int, list[int]]], slack: float = 1.3, per_row: int = 8
                     ) -> list[list[tuple[int, list[int]]]]:
    """Split prompt chunks into groups to run as one padded forward each: chunks of similar length go
    together while the padded size stays within ``slack`` of the real tokens (plus ``per_row`` per row)."""
    groups: list[list[tuple[int, list[int]]]] = []
    for item in sorted(items, key=lambda item: len(item[1])):
        group = groups[-1] if groups else None
        if group is not None:
            rows, longest = len(group) + 1, len(item[1])
            real = sum(len(ids) for _, ids in group) + longest
            if rows * longest <= slack * real + per_row * rows:
                group.append(item)
                continue
        groups.append([item])
    return groups


def batched_forward(model: Any, pool: KVPool, handles: Sequence[SequenceCache],
                    new_ids: Sequence[Sequence[int]], with_adapters: bool = False) -> torch.Tensor:
    """Every sequence's next-token logits: the decoding ones (one token each) in one forward, prompt chunks
    grouped with chunks of similar length."""
    decoding = [(i, list(ids)) for i, (h, ids) in enumerate(zip(handles, new_ids)) if len(ids) == 1 and h.length]
    prefilling = [(i, list(ids)) for i, (h, ids) in enumerate(zip(handles, new_ids))
                  if not (len(ids) == 1 and h.length)]
    groups = ([decoding] if decoding else []) + _group_by_length(prefilling)
    if str(pool.device) == "cpu":
        # On a CPU, padding long cached prefixes into one batch costs more memory traffic than the one weight
        # pass it saves (measured: 15 rows of 420 cached + 20 new tokens, 2.5 s together vs 2.2 s one by one);
        # a GPU gains from the single forward whatever the prefix.
        groups = [part for group in groups for part in (
            [[item] for item in group]
            if len(group[0][1]) > 1 and max(handles[i].length for i, _ in group) > 4 * max(len(ids) for _, ids in group)
            else [group])]
    if len(groups) == 1 and [i for i, _ in groups[0]] == list(range(len(handles))):
        return _run(model, pool, handles, new_ids, with_adapters)  # every row in one forward, in order: no copy
    results: dict[int, torch.Tensor] = {}
    for group in groups:
        rows = _run(model, pool, [handles[i] for i, _ in group], [ids for _, ids in group], with_adapters)
        results.update({i: row for (i, _), row in zip(group, rows)})
    return torch.stack([results[i] for i in range(len(handles))])
