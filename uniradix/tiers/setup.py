"""Building a cache's host tier from its `CacheConfig`: host slot pools, host tensors and
copiers when the model has layers, the transfer engine, and the controller."""

from __future__ import annotations

from typing import TYPE_CHECKING

from uniradix.memory.host_kv import LAYOUTS, HostKVPool
from uniradix.memory.host_pools import HostPools, host_capacity
from uniradix.storage.backend import open_backend
from uniradix.tiers.async_engine import CudaTransferEngine, ThreadTransferEngine
from uniradix.tiers.controller import HostTier
from uniradix.tiers.copiers import KVCopier
from uniradix.tiers.storage_tier import StorageTier
from uniradix.tiers.transfer import Copier, SyncTransferEngine, TransferEngine

if TYPE_CHECKING:
    from uniradix.cache.controller import UnifiedRadixCache
    from uniradix.factory import CacheConfig

ENGINES = ("sync", "thread", "cuda")


def attach_host_tier(cache: UnifiedRadixCache, config: CacheConfig) -> HostTier:
    """Gives `cache` (built with a `HostFullComponent`) the host tier `config` describes.

    `host_engine`: "sync" copies at submit (tests, replay), "thread" on a worker thread,
    "cuda" on a CUDA stream; host tensors exist only when the device pool has layers."""
    if config.host_layout not in LAYOUTS:
        raise ValueError(f"host_layout must be one of {LAYOUTS}, got {config.host_layout!r}")
    if config.host_engine not in ENGINES:
        raise ValueError(f"host_engine must be one of {ENGINES}, got {config.host_engine!r}")
    ps = config.page_size
    capacity = host_capacity(
        cache.pools.kv_allocator.capacity, config.host_tokens, config.hicache_ratio
    )
    capacity -= capacity % ps
    if capacity < ps:
        raise ValueError(f"host tier of {capacity} tokens is less than one page ({ps})")
    copiers: dict[str, Copier] = {}
    host_kv = None
    kv_pool = cache.pools.kv_pool
    if kv_pool is not None and kv_pool.num_layers:
        host_kv = HostKVPool(
            capacity + ps,  # page 0 is padding, as on the device
            kv_pool.num_layers,
            config.num_kv_heads,
            config.head_dim,
            config.kv_dtype,
            ps,
            config.host_layout,
            pin_memory=cache.device.type == "cuda",
        )
        copiers["full"] = KVCopier(kv_pool, host_kv)
    engine: TransferEngine
    if config.host_engine == "sync":
        engine = SyncTransferEngine(copiers)
    elif config.host_engine == "thread":
        engine = ThreadTransferEngine(copiers)
    else:
        engine = CudaTransferEngine(copiers, config.device)
    tier = HostTier(
        cache,
        HostPools(capacity, ps),
        engine,
        config.write_policy,
        load_back_threshold=config.load_back_threshold,
    )
    tier.host_kv = host_kv
    return tier


def attach_storage_tier(cache: UnifiedRadixCache, config: CacheConfig) -> StorageTier | None:
    """Gives `cache`'s host tier the L3 store `config` names (`storage_backend`, shared by
    the caller, or one opened from `storage_url`); None when neither is set."""
    if config.storage_backend is None and config.storage_url is None:
        return None
    tier = cache.host_tier
    if not isinstance(tier, HostTier):
        raise ValueError("storage_url / storage_backend need a host tier (host_tokens)")
    backend = config.storage_backend
    if backend is None:
        assert config.storage_url is not None
        backend = open_backend(config.storage_url)
    return StorageTier(
        tier,
        backend,
        config.model_fingerprint,
        config.prefetch_threshold,
        prefetch_policy=config.prefetch_policy,
        host_kv=tier.host_kv,
    )
