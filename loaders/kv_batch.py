"""Paged KV for the transformers family: sequences that join and leave between steps, and nothing is re-copied.

Every sequence's keys and values live in fixed-size blocks of one pool per layer ([kv heads, blocks, BLOCK,
head dim]); a sequence holds the ids of its blocks (its block table) and its length. A step runs a group of
sequences in one forward: their new tokens left-padded to the longest, each row at its own true positions. The
model's attention calls ``StepCache.update``, which writes only the new tokens into their blocks and gathers
each row's blocks into the padded keys and values that attention reads (a 4D mask hides the padding and keeps
each row causal), as a DynamicCache's concatenation copied them every step. So a sequence joining or leaving
copies nothing of the others, and memory grows with the tokens held, block by block (the pool doubles when it
runs out, and is given back when no sequence holds any).

Decoding (one token a row) is the hot path, so a step's index tensors are few and made once for every layer:
each new token's flat slot in the pool (one ``index_copy_`` a layer), the block table kept across steps while
the same rows decode and hold the same blocks (``Decoding``, like vLLM's persistent batch), and a lone row whose
blocks are consecutive (as a sequence decoding alone gets them) reads its keys and values as a view of the pool,
with no gather and an all-true mask.
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
        self.flat: list[tuple[torch.Tensor, torch.Tensor]] = []  # per layer, keys and values as [1, kv heads,
        # capacity * BLOCK, head dim] (one row of a batch): a token's slot is block * BLOCK + offset
        self.capacity = 0  # blocks
        self.first_blocks = first_blocks
        self.free: list[int] = []
        self.held = 0  # blocks owned by sequences
        self.decoding: Decoding | None = None  # the last decode step's rows, reused while they go on

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
            self.keys, self.values, self.flat, self.capacity, self.free = [], [], [], 0, []
        self.decoding = None

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
        self.flat = [self._flat(i) for i in range(len(self.keys))]

    def _flat(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        keys, values = self.keys[index], self.values[index]
        return keys.view(1, keys.shape[0], -1, keys.shape[-1]), values.view(1, values.shape[0], -1, values.shape[-1])

    def layer(self, index: int, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Layer ``index``'s keys and values, made on first use with ``like``'s heads, head size and dtype."""
        while len(self.keys) <= index:
            shape = (like.shape[0], self.capacity, BLOCK, like.shape[-1])
            self.keys.append(like.new_zeros(shape))
            self.values.append(like.new_zeros(shape))
            self.flat.append(self._flat(len(self.keys) - 1))
        return self.keys[index], self.values[index]

    def places(self, handle: SequenceCache, start: int, end: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The (block, offset) of tokens ``start..end-1`` of a sequence."""
        positions = torch.arange(start, end)
        table = torch.tensor(handle.blocks, dtype=torch.long)
        return table[positions // BLOCK].to(self.device), (positions % BLOCK).to(self.device)


class StepCache:
    """What the model gets as its cache for one forward of several rows (see the module's docstring)."""

    is_compileable = False

    def __init__(self, pool: KVPool, slots: torch.Tensor, table: torch.Tensor, rows: int, width: int,
                 run: int | None = None):
        self.pool, self.rows, self.width = pool, rows, width  # width: the longest row's tokens after this step
        self.slots = slots  # [rows * new tokens]: where each new token goes, as block * BLOCK + offset
        self.blocks = table.shape[1]
        self.table = table.reshape(-1)  # [rows * blocks a row]
        self.run = run  # the first slot of a lone row whose blocks are consecutive: its tokens are read as a view

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args: Any, **kwargs: Any
               ) -> tuple[torch.Tensor, torch.Tensor]:
        heads, dim = key_states.shape[1], key_states.shape[-1]
        pool = self.pool
        if layer_idx >= len(pool.keys):
            pool.layer(layer_idx, key_states.select(0, 0))
        flat_keys, flat_values = pool.flat[layer_idx]
        if self.rows > 1:  # [rows, heads, new, dim] -> [1, heads, rows * new, dim], as the slots are laid out
            key_states = key_states.transpose(0, 1).reshape(1, heads, -1, dim)
            value_states = value_states.transpose(0, 1).reshape(1, heads, -1, dim)
        flat_keys.index_copy_(2, self.slots, key_states)
        flat_values.index_copy_(2, self.slots, value_states)
        if self.run is not None:  # the row's tokens are one stretch of slots
            return flat_keys.narrow(2, self.run, self.width), flat_values.narrow(2, self.run, self.width)
        keys, values = (t.index_select(1, self.table).view(heads, self.rows, -1, dim).transpose(0, 1)
                        .narrow(2, 0, self.width) for t in (pool.keys[layer_idx], pool.values[layer_idx]))
        return keys, values

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.width


class Decoding:
    """The rows of the last decode step and their block table on the device: the next step reuses the table
    while the same rows decode holding the same blocks (a row only gains blocks, at its end)."""

    __slots__ = ("handles", "counts", "table", "run", "ones")

    def __init__(self, handles: Sequence[SequenceCache], device: str):
        self.handles = tuple(handles)
        self.counts = [len(h.blocks) for h in handles]
        blocks = max(self.counts)
        self.table = torch.tensor([h.blocks + [TRASH] * (blocks - len(h.blocks)) for h in handles],
                                  dtype=torch.long).to(device)
        first = handles[0].blocks
        lone_run = len(handles) == 1 and first == list(range(first[0], first[0] + len(first)))
        self.run = first[0] * BLOCK if lone_run else None
        self.ones = torch.ones((1, 1, 1, BLOCK * len(first)), dtype=torch.bool, device=device)  # a lone row's mask

    def fits(self, handles: Sequence[SequenceCache]) -> bool:
        return tuple(handles) == self.handles and [len(h.blocks) for h in handles] == self.counts


def _additive(model: Any, pool: KVPool, mask: torch.Tensor) -> torch.Tensor:
    """The boolean mask as eager attention wants it (added to its scores); sdpa takes it as it is."""
    if pool.attention == "sdpa":
        return mask
    dtype = next(model.parameters()).dtype
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(~mask, torch.finfo(dtype).min)


def _decode(model: Any, pool: KVPool, handles: Sequence[SequenceCache], chunks: Sequence[Sequence[int]],
            lengths: list[int], with_adapters: bool) -> torch.Tensor:
    """One token a row, no images: each token's place is its row's length, nothing is padded; a few index
    tensors, the block table reused from the last step while the rows and their blocks are the same."""
    device, n = pool.device, len(handles)
    state = pool.decoding
    if state is None or not state.fits(handles):
        state = pool.decoding = Decoding(handles, device)
    width = max(lengths) + 1
    written = [h.blocks[k // BLOCK] * BLOCK + k % BLOCK for h, k in zip(handles, lengths)]
    step = torch.tensor([[c[0] for c in chunks], lengths, written], dtype=torch.long).to(device)  # one copy
    input_ids, places, slots = step.view(3, n, 1).unbind(0)
    if n == 1:  # a lone row sees all of its tokens
        mask = state.ones.narrow(3, 0, width)  # (it holds at most its blocks' tokens)
    else:  # each row sees its own tokens
        mask = torch.arange(width, device=device).view(1, 1, 1, width) <= places.view(n, 1, 1, 1)
    cache = StepCache(pool, slots.view(n), state.table, n, width, state.run)
    extra = {"adapter_names": [h.adapter for h in handles]} if with_adapters else {}
    out = model(input_ids=input_ids, position_ids=places, attention_mask=_additive(model, pool, mask), cache=cache,
                use_cache=True, logits_to_keep=1, **extra)
    for h in handles:
        h.length += 1
    return out.logits[:, -1]


def _run(model: Any, pool: KVPool, handles: Sequence[SequenceCache], chunks: Sequence[Sequence[int]],
         with_adapters: bool) -> torch.Tensor:
    """One forward for ``handles``, each fed its chunk (left-padded to the longest); each row's last logits."""
    device = pool.device
    lengths = [h.length for h in handles]
    n = len(handles)
    longest = max(len(c) for c in chunks)
    for h, chunk in zip(handles, chunks):
        pool.reserve(h, h.length + len(chunk))
    if longest == 1 and all(h.images is None for h in handles):
        return _decode(model, pool, handles, chunks, lengths, with_adapters)
    blocks = max(len(h.blocks) for h in handles)
    table = torch.tensor([h.blocks + [TRASH] * (blocks - len(h.blocks)) for h in handles], dtype=torch.long)
    input_ids = torch.tensor([[PAD_ID] * (longest - len(c)) + list(c) for c in chunks], dtype=torch.long)
    fed = torch.tensor([len(c) for c in chunks]).unsqueeze(1)
    t = torch.arange(longest).unsqueeze(0)
    real = t >= longest - fed  # [rows, new]: False where a row is padded
    places = (torch.tensor(lengths).unsqueeze(1) + t - (longest - fed)).clamp(min=0)  # each token's place
    slots = torch.where(real, table.gather(1, places // BLOCK) * BLOCK + places % BLOCK, TRASH * BLOCK).reshape(-1)
    width = max(n + len(c) for n, c in zip(lengths, chunks))
    mask = (torch.arange(width).view(1, 1, 1, width) <= places.view(n, 1, -1, 1)).to(device)  # causal, own tokens
    if any(h.images is not None and h.images.both_ways for h in handles):
        from loaders.vision import both_ways_mask

        both = both_ways_mask(handles, places, width)  # Gemma 3: an image's tokens see all of their image
        mask = mask if both is None else mask | both.to(device)
    cache = StepCache(pool, slots.to(device), table.to(device), n, width)
    extra = {"adapter_names": [h.adapter for h in handles]} if with_adapters else {}
    feed: dict[str, Any] = {"input_ids": input_ids.to(device), "position_ids": places.to(device)}
    if any(h.images is not None for h in handles):
        from loaders.vision import image_feed

        feed = image_feed(model, handles, feed["input_ids"], feed["position_ids"], lengths)
    out = model(**feed, attention_mask=_additive(model, pool, mask), cache=cache, use_cache=True, logits_to_keep=1,
                **extra)
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
    if all(len(ids) == 1 and h.length for h, ids in zip(handles, new_ids)):
        return _run(model, pool, handles, new_ids, with_adapters)  # every row decodes: one forward, in order
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
