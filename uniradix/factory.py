"""build_cache: pools and cache for the common model shapes from one config."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from uniradix.cache.controller import UnifiedRadixCache
from uniradix.cache.disabled import DisabledRadixCache
from uniradix.components.full_host import HostFullComponent
from uniradix.components.mamba_host import HostMambaComponent
from uniradix.components.registry import DEFAULT_REGISTRY, ComponentRegistry, ComponentSpec
from uniradix.components.swa_host import HostSWAComponent
from uniradix.config import CacheConfig
from uniradix.eviction.orders import check_aux_eviction_policy, check_swa_eviction_policy
from uniradix.memory.allocator import TokenSlotAllocator
from uniradix.memory.kv_pool import KVPool
from uniradix.memory.mamba_pool import MambaReqPool, MambaSlotAllocator, MambaStatePool
from uniradix.memory.pools import CachePools, ExtraPool
from uniradix.memory.req_pool import ReqToTokenPool
from uniradix.memory.swa_allocator import SWASlotAllocator
from uniradix.tiers.setup import attach_host_tier, attach_storage_tier
from uniradix.types import CacheSettings, ComponentType


def components(config: CacheConfig) -> tuple[ComponentType, ...]:
    """FULL first, then the auxiliary components in cascade order (SWA, MAMBA)."""
    types = [ComponentType.FULL]
    if config.pools.sliding_window is not None:
        types.append(ComponentType.SWA)
    if config.pools.mamba_slots is not None:
        types.append(ComponentType.MAMBA)
    return tuple(types)


def cache_settings(config: CacheConfig) -> CacheSettings:
    """The settings the components read: each from the knob of the same name, so a knob is
    declared once (in its group); the settings no knob sets keep their defaults. The order
    names are checked (and former names mapped) for every cache, even where the pool is absent."""
    knobs = config.flat()
    knobs["aux_eviction_policy"] = check_aux_eviction_policy(knobs["aux_eviction_policy"])
    knobs["swa_eviction_policy"] = check_swa_eviction_policy(knobs["swa_eviction_policy"])
    names = [f.name for f in dataclasses.fields(CacheSettings)]
    return CacheSettings(**{name: knobs[name] for name in names if name in knobs})


def mamba_pool(config: CacheConfig) -> MambaReqPool | None:
    pools, tensors = config.pools, config.tensors
    if pools.mamba_slots is None:
        return None
    states = MambaStatePool(
        pools.mamba_slots,
        tensors.num_mamba_layers,
        tensors.mamba_conv_shape,
        tensors.mamba_temporal_shape,
        dtype=tensors.mamba_dtype,
        device=pools.device,
    )
    allocator = MambaSlotAllocator(pools.mamba_slots, pools.device)
    return MambaReqPool(allocator, states, pools.mamba_extra_buffer)


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
    p, requests = config.pools, config.requests
    ps, device = p.page_size, p.device
    allocator: TokenSlotAllocator | SWASlotAllocator
    swa_kv_pool = None
    if p.sliding_window is None:
        if p.swa_tokens is not None:
            raise ValueError(f"swa_tokens={p.swa_tokens} given without sliding_window")
        allocator = TokenSlotAllocator(p.full_tokens, ps, device)
    else:
        swa_tokens = p.full_tokens if p.swa_tokens is None else p.swa_tokens
        allocator = SWASlotAllocator(p.full_tokens, swa_tokens, ps, device)
        swa_kv_pool = _kv_pool(config, allocator.swa_capacity, config.tensors.num_swa_layers)
    pools = CachePools(
        ReqToTokenPool(requests.max_running_requests, requests.max_context_len, device),
        allocator,
        _kv_pool(config, allocator.capacity, config.tensors.num_full_layers),
        mamba=mamba_pool(config),
        swa_kv_pool=swa_kv_pool,
        extra=extra_pools,
    )
    settings = cache_settings(config)
    all_components = [*components(config), *extra_specs]
    if config.disable_radix_cache:
        return DisabledRadixCache(pools, settings, all_components, registry=registry)
    if not config.host.enabled:
        if config.storage.enabled:
            raise ValueError("storage_url / storage_backend need a host tier (host_tokens)")
        return UnifiedRadixCache(pools, settings, all_components, registry=registry)
    host_halves = {
        ComponentType.FULL: HostFullComponent,
        ComponentType.SWA: HostSWAComponent,
        ComponentType.MAMBA: HostMambaComponent,
    }
    cache = UnifiedRadixCache(pools, settings, all_components, host_halves, registry=registry)
    attach_host_tier(cache, config)
    attach_storage_tier(cache, config)
    return cache


def _kv_pool(config: CacheConfig, capacity: int, num_layers: int) -> KVPool:
    # Page 0 is padding, so a pool needs one page more than its capacity.
    tensors = config.tensors
    return KVPool(
        capacity + config.pools.page_size,
        num_layers,
        tensors.num_kv_heads,
        tensors.head_dim,
        dtype=tensors.kv_dtype,
        device=config.pools.device,
    )
