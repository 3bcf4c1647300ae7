"""A left-padded batch KV cache that sequences join and leave between decode steps.

Each sequence is prefilled alone into its own cache (in chunks if the engine
says so). When it first decodes it joins the batch: the shorter side is padded
on the left (the attention mask hides the padding, exactly as transformers'
generate does for a padded batch), and from then on one forward per step
decodes every joined sequence. Leaving drops the row and trims columns that
only padding still uses. Keys carry their rotary positions already, so each
row keeps its own true position ids.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch


class SequenceCache:
    """The per-sequence handle the engine holds (opaque to it)."""

    __slots__ = ("own", "length", "joined", "released", "adapter")

    def __init__(self, own: Any, adapter: str = "__base__"):
        self.own = own  # a DynamicCache while the sequence prefills alone
        self.length = 0  # tokens of this sequence in the cache
        self.joined = False
        self.released = False
        self.adapter = adapter  # the LoRA adapter (peft name) this sequence runs with


def _layers(cache: Any) -> list:
    return list(cache.layers)


def _pad_left(t: torch.Tensor, n: int) -> torch.Tensor:
    if n == 0:
        return t
    pad = t.new_zeros(*t.shape[:-2], n, t.shape[-1])
    return torch.cat([pad, t], dim=-2)


def _pad_mask(mask: torch.Tensor, width: int) -> torch.Tensor:
    pad = mask.new_zeros(mask.shape[0], width - mask.shape[1])
    return torch.cat([pad, mask], dim=1)


class BatchKV:
    def __init__(self, device: str):
        self.device = device
        self.cache: Any = None
        self.rows: list[SequenceCache] = []
        self.mask: torch.Tensor | None = None  # [B, L] long: 1 where a row has a real token

    @property
    def width(self) -> int:
        return 0 if self.mask is None else self.mask.shape[1]

    def drop_released(self) -> None:
        keep = [i for i, h in enumerate(self.rows) if not h.released]
        if len(keep) == len(self.rows):
            return
        self.rows = [self.rows[i] for i in keep]
        if not self.rows:
            self.cache, self.mask = None, None
            return
        index = torch.tensor(keep, dtype=torch.long, device=self.mask.device)
        self.mask = self.mask.index_select(0, index)
        start = int((self.mask.sum(0) > 0).nonzero()[0].item())  # leading columns that are padding in every row
        self.mask = self.mask[:, start:]
        for layer in _layers(self.cache):
            layer.keys = layer.keys.index_select(0, index)[..., start:, :]
            layer.values = layer.values.index_select(0, index)[..., start:, :]

    def join(self, handle: SequenceCache) -> None:
        """Move a prefilled sequence's own cache into the batch."""
        own, n = handle.own, handle.length
        device = _layers(own)[0].keys.device
        row_mask = torch.ones(1, n, dtype=torch.long, device=device)
        if self.cache is None:
            self.cache, self.mask = own, row_mask
        else:
            width = max(self.width, n)
            for mine, theirs in zip(_layers(self.cache), _layers(own)):
                mine.keys = torch.cat([_pad_left(mine.keys, width - self.width), _pad_left(theirs.keys, width - n)])
                mine.values = torch.cat([_pad_left(mine.values, width - self.width),
                                         _pad_left(theirs.values, width - n)])
            self.mask = torch.cat([_pad_mask(self.mask, width), _pad_mask(row_mask, width)])
        handle.own, handle.joined = None, True
        self.rows.append(handle)

    def decode(self, model: Any, tokens: dict[SequenceCache, int], with_adapters: bool = False
               ) -> dict[SequenceCache, torch.Tensor]:
        """One forward for every joined row; each row's next-token logits."""
        device = self.mask.device
        input_ids = torch.tensor([[tokens[h]] for h in self.rows], dtype=torch.long, device=device)
        positions = torch.tensor([[h.length] for h in self.rows], dtype=torch.long, device=device)
        attention = torch.cat([self.mask, torch.ones(len(self.rows), 1, dtype=torch.long, device=device)], dim=1)
        extra = {"adapter_names": [h.adapter for h in self.rows]} if with_adapters else {}
        out = model(input_ids=input_ids, attention_mask=attention, position_ids=positions, cache=self.cache,
                    use_cache=True, logits_to_keep=1, **extra)
        self.mask = attention
        for h in self.rows:
            h.length += 1
        return {h: out.logits[i, -1] for i, h in enumerate(self.rows)}


def export_kv(batch: BatchKV, handle: SequenceCache, start: int, end: int) -> tuple[torch.Tensor, int]:
    """A copy of tokens ``start..end-1`` of one sequence's KV, wherever it is now (its own cache or a batch row),
    as one tensor [layers, 2 (keys, values), heads, tokens, head_dim]; and its size in bytes."""
    if not 0 <= start < end <= handle.length:
        raise ValueError(f"tokens {start}..{end} are not in this sequence's cache ({handle.length} tokens)")
    if handle.joined:
        row, offset = batch.rows.index(handle), batch.width - handle.length  # rows are right-aligned
        layers = _layers(batch.cache)
    else:
        row, offset = 0, 0
        layers = _layers(handle.own)
    a, b = offset + start, offset + end
    block = torch.stack([torch.stack([layer.keys[row, :, a:b], layer.values[row, :, a:b]]) for layer in layers])
    return block, block.numel() * block.element_size()


def import_kv(handle: SequenceCache, blocks: Sequence[torch.Tensor], n_tokens: int) -> None:
    """Fill a fresh sequence's own cache with the first ``n_tokens`` of ``blocks`` (made by :func:`export_kv`)."""
    if handle.length or handle.joined:
        raise RuntimeError("cached KV can only start an empty sequence")
    kv = torch.cat(list(blocks), dim=3)[:, :, :, :n_tokens]
    if kv.shape[3] != n_tokens:
        raise ValueError(f"the blocks hold {kv.shape[3]} tokens, {n_tokens} were asked for")
    for index in range(kv.shape[0]):
        handle.own.update(kv[index, 0].unsqueeze(0), kv[index, 1].unsqueeze(0), index)
    handle.length = n_tokens


