"""build_cache: pools and cache for the common model shapes from one config."""

from __future__ import annotations

from dataclasses import dataclass

from uniradix.cache import UnifiedRadixCache
from uniradix.memory.allocator import TokenSlotAllocator
from uniradix.memory.kv_pool import KVPool
from uniradix.memory.pools import CachePools
from uniradix.memory.req_pool import ReqToTokenPool
from uniradix.types import CacheSettings, ComponentType


@dataclass(frozen=True)
class CacheConfig:
    """Sizes of a cache. `num_full_layers=0` keeps only the slot accounting (simulation)."""

    full_tokens: int = 65536
    page_size: int = 1
    max_running_requests: int = 256
    max_context_len: int = 8192
    eviction_policy: str = "lru"
    is_eagle: bool = False
    device: str = "cpu"
    num_full_layers: int = 0
    num_kv_heads: int = 1
    head_dim: int = 1

    def components(self) -> tuple[ComponentType, ...]:
        return (ComponentType.FULL,)


def build_cache(config: CacheConfig | None = None) -> UnifiedRadixCache:
    config = config or CacheConfig()
    allocator = TokenSlotAllocator(config.full_tokens, config.page_size, config.device)
    kv_pool = KVPool(
        allocator.capacity + config.page_size,
        config.num_full_layers,
        config.num_kv_heads,
        config.head_dim,
        device=config.device,
    )
    pools = CachePools(
        ReqToTokenPool(config.max_running_requests, config.max_context_len, config.device),
        allocator,
        kv_pool,
    )
    settings = CacheSettings(
        page_size=config.page_size,
        is_eagle=config.is_eagle,
        eviction_policy=config.eviction_policy,
    )
    return UnifiedRadixCache(pools, settings, config.components())
