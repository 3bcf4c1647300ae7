"""The prefix cache: prompt KV the engine has already computed, kept so it is never prefilled again.

Token ids are cut into fixed-size blocks. Each full block is keyed by a hash
chain: the key of block i hashes the key of block i-1 with block i's tokens,
and block 0 starts from a namespace that names everything else the KV depends
on (the loaded model instance, the adapters and their weights). So a block is
found only by a sequence whose tokens *and* everything before them match, and
a reloaded model or another adapter can never be served a stale block.

Blocks hold an opaque payload made by the loader (``export_kv``); a sequence
that starts with cached blocks gets copies of them (``import_kv``) and
prefills only the rest. The cache is least-recently-used under a byte budget;
blocks a running sequence matched or produced are pinned until it ends, so
they are never evicted under it (the next turn or a regenerate wants them
most). Only the engine's scheduler thread touches a PrefixCache, except
``stats()``, which reads counters.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from loaders.base import ram_bytes

BLOCK_TOKENS = 16
"""Tokens per block: a prompt reuses whole blocks, so at most BLOCK_TOKENS - 1 shared tokens are prefilled again."""


def default_budget_mb(device: str) -> int:
    """The prefix cache's default size: 1/16 of RAM on the CPU (at most 2 GiB), 1/10 of a GPU's memory."""
    if device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            return 0
        index = int(device.partition(":")[2] or 0)
        return int(torch.cuda.get_device_properties(index).total_memory / 10 / 2**20)
    ram = ram_bytes() or 8 * 2**30
    return int(min(2048, ram / 16 / 2**20))


ImageSpan = tuple[int, int, str]
"""An image's tokens in a prompt: (first token, one past its last, the SHA-256 of the image)."""


def chain_keys(namespace: str, ids: Sequence[int], n_blocks: int, keys: list[bytes] | None = None,
               block: int = BLOCK_TOKENS, images: Sequence[ImageSpan] = ()) -> list[bytes]:
    """The hash-chain keys of the first ``n_blocks`` full blocks of ``ids`` (extending ``keys`` if given).

    Image tokens are all the same placeholder id, so a block holding some also hashes each such image's digest
    and where in the image the block starts: two images never share a key, the same image at the same place
    does."""
    keys = list(keys or [])
    parent = keys[-1] if keys else hashlib.blake2b(namespace.encode(), digest_size=16).digest()
    for i in range(len(keys), n_blocks):
        lo, hi = i * block, (i + 1) * block
        h = hashlib.blake2b(parent, digest_size=16)
        h.update(b"".join(int(t).to_bytes(4, "little") for t in ids[lo:hi]))
        for start, end, digest in images:
            if start < hi and end > lo:
                h.update(f"|{digest}:{max(start, lo) - start}".encode())
        parent = h.digest()
        keys.append(parent)
    return keys


@dataclass(frozen=True)
class PrefixCacheStats:
    blocks: int
    bytes: int
    budget_bytes: int
    hit_tokens: int  # prompt tokens served from the cache since the last clear
    prompt_tokens: int  # prompt tokens looked up since the last clear
    block_tokens: int = BLOCK_TOKENS

    @property
    def hit_rate(self) -> float:
        return self.hit_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    def describe(self) -> str:
        return (f"prefix cache {self.bytes / 2**20:.0f}/{self.budget_bytes / 2**20:.0f} MB, "
                f"{self.blocks} blocks of {self.block_tokens} tokens, hit rate {self.hit_rate:.0%}")


class _Block:
    __slots__ = ("payload", "nbytes", "parent", "namespace", "pins", "children")

    def __init__(self, payload: Any, nbytes: int, parent: bytes | None, namespace: str):
        self.payload, self.nbytes, self.parent, self.namespace = payload, nbytes, parent, namespace
        self.pins = 0
        self.children = 0


