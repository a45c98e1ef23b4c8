"""The uniradix side of the side-by-side benchmark: one adapter per model configuration.

`ADAPTERS` maps a configuration name to a builder `(page_size, pool_tokens) -> adapter`.
Only `full` is registered here; SWA and Mamba adapters register themselves under `full+swa`
and `full+mamba` (same pool sizes as `benchmarks/peer/sglang_driver.py`: SWA pool =
full pool, window 128; 512 Mamba state slots) by adding a builder to `ADAPTERS`.
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
from uniradix.cache import UnifiedRadixCache
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


def build_full(page_size: int, pool_tokens: int) -> FullAdapter:
    return FullAdapter(
        build_cache(
            CacheConfig(
                full_tokens=pool_tokens,
                page_size=page_size,
                max_running_requests=1,
                max_context_len=16,
            )
        )
    )


ADAPTERS: dict[str, Callable[[int, int], Any]] = {"full": build_full}