PAD_ID = 0  # any valid id: padded inputs are masked out


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


def _set_layer(layer: Any, keys: torch.Tensor, values: torch.Tensor) -> None:
    if not layer.is_initialized:
        layer.lazy_initialization(keys, values)
    layer.keys, layer.values = keys, values


def prefill_together(model: Any, handles: Sequence[SequenceCache], chunks: Sequence[Sequence[int]],
                     new_cache: Any, device: str, with_adapters: bool = False) -> list[torch.Tensor]:
    """Prefill several sequences' prompt chunks in one forward; each keeps its own cache.

    Their caches (L_i tokens each, perhaps none) are left-padded into one batch, the chunks left-padded to
    the longest (the mask hides every pad, each row has its true positions); afterwards each row's real
    columns go back into its own cache, so it holds exactly its tokens as if prefilled alone.
    """
    lengths = [h.length for h in handles]
    width, longest = max(lengths), max(len(c) for c in chunks)
    mask = torch.zeros(len(handles), width + longest, dtype=torch.long)
    input_ids = torch.full((len(handles), longest), PAD_ID, dtype=torch.long)
    positions = torch.zeros(len(handles), longest, dtype=torch.long)
    for r, (length, chunk) in enumerate(zip(lengths, chunks)):
        mask[r, width - length:width] = 1
        mask[r, width + longest - len(chunk):] = 1
        input_ids[r, longest - len(chunk):] = torch.tensor(list(chunk), dtype=torch.long)
        positions[r] = length + (torch.arange(longest) - (longest - len(chunk))).clamp(min=0)
    batch = new_cache()
    if width:
        template = next(_layers(h.own) for h in handles if h.length)
        for index, layer in enumerate(_layers(batch)):
            shape = template[index].keys.shape
            zeros = template[index].keys.new_zeros(1, shape[1], 0, shape[3])
            own = [_layers(h.own)[index] if h.length else None for h in handles]
            keys = torch.cat([_pad_left(o.keys if o else zeros, width - n) for o, n in zip(own, lengths)])
            values = torch.cat([_pad_left(o.values if o else zeros, width - n) for o, n in zip(own, lengths)])
            _set_layer(layer, keys, values)
    extra = {"adapter_names": [h.adapter for h in handles]} if with_adapters else {}
    out = model(input_ids=input_ids.to(device), attention_mask=mask.to(device), position_ids=positions.to(device),
                cache=batch, use_cache=True, logits_to_keep=1, **extra)
    for r, h in enumerate(handles):
        columns = mask[r].nonzero().squeeze(1).to(device)
        for theirs, mine in zip(_layers(h.own), _layers(batch)):
            _set_layer(theirs, mine.keys[r:r + 1].index_select(2, columns), mine.values[r:r + 1].index_select(2, columns))
        h.length += len(chunks[r])
    return [out.logits[r, -1] for r in range(len(handles))]


def batched_forward(model: Any, batch: BatchKV, handles: Sequence[SequenceCache],
                    new_ids: Sequence[Sequence[int]], with_adapters: bool = False, new_cache: Any = None
                    ) -> torch.Tensor:
    """Prefill what is not decoding yet (similar-length chunks together, each into its own cache), then
    decode the rest together in the batch.

    A joined sequence that is not fed in a step has left the batch (as if released),
    so a handle the caller dropped can never hold the batch up.
    """
    fed = set(handles)
    for h in batch.rows:
        if h not in fed:
            h.released = True
    batch.drop_released()
    results: dict[int, torch.Tensor] = {}
    decoding: dict[SequenceCache, int] = {}
    prefilling: list[tuple[int, list[int]]] = []
    for i, (h, ids) in enumerate(zip(handles, new_ids)):
        if len(ids) == 1 and h.length > 0:
            if not h.joined:
                batch.join(h)
            decoding[h] = ids[0]
        else:
            if h.joined:
                raise RuntimeError("a sequence in the batch was fed more than one token")
            prefilling.append((i, list(ids)))
    groups = _group_by_length(prefilling) if new_cache is not None else [[item] for item in prefilling]
    if str(batch.device) == "cpu":
        # On a CPU, padding long cached prefixes into one batch costs more memory traffic than the one weight
        # pass it saves (measured: 15 rows of 420 cached + 20 new tokens, 2.5 s together vs 2.2 s one by one);
        # a GPU gains from the single forward whatever the prefix.
        groups = [part for group in groups for part in (
            [[item] for item in group]
            if max(handles[i].length for i, _ in group) > 4 * max(len(ids) for _, ids in group) else [group])]
    for group in groups:
        if len(group) == 1:
            (i, ids), = group
            h = handles[i]
            input_ids = torch.tensor([ids], dtype=torch.long, device=batch.device)
            extra = {"adapter_names": [h.adapter]} if with_adapters else {}
            out = model(input_ids=input_ids, cache=h.own, use_cache=True, logits_to_keep=1, **extra)
            h.length += len(ids)
            results[i] = out.logits[0, -1]
        else:
            rows = prefill_together(model, [handles[i] for i, _ in group], [ids for _, ids in group], new_cache,
                                    batch.device, with_adapters)
            results.update({i: row for (i, _), row in zip(group, rows)})
    if decoding:
        rows = batch.decode(model, decoding, with_adapters)
        for i, h in enumerate(handles):
            if h in rows:
                results[i] = rows[h]
    return torch.stack([results[i] for i in range(len(handles))])
