"""build_cache: pools and cache for the common model shapes from one config."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from uniradix.cache import UnifiedRadixCache
from uniradix.memory.allocator import TokenSlotAllocator
from uniradix.memory.kv_pool import KVPool
from uniradix.memory.mamba_pool import MambaReqPool, MambaSlotAllocator, MambaStatePool
from uniradix.memory.pools import CachePools
from uniradix.memory.req_pool import ReqToTokenPool
from uniradix.memory.swa_allocator import SWASlotAllocator
from uniradix.types import CacheSettings, ComponentType


@dataclass(frozen=True)
class CacheConfig:
    """Sizes of a cache: full only, full+SWA, full+Mamba or full+SWA+Mamba.

    `num_*_layers=0` keeps only the slot accounting (simulation).

    With `sliding_window` set, the model also has SWA layers reading that many tokens: the
    cache gets an SWA component and an SWA pool of `swa_tokens` slots (default
    `full_tokens`; a smaller pool is the point of SWA).

    With `mamba_slots` set, the model also has Mamba layers: `mamba_slots` state slots are
    shared by running requests (1 each, 3 with `mamba_extra_buffer`, which page_size > 1
    needs) and the tree's checkpoints.

    `kv_dtype` and `mamba_dtype` are the element types of the KV and Mamba state tensors
    (an engine verifying against a float64 reference stores float64).
    """

    full_tokens: int = 65536
    page_size: int = 1
    max_running_requests: int = 256
    max_context_len: int = 8192
    eviction_policy: str = "lru"
    aux_eviction_policy: str = "lru"
    is_eagle: bool = False
    device: str = "cpu"
    num_full_layers: int = 0
    num_kv_heads: int = 1
    head_dim: int = 1
    kv_dtype: torch.dtype = torch.float32
    sliding_window: int | None = None
    swa_tokens: int | None = None
    num_swa_layers: int = 0
    mamba_slots: int | None = None
    mamba_extra_buffer: bool = False
    mamba_cache_chunk_size: int = 1
    mamba_max_states_per_path: int | None = None
    num_mamba_layers: int = 0
    mamba_conv_shape: tuple[int, ...] = (1,)
    mamba_temporal_shape: tuple[int, ...] = (1,)
    mamba_dtype: torch.dtype = torch.float32

    def components(self) -> tuple[ComponentType, ...]:
        """FULL first, then the auxiliary components in cascade order (SWA, MAMBA)."""
        types = [ComponentType.FULL]
        if self.sliding_window is not None:
            types.append(ComponentType.SWA)
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
            dtype=self.mamba_dtype,
            device=self.device,
        )
        allocator = MambaSlotAllocator(self.mamba_slots, self.device)
        return MambaReqPool(allocator, states, self.mamba_extra_buffer)


def build_cache(config: CacheConfig | None = None) -> UnifiedRadixCache:
    config = config or CacheConfig()
    ps, device = config.page_size, config.device
    allocator: TokenSlotAllocator | SWASlotAllocator
    swa_kv_pool = None
    if config.sliding_window is None:
        if config.swa_tokens is not None:
            raise ValueError(f"swa_tokens={config.swa_tokens} given without sliding_window")
        allocator = TokenSlotAllocator(config.full_tokens, ps, device)
    else:
        swa_tokens = config.full_tokens if config.swa_tokens is None else config.swa_tokens
        allocator = SWASlotAllocator(config.full_tokens, swa_tokens, ps, device)
        swa_kv_pool = _kv_pool(config, allocator.swa_capacity, config.num_swa_layers)
    pools = CachePools(
        ReqToTokenPool(config.max_running_requests, config.max_context_len, device),
        allocator,
        _kv_pool(config, allocator.capacity, config.num_full_layers),
        mamba=config.mamba_pool(),
        swa_kv_pool=swa_kv_pool,
    )
    settings = CacheSettings(
        page_size=ps,
        is_eagle=config.is_eagle,
        eviction_policy=config.eviction_policy,
        aux_eviction_policy=config.aux_eviction_policy,
        sliding_window=config.sliding_window,
        mamba_cache_chunk_size=config.mamba_cache_chunk_size,
        mamba_max_states_per_path=config.mamba_max_states_per_path,
    )
    return UnifiedRadixCache(pools, settings, config.components())


def _kv_pool(config: CacheConfig, capacity: int, num_layers: int) -> KVPool:
    # Page 0 is padding, so a pool needs one page more than its capacity.
    return KVPool(
        capacity + config.page_size,
        num_layers,
        config.num_kv_heads,
        config.head_dim,
        dtype=config.kv_dtype,
        device=config.device,
    )
