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
    0 without a host tier); with one, `host_full` (and `host_swa`, `host_mamba` on hybrid
    models) under `components` and `leaked`, and a `host_tier` block (its counters include
    `load_failed` and `load_copy_failed`: load-backs that degraded to a recompute). Bytes
    are what a model moving `kv_bytes_per_token` per token would transfer (the replay itself
    moves no tensor data; SWA and Mamba bytes are not counted in them)."""
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
    stats, pools = tier.stats, tier.host_pools
    used = pools.full.used_size()
    out["host_components"] = {
        "host_full": {
            "capacity": pools.full.capacity,
            "peak_used": pools.peak_used["full"],
            "final_used": used,
            "evicted": stats.host_evicted_tokens,
            "hit_tokens": host_hit_tokens,
        }
    }
    out["host_leaked"] = {"host_full": used - tier.full.host_tokens}
    for c in tier.aux:  # SWA slots and Mamba states: held by the tree or leaked
        pool = pools.aux[c.name]
        out["host_components"][f"host_{c.name}"] = {
            "capacity": pool.capacity,
            "peak_used": pools.peak_used[c.name],
            "final_used": pool.used_size(),
            "evicted": stats.aux_host_evicted[c.name],
            "written": stats.aux_written[c.name],
            "loaded": stats.aux_loaded[c.name],
        }
        out["host_leaked"][f"host_{c.name}"] = pool.used_size() - c.host.units
    out["host_tier"] = {
        "write_policy": tier.policy.value,
        **stats.as_dict(),
        "d2h_bytes": stats.written_tokens * kv_bytes_per_token,
        "h2d_bytes": stats.loaded_tokens * kv_bytes_per_token,
        "engine_bytes": {d.value: n for d, n in tier.engine.bytes_moved.items()},
    }
    return out
