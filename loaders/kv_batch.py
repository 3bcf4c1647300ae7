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


def batched_forward(model: Any, batch: BatchKV, handles: Sequence[SequenceCache],
                    new_ids: Sequence[Sequence[int]], with_adapters: bool = False) -> torch.Tensor:
    """Prefill (alone, per sequence) what is not decoding yet, decode the rest together.

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
    for i, (h, ids) in enumerate(zip(handles, new_ids)):
        if len(ids) == 1 and h.length > 0:
            if not h.joined:
                batch.join(h)
            decoding[h] = ids[0]
        else:
            if h.joined:
                raise RuntimeError("a sequence in the batch was fed more than one token")
            input_ids = torch.tensor([list(ids)], dtype=torch.long, device=batch.device)
            extra = {"adapter_names": [h.adapter]} if with_adapters else {}
            out = model(input_ids=input_ids, cache=h.own, use_cache=True, logits_to_keep=1, **extra)
            h.length += len(ids)
            results[i] = out.logits[0, -1]
    if decoding:
        rows = batch.decode(model, decoding, with_adapters)
        for i, h in enumerate(handles):
            if h in rows:
                results[i] = rows[h]
    return torch.stack([results[i] for i in range(len(handles))])
