"""The uniradix side of the side-by-side benchmark: one adapter per model configuration.

`ADAPTERS` maps a configuration name to a builder `(page_size, pool_tokens) -> adapter`, with
the pool sizes of `benchmarks/peer/sglang_driver.py`: for `full+swa` an SWA pool as large as
the full pool, a window of 128 and SGLang's LRU order of windows; for `full+mamba` 512 state
slots, a checkpoint grid of 64, and the ping-pong extra buffer at page sizes above 1.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from uniradix import (
    CacheConfig,
    EvictParams,
    InsertParams,
    MatchPrefixParams,
    MatchResult,
    RadixKey,
    build_cache,
)
from uniradix.cache.controller import UnifiedRadixCache
from uniradix.types import IncLockRefResult, InsertResult


class FullAdapter:
    """uniradix with full attention only: a match returns its slots, no gather needed."""

    def __init__(self, cache: UnifiedRadixCache) -> None:
        self.cache = cache
        self.page_size = cache.page_size
        self._allocator = cache.pools.kv_allocator

    def match_params(self, prompt: list[int]) -> MatchPrefixParams:
        return MatchPrefixParams(RadixKey(prompt))

    def matched(self, result: MatchResult) -> tuple[int, Any]:
        return result.device_prefix_len, result.last_device_node

    def prefix_indices(self, result: MatchResult, node: Any, num_tokens: int) -> torch.Tensor:
        return result.device_indices

    def evict_params(self, num_tokens: int) -> EvictParams | None:
        short = num_tokens - self._allocator.available_size()
        return EvictParams(num_tokens=short) if short > 0 else None

    def alloc(self, num_tokens: int) -> torch.Tensor | None:
        return self._allocator.alloc(num_tokens)

    def alloc_state(self) -> tuple[bool, torch.Tensor | None]:
        return True, None

    def insert_params(
        self, tokens: list[int], value: torch.Tensor, prev_len: int, state: torch.Tensor | None
    ) -> InsertParams:
        return InsertParams(RadixKey(tokens), value, prev_prefix_len=prev_len)

    def after_insert(self, result: InsertResult, state: torch.Tensor | None) -> None:
        return None

    def dec_params(self, receipt: IncLockRefResult) -> IncLockRefResult:
        return receipt

    def free(self, slots: torch.Tensor) -> None:
        self._allocator.free(slots)

    def cached_tokens(self) -> int:
        return self.cache.total_size()

    def check(self) -> None:
        self.cache.check_invariants({"full": 0})


def _cache(page_size: int, pool_tokens: int, **sizes: Any) -> UnifiedRadixCache:
    return build_cache(
        CacheConfig.of(
            full_tokens=pool_tokens,
            page_size=page_size,
            max_running_requests=1,
            max_context_len=16,
            aux_eviction_policy="lru",  # SGLang's order: the streams must match it exactly
            **sizes,
        )
    )


def build_full(page_size: int, pool_tokens: int) -> FullAdapter:
    return FullAdapter(_cache(page_size, pool_tokens))


SWA_WINDOW = 128
MAMBA_SLOTS = 512


class HybridAdapter(FullAdapter):
    """uniradix with SWA or Mamba next to full attention: evicts every short pool and hands
    each insert a fresh Mamba state slot, freed again when the tree already had one."""

    def __init__(self, cache: UnifiedRadixCache) -> None:
        super().__init__(cache)
        self._mamba = cache.pools.mamba

    def evict_params(self, num_tokens: int) -> EvictParams | None:
        free = self.cache.pools.available()
        params = EvictParams(
            num_tokens=max(0, num_tokens - free["full"]),
            swa_num_tokens=max(0, num_tokens - free.get("swa", num_tokens)),
            mamba_num=int(free.get("mamba", 1) < 1),
        )
        return params if params != EvictParams() else None

    def alloc_state(self) -> tuple[bool, torch.Tensor | None]:
        if self._mamba is None:
            return True, None
        slot = self._mamba.allocator.alloc(1)
        return slot is not None, slot

    def insert_params(
        self, tokens: list[int], value: torch.Tensor, prev_len: int, state: torch.Tensor | None
    ) -> InsertParams:
        return InsertParams(RadixKey(tokens), value, prev_prefix_len=prev_len, mamba_value=state)

    def after_insert(self, result: InsertResult, state: torch.Tensor | None) -> None:
        if state is not None and result.mamba_exist and self._mamba is not None:
            self._mamba.allocator.free(state)

    def check(self) -> None:
        self.cache.check_invariants(dict.fromkeys(self.cache.pools.capacities(), 0))


def build_swa(page_size: int, pool_tokens: int) -> HybridAdapter:
    # SGLang evicts SWA windows in LRU order: the same order here, so both sides run the same
    # algorithm (uniradix's default, `greedy_dual_output`, keeps per-window credits)
    sizes = {"sliding_window": SWA_WINDOW, "swa_tokens": pool_tokens, "swa_eviction_policy": "lru"}
    return HybridAdapter(_cache(page_size, pool_tokens, **sizes))


def build_mamba(page_size: int, pool_tokens: int) -> HybridAdapter:
    sizes = {
        "mamba_slots": MAMBA_SLOTS,
        "mamba_extra_buffer": page_size > 1,
        "mamba_cache_chunk_size": 64,
    }
    return HybridAdapter(_cache(page_size, pool_tokens, **sizes))


ADAPTERS: dict[str, Callable[[int, int], Any]] = {
    "full": build_full,
    "full+swa": build_swa,
    "full+mamba": build_mamba,
}
