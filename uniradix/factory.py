"""build_cache: pools and cache for the common model shapes from one config."""

from __future__ import annotations

from dataclasses import dataclass

from uniradix.cache import UnifiedRadixCache
from uniradix.memory.allocator import TokenSlotAllocator
from uniradix.memory.kv_pool import KVPool
from uniradix.memory.mamba_pool import MambaReqPool, MambaSlotAllocator, MambaStatePool
from uniradix.memory.pools import CachePools
from uniradix.memory.req_pool import ReqToTokenPool
from uniradix.types import CacheSettings, ComponentType


@dataclass(frozen=True)
class CacheConfig:
    """Sizes of a cache. `num_full_layers=0` keeps only the slot accounting (simulation).

    Mamba (full+Mamba, and full+SWA+Mamba once SWA is set too): `mamba_slots` state slots
    shared by running requests (1 each, 3 with `mamba_extra_buffer`, which page_size > 1
    needs) and the tree's checkpoints; `num_mamba_layers=0` keeps only the slot accounting.
    """

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
    mamba_slots: int | None = None
    mamba_extra_buffer: bool = False
    mamba_cache_chunk_size: int = 1
    mamba_max_states_per_path: int | None = None
    num_mamba_layers: int = 0
    mamba_conv_shape: tuple[int, ...] = (1,)
    mamba_temporal_shape: tuple[int, ...] = (1,)

    def components(self) -> tuple[ComponentType, ...]:
        """FULL first, then the auxiliary components in cascade order (SWA, MAMBA)."""
        types = [ComponentType.FULL]
        if self.mamba_slots is not None:
            types.append(ComponentType.MAMBA)
        return tuple(types)

    def mamba_pool(self) -> MambaReqPool | None:
        if self.mamba_slots is None:
            return None
        states = MambaStatePool(
            self.mamba_slots,
            self.num_mamba_layers,
            self.mamba_conv_shape,
            self.mamba_temporal_shape,
            device=self.device,
        )
        allocator = MambaSlotAllocator(self.mamba_slots, self.device)
        return MambaReqPool(allocator, states, self.mamba_extra_buffer)


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
        config.mamba_pool(),
    )
    settings = CacheSettings(
        page_size=config.page_size,
        is_eagle=config.is_eagle,
        eviction_policy=config.eviction_policy,
        mamba_cache_chunk_size=config.mamba_cache_chunk_size,
        mamba_max_states_per_path=config.mamba_max_states_per_path,
    )
    return UnifiedRadixCache(pools, settings, config.components())
