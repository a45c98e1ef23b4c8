"""Building a cache's host tier from its `CacheConfig`: host slot pools, host tensors and
copiers when the model has layers, the transfer engine, and the controller."""

from __future__ import annotations

from uniradix.config import CacheConfig
from uniradix.memory.host_kv import LAYOUTS, HostKVPool, HostMambaStates
from uniradix.memory.host_pools import HostPools, aux_host_sizes, host_capacity
from uniradix.memory.swa_allocator import SWASlotAllocator
from uniradix.storage.backend import open_backend
from uniradix.tiers.async_engine import CudaTransferEngine, ThreadTransferEngine
from uniradix.tiers.controller import CacheWithHostTier, HostTier
from uniradix.tiers.copiers import KVCopier, MambaCopier
from uniradix.tiers.storage_tier import StorageTier
from uniradix.tiers.transfer import Copier, SyncTransferEngine, TransferEngine

ENGINES = ("sync", "thread", "cuda")


def attach_host_tier(cache: CacheWithHostTier, config: CacheConfig) -> HostTier:
    """Gives `cache` (built with the host halves of its components) the host tier `config`
    describes. The SWA and Mamba host pools, when the model has them, are sized in the same
    proportion to their device pools as the full KV host pool.

    `host_engine`: "sync" copies at submit (tests, replay), "thread" on a worker thread,
    "cuda" on a CUDA stream; host tensors exist only when the device pool has layers."""
    host, tensors = config.host, config.tensors
    if host.host_layout not in LAYOUTS:
        raise ValueError(f"host_layout must be one of {LAYOUTS}, got {host.host_layout!r}")
    if host.host_engine not in ENGINES:
        raise ValueError(f"host_engine must be one of {ENGINES}, got {host.host_engine!r}")
    ps = config.pools.page_size
    capacity = host_capacity(
        cache.pools.kv_allocator.capacity, host.host_tokens, host.hicache_ratio
    )
    capacity -= capacity % ps
    if capacity < ps:
        raise ValueError(f"host tier of {capacity} tokens is less than one page ({ps})")
    copiers: dict[str, Copier] = {}
    pin = cache.device.type == "cuda"
    host_kv = None
    kv_pool = cache.pools.kv_pool
    if kv_pool is not None and kv_pool.num_layers:
        host_kv = HostKVPool(
            capacity + ps,  # page 0 is padding, as on the device
            kv_pool.num_layers,
            tensors.num_kv_heads,
            tensors.head_dim,
            tensors.kv_dtype,
            ps,
            host.host_layout,
            pin_memory=pin,
        )
        copiers["full"] = KVCopier(kv_pool, host_kv)
    # The auxiliary host pools keep the device pools' proportions: host full / device full.
    ratio = capacity / cache.pools.kv_allocator.capacity
    allocator = cache.pools.kv_allocator
    mamba = cache.pools.mamba
    swa_tokens, mamba_slots = aux_host_sizes(
        ratio,
        allocator.swa_capacity if isinstance(allocator, SWASlotAllocator) else None,
        None if mamba is None else mamba.allocator.capacity,
        ps,
    )
    if swa_tokens is not None:
        swa_pool = cache.pools.swa_kv_pool
        if swa_pool is not None and swa_pool.num_layers:
            host_swa = HostKVPool.like(swa_pool, swa_tokens + ps, ps, host.host_layout)
            copiers["swa"] = KVCopier(swa_pool, host_swa)
    if mamba is not None and mamba_slots is not None and mamba.states.num_layers:
        copiers["mamba"] = MambaCopier(
            mamba.states, HostMambaStates.like(mamba.states, mamba_slots)
        )
    engine: TransferEngine
    if host.host_engine == "sync":
        engine = SyncTransferEngine(copiers)
    elif host.host_engine == "thread":
        engine = ThreadTransferEngine(copiers)
    else:
        engine = CudaTransferEngine(copiers, config.pools.device)
    tier = HostTier(
        cache,
        HostPools(capacity, ps, swa_tokens, mamba_slots),
        engine,
        host.write_policy,
        load_back_threshold=host.load_back_threshold,
    )
    tier.host_kv = host_kv
    return tier


def attach_storage_tier(cache: CacheWithHostTier, config: CacheConfig) -> StorageTier | None:
    """Gives `cache`'s host tier the L3 store `config` names (`storage_backend`, shared by
    the caller, or one opened from `storage_url`); None when neither is set."""
    storage = config.storage
    if not storage.enabled:
        return None
    tier = cache.host_tier
    if not isinstance(tier, HostTier):
        raise ValueError("storage_url / storage_backend need a host tier (host_tokens)")
    backend = storage.storage_backend
    if backend is None:
        assert storage.storage_url is not None
        backend = open_backend(storage.storage_url)
    # The auxiliary pools' host bytes live with their copiers (none on a simulation cache).
    copiers = getattr(tier.engine, "copiers", {})
    swa_copier, mamba_copier = copiers.get("swa"), copiers.get("mamba")
    return StorageTier(
        tier,
        backend,
        storage.model_fingerprint,
        storage.prefetch_threshold,
        prefetch_policy=storage.prefetch_policy,
        host_kv=tier.host_kv,
        host_swa=swa_copier.host_pool if isinstance(swa_copier, KVCopier) else None,
        host_states=mamba_copier.host_states if isinstance(mamba_copier, MambaCopier) else None,
    )
