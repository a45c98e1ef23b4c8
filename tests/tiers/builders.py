"""Builders for host-tier tests: a full-attention cache with a host tier whose transfers
are held until the test releases them."""

from __future__ import annotations

from tests.tiers.held_engine import HeldEngine
from uniradix import CacheConfig, UnifiedRadixCache, build_cache
from uniradix.components.full_host import HostFullComponent
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
    config = CacheConfig(full_tokens=full_tokens, page_size=page_size, max_context_len=256)
    base = build_cache(config)
    cache = UnifiedRadixCache(
        base.pools, base.settings, (ComponentType.FULL,), {ComponentType.FULL: HostFullComponent}
    )
    engine = HeldEngine()
    tier = HostTier(cache, HostPools(host_tokens, page_size), engine, write_policy, **kwargs)  # type: ignore[arg-type]
    return cache, tier, engine
