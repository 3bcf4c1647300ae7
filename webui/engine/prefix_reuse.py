"""How the engine reuses prompt KV already computed: one strategy per loaded model.

A model's ``capabilities.prefix_cache`` says which strategy fits it, and the
engine picks it once, when the model is set (:func:`prefix_reuse_for`):

- :class:`BlockReuse` ("blocks"): the engine keeps copies of full blocks in its
  :class:`PrefixCache` (``export_kv``) and starts a sequence from them
  (``import_kv``);
- :class:`NativeReuse` ("native"): the backend keeps what sequences read in its
  own cache (llama.cpp's cells); the engine only asks how much of a prompt it
  holds (``prefix_match``) and has it start a sequence from there
  (``reuse_prefix``);
- :class:`NoReuse` (""; or the cache is off): every prompt is prefilled in full.

Each sequence gets its own :class:`PrefixTrack` from the strategy (its blocks'
hash-chain keys, how many are stored, the pins that keep them); the engine
only schedules: it asks the strategy, at admission, how many prompt blocks are
computed somewhere and whether to wait for a sequence prefilling more of them,
then has it restore them; after each step it lets the strategy keep what was
computed, and when the sequence leaves, release it. Only the scheduler thread
calls a strategy, except ``stats()``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from loaders.base import LoadedModel, SupportsBlockPrefix, SupportsNativePrefix, common_prefix
from webui.engine.prefix_cache import (BLOCK_TOKENS, ImageSpan, PrefixCache, PrefixCacheStats, chain_keys,
                                       default_budget_mb)

WAIT_BLOCKS = 4
"""A sequence waits for another's prefill only to gain this many prefix blocks or more; a few tokens are cheaper
to prefill again than a step of waiting."""


@dataclass(eq=False)
class PrefixTrack:
    """One sequence's prefix state, kept by the strategy that made it."""

    namespace: str  # what its KV depends on besides its tokens (model instance, adapters): keys never mix across
    keys: list[bytes] = field(default_factory=list)  # hash-chain keys of its full blocks (computed at admission)
    stored: int = 0  # blocks of it the cache holds (or, "native", the backend's cells hold)
    full: bool = False  # the cache had no room for its next block: stop offering
    pins: list[tuple[int, list[bytes]]] = field(default_factory=list)  # what keeps its blocks from eviction
    images: tuple[ImageSpan, ...] = ()  # its prompt's images: their blocks' keys hash the images' digests


