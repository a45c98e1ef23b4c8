"""One serving instance of a multi-instance replay (`uniradix.sim.cluster`): its cache, its
scheduler, its metrics, its event stream, and its figures for the cluster's summary."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from uniradix.cache.controller import UnifiedRadixCache
from uniradix.events.stream import KVEventStream
from uniradix.events.subscription import SnapshotServer
from uniradix.sim.host_summary import host_summary
from uniradix.sim.metrics import ReplayMetrics
from uniradix.sim.scheduler import Scheduler


@dataclass
class Instance:
    """One serving instance: its cache (own pools), scheduler, metrics and event stream.
    `global_rids[local rid]` is the cluster-wide rid of each request it was given."""

    name: str
    cache: UnifiedRadixCache
    scheduler: Scheduler
    metrics: ReplayMetrics
    stream: KVEventStream
    global_rids: list[int] = field(default_factory=list)
    snapshots: SnapshotServer | None = None  # `--kv-events-snapshot`

    @property
    def outstanding(self) -> int:
        return len(self.global_rids) - self.metrics.finished

    def hit_tokens_by_tier(self) -> dict[str, int]:
        m = self.metrics
        by_tier = {"device": m.hit_tokens - m.host_hit_tokens, "host": m.host_hit_tokens}
        storage = self.cache.host_tier.storage
        if storage is not None:  # L3 hits were loaded back through the host
            by_tier["storage"] = storage.stats.hit_tokens
            by_tier["host"] -= by_tier["storage"]
        return by_tier

    def leaked(self) -> dict[str, int]:
        """Per pool (device and host), after every request finished: slots neither free nor
        held by the tree (`ReplayMetrics.leaked`)."""
        m = self.metrics
        leaked = m.leaked()
        host = host_summary(self.cache, m.hit_tokens, m.host_hit_tokens, 0)
        leaked.update(host.get("host_leaked", {}))
        return leaked

    def summary(self) -> dict[str, Any]:
        m = self.metrics
        storage = self.cache.host_tier.storage
        return {
            "name": self.name,
            "requests": len(self.global_rids),
            "prompt_tokens": m.prompt_tokens,
            "hit_tokens": m.hit_tokens,
            "hit_rate": m.hit_tokens / max(m.prompt_tokens, 1),
            "evicted_tokens": m.evicted["full"],
            "hit_tokens_by_tier": self.hit_tokens_by_tier(),
            "steps": self.scheduler.num_steps,
            "events_published": self.stream.events_published,
            "events_dropped": self.stream.events_dropped,
            "leaked": self.leaked(),
            "invariant_checks": self.scheduler.num_invariant_checks,
            "storage_tier": None if storage is None else storage.stats.as_dict(),
        }
