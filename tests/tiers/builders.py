"""Builders for host-tier tests: a full-attention or hybrid cache with a host tier whose
transfers are held until the test releases them."""

from __future__ import annotations

from benchmarks.studies.retired_orders import GREEDY_DUAL
from tests.tiers.held_engine import HeldEngine
from uniradix import CacheConfig, UnifiedRadixCache, build_cache
from uniradix.components.full_host import HostFullComponent
from uniradix.components.mamba_host import HostMambaComponent
from uniradix.components.swa_host import HostSWAComponent
from uniradix.factory import components
from uniradix.memory.host_pools import HostPools
from uniradix.tiers.controller import HostTier
from uniradix.types import ComponentType


def host_cache(
    full_tokens: int = 16,
    host_tokens: int = 32,
    page_size: int = 1,
    write_policy: str = "write_through",
    **kwargs: object,
) -> tuple[UnifiedRadixCache, HostTier, HeldEngine]:
    config = CacheConfig.of(full_tokens=full_tokens, page_size=page_size, max_context_len=256)
    base = build_cache(config)
    cache = UnifiedRadixCache(
        base.pools, base.settings, (ComponentType.FULL,), {ComponentType.FULL: HostFullComponent}
    )
    engine = HeldEngine()
    tier = HostTier(cache, HostPools(host_tokens, page_size), engine, write_policy, **kwargs)  # type: ignore[arg-type]
    return cache, tier, engine


def hybrid_host_cache(
    full_tokens: int = 32,
    host_tokens: int = 64,
    page_size: int = 1,
    write_policy: str = "write_through",
    sliding_window: int | None = None,
    swa_tokens: int | None = None,
    mamba_slots: int | None = None,
    host_swa_tokens: int | None = None,
    host_mamba_slots: int | None = None,
) -> tuple[UnifiedRadixCache, HostTier, HeldEngine]:
    """A full+SWA, full+Mamba or full+SWA+Mamba cache with host halves and a host tier whose
    transfers are held until the test releases them."""
    config = CacheConfig.of(
        full_tokens=full_tokens,
        page_size=page_size,
        max_context_len=256,
        sliding_window=sliding_window,
        swa_tokens=swa_tokens,
        mamba_slots=mamba_slots,
        mamba_extra_buffer=mamba_slots is not None and page_size > 1,
        # Victims named by the tests: each SWA node credited by its own end.
        swa_eviction_policy=GREEDY_DUAL,
    )
    base = build_cache(config)
    cache = UnifiedRadixCache(
        base.pools,
        base.settings,
        components(config),
        {
            ComponentType.FULL: HostFullComponent,
            ComponentType.SWA: HostSWAComponent,
            ComponentType.MAMBA: HostMambaComponent,
        },
    )
    engine = HeldEngine()
    pools = HostPools(
        host_tokens,
        page_size,
        None if sliding_window is None else (host_swa_tokens or host_tokens),
        None if mamba_slots is None else (host_mamba_slots or 8),
    )
    tier = HostTier(cache, pools, engine, write_policy)
    return cache, tier, engine


def values(node, i):
    """(device value, host value) of component `i` on `node`, as lists (None when absent)."""
    d = node.data[i]
    as_list = lambda v: None if v is None else v.tolist()  # noqa: E731
    return as_list(d.value), as_list(d.host_value)


def ack_all(tier, engine):
    """Releases every batch a `HeldEngine` holds and commits them."""
    for ticket in list(engine.held):
        engine.release(ticket)
    tier.writing_check()
    tier.loading_check()