class PrefixReuse:
    """The strategy interface, and what every strategy shares: the hit counters and the wait rule."""

    keeps_stats = True  # whether stats() reports anything

    def __init__(self, block_tokens: int = BLOCK_TOKENS, budget_bytes: int = 0):
        self.block_tokens = block_tokens
        self.cache = PrefixCache(budget_bytes, block_tokens)  # blocks ("blocks" only) and the hit counters

    def track(self, loras: tuple[tuple[str, float], ...] = (), images: Sequence[ImageSpan] = ()) -> PrefixTrack:
        """A new sequence's state, for the (name, weight) adapters it runs with and its prompt's images."""
        return PrefixTrack("", images=tuple(images))

    def found(self, track: PrefixTrack, prompt: Sequence[int]) -> int:
        """How many full blocks of ``prompt`` (less its last token, which is always fed) are computed already."""
        return 0

    def restore(self, track: PrefixTrack, cache: Any, prompt: Sequence[int], hit: int) -> int:
        """Start the empty sequence ``cache`` with what is computed of ``prompt`` (``hit``: :meth:`found`);
        returns how many prompt tokens it got."""
        return 0

    def keep(self, track: PrefixTrack, cache: Any, ids: Sequence[int], kv_tokens: int) -> None:
        """After a step: the first ``kv_tokens`` of ``ids`` (prompt and reply) are in ``cache``; keep what is worth
        keeping so the next chat turn or a regenerate finds it."""

    def release(self, track: PrefixTrack) -> None:
        """The sequence left: what it pinned may be evicted again."""

    def worth_waiting_for(self, track: PrefixTrack, hit: int, other: PrefixTrack) -> bool:
        """Whether a sequence that found ``hit`` blocks should wait for ``other``, which is prefilling, to compute
        (and keep) at least WAIT_BLOCKS more blocks of its prompt: computed once, then shared (n > 1, a grid)."""
        if other.namespace != track.namespace or other.full:
            return False
        shared = common_prefix(track.keys, other.keys)
        return shared - hit >= WAIT_BLOCKS and other.stored < shared

    def clear(self) -> None:
        """Forget everything kept (the next requests prefill in full) and the hit counters."""
        self.cache.clear()

    def drop_stale(self) -> int:
        """Free what belongs to adapters no longer attached; returns how many blocks."""
        return 0

    def stats(self) -> PrefixCacheStats | None:
        return self.cache.stats() if self.keeps_stats else None

    def _keys(self, track: PrefixTrack, prompt: Sequence[int]) -> None:
        if not track.keys:
            block = self.block_tokens
            track.keys = chain_keys(track.namespace, prompt, len(prompt) // block, block=block, images=track.images)


class NoReuse(PrefixReuse):
    """Every prompt is prefilled in full (the model cannot reuse KV, or the cache is off)."""

    keeps_stats = False

    def worth_waiting_for(self, track: PrefixTrack, hit: int, other: PrefixTrack) -> bool:
        return False


class BlockReuse(PrefixReuse):
    """The engine keeps copies of full blocks of KV in its PrefixCache, under a byte budget."""

    def __init__(self, model: SupportsBlockPrefix, budget_bytes: int, block_tokens: int = BLOCK_TOKENS):
        super().__init__(block_tokens, budget_bytes)
        self.model = model

    def track(self, loras: tuple[tuple[str, float], ...] = (), images: Sequence[ImageSpan] = ()) -> PrefixTrack:
        return PrefixTrack(self.model.prefix_namespace(loras), images=tuple(images))

    def found(self, track: PrefixTrack, prompt: Sequence[int]) -> int:
        self._keys(track, prompt)
        return self.cache.match(track.keys)

    def restore(self, track: PrefixTrack, cache: Any, prompt: Sequence[int], hit: int) -> int:
        block = self.block_tokens
        n = min(hit * block, len(prompt) - 1)
        if n > 0:
            self.model.import_kv(cache, self.cache.payloads(track.keys[:-(-n // block)]), n)
        track.pins.append(self.cache.pin(track.keys[:hit]))
        self.cache.count_lookup(len(prompt), n)
        track.stored = max(hit, n // block)
        return n

    def keep(self, track: PrefixTrack, cache: Any, ids: Sequence[int], kv_tokens: int) -> None:
        block = self.block_tokens
        full = kv_tokens // block
        if track.full or full <= track.stored:
            return
        track.keys = chain_keys(track.namespace, ids, full, track.keys, block, track.images)
        keys = track.keys[:full]
        model = self.model
        stored = self.cache.insert(track.namespace, keys, track.stored,
                                   lambda i: model.export_kv(cache, i * block, (i + 1) * block))
        track.pins.append(self.cache.pin(keys[track.stored:stored]))
        track.full = stored < full
        track.stored = stored

    def release(self, track: PrefixTrack) -> None:
        for pins in track.pins:
            self.cache.unpin(pins)
        track.pins = []

    def drop_stale(self) -> int:
        return self.cache.drop(lambda namespace: not self.model.prefix_namespace_live(namespace))


class NativeReuse(PrefixReuse):
    """The backend keeps its own cells; the engine asks it for matches and notes progress (for the wait rule).
    Its PrefixCache holds no blocks (budget 0): only the hit counters."""

    def __init__(self, model: SupportsNativePrefix, block_tokens: int = BLOCK_TOKENS):
        super().__init__(block_tokens, 0)
        self.model = model

    def found(self, track: PrefixTrack, prompt: Sequence[int]) -> int:
        self._keys(track, prompt)  # one backend cache: every sequence shares the namespace ""
        if track.images:  # its cells are matched by token ids, which do not tell images apart
            return 0
        return self.model.prefix_match(prompt[:-1]) // self.block_tokens

    def restore(self, track: PrefixTrack, cache: Any, prompt: Sequence[int], hit: int) -> int:
        n = 0 if track.images else self.model.reuse_prefix(cache, prompt[:-1])
        self.cache.count_lookup(len(prompt), n)
        track.stored = max(hit, n // self.block_tokens)
        return n

    def keep(self, track: PrefixTrack, cache: Any, ids: Sequence[int], kv_tokens: int) -> None:
        track.stored = max(track.stored, kv_tokens // self.block_tokens)  # the backend keeps its cells

    def clear(self) -> None:
        super().clear()
        self.model.drop_prefixes()


def _broken(model: LoadedModel, protocol: str) -> TypeError:
    """A loader whose capabilities promise a prefix protocol its model does not provide."""
    return TypeError(f"the {model.loader} loader says prefix_cache={model.capabilities.prefix_cache!r}, but its "
                     f"model lacks part of {protocol} (loaders/base.py)")


def prefix_reuse_for(model: LoadedModel | None, cache_mb: float | None,
                     block_tokens: int = BLOCK_TOKENS) -> PrefixReuse:
    """The strategy for ``model``, from its capabilities (``cache_mb``: the engine's budget for kept blocks; None:
    a default for the model's device; 0: no reuse at all). The one place a prefix mode is told apart."""
    if model is None or cache_mb == 0:
        return NoReuse(block_tokens)
    mode = model.capabilities.prefix_cache
    if mode == "blocks":
        if not isinstance(model, SupportsBlockPrefix):
            raise _broken(model, "SupportsBlockPrefix")
        budget = default_budget_mb(model.device) if cache_mb is None else cache_mb
        return BlockReuse(model, int(budget * 2**20), block_tokens)
    if mode == "native":
        if not isinstance(model, SupportsNativePrefix):
            raise _broken(model, "SupportsNativePrefix")
        return NativeReuse(model, block_tokens)
    return NoReuse(block_tokens)