class PrefixCache:
    def __init__(self, budget_bytes: int, block_tokens: int = BLOCK_TOKENS):
        if budget_bytes < 0:
            raise ValueError(f"the prefix cache budget must be >= 0 bytes, got {budget_bytes}")
        self.budget_bytes, self.block_tokens = budget_bytes, block_tokens
        self._blocks: OrderedDict[bytes, _Block] = OrderedDict()  # least recently used first
        self._bytes = 0
        self._hit_tokens = self._prompt_tokens = 0
        self._generation = 0  # bumped by clear(), so pins taken before it are void
        self._lock = threading.Lock()  # only for stats() from other threads

    def __len__(self) -> int:
        return len(self._blocks)

    # -- reading -----------------------------------------------------------------------
    def match(self, keys: Sequence[bytes]) -> int:
        """How many of ``keys`` (a chain) are cached, counted from the first."""
        n = 0
        while n < len(keys) and keys[n] in self._blocks:
            n += 1
        return n

    def payloads(self, keys: Sequence[bytes]) -> list[Any]:
        """The payloads of a cached chain, marked used (the chain's first block most recently, so
        eviction takes a chain from its end and never orphans the blocks after a missing one)."""
        for key in reversed(keys):
            self._blocks.move_to_end(key)
        return [self._blocks[key].payload for key in keys]

    def count_lookup(self, prompt_tokens: int, hit_tokens: int) -> None:
        with self._lock:
            self._prompt_tokens += prompt_tokens
            self._hit_tokens += hit_tokens

    # -- writing -----------------------------------------------------------------------
    def insert(self, namespace: str, keys: Sequence[bytes], start: int, export: Callable[[int], tuple[Any, int]]
               ) -> int:
        """Add blocks ``start..len(keys)-1`` of a chain whose earlier blocks are cached; ``export(i)`` makes
        block i's (payload, bytes). Stops at the first block that does not fit; returns how many are cached."""
        for i in range(start, len(keys)):
            key = keys[i]
            if key in self._blocks:
                self._blocks.move_to_end(key)
                continue
            parent = keys[i - 1] if i else None
            if parent is not None and parent not in self._blocks:
                return i  # the chain was cut (evicted under us): later blocks could never be found
            payload, nbytes = export(i)
            if parent is not None:
                self._blocks[parent].pins += 1  # making room must not take the block this one follows
            try:
                room = self._make_room(nbytes)
            finally:
                if parent is not None:
                    self._blocks[parent].pins -= 1
            if not room:
                return i
            self._blocks[key] = _Block(payload, nbytes, parent, namespace)
            if parent is not None:
                self._blocks[parent].children += 1
            with self._lock:
                self._bytes += nbytes
        return len(keys)

    def pin(self, keys: Sequence[bytes]) -> tuple[int, list[bytes]]:
        """Keep these blocks (those still cached) from eviction until :meth:`unpin` is given the result."""
        pinned = [k for k in keys if k in self._blocks]
        for key in pinned:
            self._blocks[key].pins += 1
        return self._generation, pinned

    def unpin(self, pins: tuple[int, list[bytes]]) -> None:
        generation, keys = pins
        if generation != self._generation:
            return  # the cache was cleared since: those pins went with it
        for key in keys:
            block = self._blocks.get(key)
            if block is not None and block.pins > 0:
                block.pins -= 1

    def _make_room(self, nbytes: int) -> bool:
        """Evict least-recently-used unpinned blocks that no cached block follows until ``nbytes`` fit."""
        if nbytes > self.budget_bytes:
            return False
        while self._bytes + nbytes > self.budget_bytes:
            victim = next((k for k, b in self._blocks.items() if b.pins == 0 and b.children == 0), None)
            if victim is None:
                return False  # everything left is pinned by running sequences
            self._remove(victim)
        return True

    def _remove(self, key: bytes) -> None:
        block = self._blocks.pop(key)
        if block.parent is not None and block.parent in self._blocks:
            self._blocks[block.parent].children -= 1
        with self._lock:
            self._bytes -= block.nbytes

    def drop(self, predicate: Callable[[str], bool]) -> int:
        """Remove every block whose namespace matches (e.g. an adapter that was detached); returns how many."""
        gone = [k for k, b in self._blocks.items() if predicate(b.namespace)]
        for key in gone:
            block = self._blocks.pop(key)
            with self._lock:
                self._bytes -= block.nbytes
        for block in self._blocks.values():  # recount children of what is left
            block.children = 0
        for block in self._blocks.values():
            if block.parent is not None and block.parent in self._blocks:
                self._blocks[block.parent].children += 1
        return len(gone)

    def clear(self) -> None:
        """Forget every block and the hit counters."""
        self._blocks.clear()
        self._generation += 1
        with self._lock:
            self._bytes = 0
            self._hit_tokens = self._prompt_tokens = 0

    def stats(self) -> PrefixCacheStats:
        with self._lock:
            return PrefixCacheStats(len(self._blocks), self._bytes, self.budget_bytes, self._hit_tokens,
                                    self._prompt_tokens, self.block_tokens)
