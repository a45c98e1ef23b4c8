"""build_cache: pools and cache for the common model shapes from one config."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from uniradix.cache.controller import UnifiedRadixCache
from uniradix.cache.disabled import DisabledRadixCache
from uniradix.components.full_host import HostFullComponent
from uniradix.components.mamba_host import HostMambaComponent
from uniradix.components.registry import DEFAULT_REGISTRY, ComponentRegistry, ComponentSpec
from uniradix.components.swa_host import HostSWAComponent
from uniradix.memory.allocator import TokenSlotAllocator
from uniradix.memory.kv_pool import KVPool
from uniradix.memory.mamba_pool import MambaReqPool, MambaSlotAllocator, MambaStatePool
from uniradix.memory.pools import CachePools, ExtraPool
from uniradix.memory.req_pool import ReqToTokenPool
from uniradix.memory.swa_allocator import SWASlotAllocator
from uniradix.storage.backend import StorageBackend
from uniradix.tiers.setup import attach_host_tier, attach_storage_tier
from uniradix.types import (
    DEFAULT_AUX_EVICTION_POLICY,
    DEFAULT_SWA_EVICTION_POLICY,
    CacheSettings,
    ComponentType,
)


@dataclass(frozen=True)
class CacheConfig:
    """Sizes of a cache: full only, full+SWA, full+Mamba or full+SWA+Mamba.

    `num_*_layers=0` keeps only the slot accounting (simulation).

    With `sliding_window` set, the model also has SWA layers reading that many tokens: the
    cache gets an SWA component and an SWA pool of `swa_tokens` slots (default
    `full_tokens`; a smaller pool is the point of SWA).

    With `mamba_slots` set, the model also has Mamba layers: `mamba_slots` state slots are
    shared by running requests (1 each; with `mamba_extra_buffer`, which page_size > 1
    needs, up to 2 more while a tracked state waits to be published) and the tree's
    checkpoints.

    `kv_dtype` and `mamba_dtype` are the element types of the KV and Mamba state tensors
    (an engine verifying against a float64 reference stores float64).
    """

    full_tokens: int = 65536
    page_size: int = 1
    max_running_requests: int = 256
    max_context_len: int = 8192
    eviction_policy: str = "lru"
    aux_eviction_policy: str = DEFAULT_AUX_EVICTION_POLICY
    swa_eviction_policy: str = DEFAULT_SWA_EVICTION_POLICY
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
    host_tokens: int | None = None
    hicache_ratio: float | None = None
    write_policy: str = "write_through"
    load_back_threshold: int = 1
    host_layout: str = "layer_first"
    host_engine: str = "sync"
    storage_url: str | None = (
        None  # an L3 store under the host tier (`uniradix.tiers.storage_tier`)
    )
    storage_backend: StorageBackend | None = None  # an open backend to share (wins over the URL)
    model_fingerprint: str = "uniradix-sim"  # model id + revision: isolates stored pages
    prefetch_threshold: int = 256
    # L3 prefetch stop policy: "best_effort", "wait_complete" or "timeout" (`storage_tier`)
    prefetch_policy: str = "best_effort"
    enable_session_cache: bool = False
    disable_radix_cache: bool = False  # a cache that matches nothing (`uniradix.cache.disabled`)

    @property
    def has_host_tier(self) -> bool:
        """With `host_tokens` (or `hicache_ratio` x `full_tokens`) the cache gets an L2 host
        tier (`uniradix.tiers`) driven by `write_policy`; load-backs shorter than
        `load_back_threshold` tokens are skipped. With model layers the host holds real
        tensors in `host_layout` ("layer_first" or "page_first"), moved by `host_engine`
        ("sync", "thread" or "cuda"; see `uniradix.tiers.setup`)."""
        return self.host_tokens is not None or self.hicache_ratio is not None

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


def build_cache(
    config: CacheConfig | None = None,
    extra_components: Sequence[tuple[ComponentSpec, ExtraPool]] = (),
    registry: ComponentRegistry | None = None,
) -> UnifiedRadixCache:
    """The cache for `config`. `extra_components` adds components from outside the package,
    each with its own pool: (a registered name or a class, its pool). They come after the
    built-in components, so their insert hooks see the nodes SWA may have split."""
    config = config or CacheConfig()
    registry = registry or DEFAULT_REGISTRY
    extra_specs = [spec for spec, _ in extra_components]
    extra_pools = {}
    for spec, pool in extra_components:
        name = registry.resolve(spec).component_type
        if not isinstance(name, str):
            raise ValueError(f"extra component {spec!r} is a built-in type: configure it instead")
        extra_pools[name] = pool
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
        extra=extra_pools,
    )
    settings = CacheSettings(
        page_size=ps,
        is_eagle=config.is_eagle,
        eviction_policy=config.eviction_policy,
        aux_eviction_policy=config.aux_eviction_policy,
        swa_eviction_policy=config.swa_eviction_policy,
        sliding_window=config.sliding_window,
        mamba_cache_chunk_size=config.mamba_cache_chunk_size,
        mamba_max_states_per_path=config.mamba_max_states_per_path,
        enable_session_cache=config.enable_session_cache,
    )
    components = [*config.components(), *extra_specs]
    if config.disable_radix_cache:
        return DisabledRadixCache(pools, settings, components, registry=registry)
    if not config.has_host_tier:
        if config.storage_url is not None or config.storage_backend is not None:
            raise ValueError("storage_url / storage_backend need a host tier (host_tokens)")
        return UnifiedRadixCache(pools, settings, components, registry=registry)
    host_halves = {
        ComponentType.FULL: HostFullComponent,
        ComponentType.SWA: HostSWAComponent,
        ComponentType.MAMBA: HostMambaComponent,
    }
    cache = UnifiedRadixCache(pools, settings, components, host_halves, registry=registry)
    attach_host_tier(cache, config)
    attach_storage_tier(cache, config)
    return cache


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
