"""What `uniradix replay` reports about the host tier: hits by tier, host pools beside the
device ones, transfer volumes, demotions and real losses."""

from __future__ import annotations

from typing import Any

from uniradix.cache.controller import UnifiedRadixCache
from uniradix.tiers.controller import HostTier


def host_summary(
    cache: UnifiedRadixCache, hit_tokens: int, host_hit_tokens: int, kv_bytes_per_token: int
) -> dict[str, Any]:
    """Fields merged into the replay summary. `hit_tokens_by_tier` always (the host part is
    0 without a host tier); with one, `host_full` under `components` and `leaked`, and a
    `host_tier` block. Bytes are what a model moving `kv_bytes_per_token` per token would
    transfer (the replay itself moves no tensor data)."""
    out: dict[str, Any] = {
        "hit_tokens_by_tier": {"device": hit_tokens - host_hit_tokens, "host": host_hit_tokens}
    }
    tier = cache.host_tier
    if not isinstance(tier, HostTier):
        return out
    if tier.storage is not None:  # L3 hits were loaded back through the host: split them out
        by_tier = out["hit_tokens_by_tier"]
        by_tier["storage"] = tier.storage.stats.hit_tokens
        by_tier["host"] -= by_tier["storage"]
        out["storage"] = tier.storage.counters()
    pool, stats = tier.host_pools.full, tier.stats
    used = pool.used_size()
    out["host_components"] = {
        "host_full": {
            "capacity": pool.capacity,
            "peak_used": tier.host_pools.peak_used["full"],
            "final_used": used,
            "evicted": stats.host_evicted_tokens,
            "hit_tokens": host_hit_tokens,
        }
    }
    out["host_leaked"] = {"host_full": used - tier.full.host_tokens}
    out["host_tier"] = {
        "write_policy": tier.policy.value,
        **stats.as_dict(),
        "d2h_bytes": stats.written_tokens * kv_bytes_per_token,
        "h2d_bytes": stats.loaded_tokens * kv_bytes_per_token,
        "engine_bytes": {d.value: n for d, n in tier.engine.bytes_moved.items()},
    }
    return out
