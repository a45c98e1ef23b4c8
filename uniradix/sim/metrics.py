"""ReplayMetrics: listens to the scheduler and gathers what `uniradix replay` reports."""

from __future__ import annotations

from typing import Any

from tqdm import tqdm

from uniradix.cache.controller import UnifiedRadixCache
from uniradix.key import RadixKey
from uniradix.sim.batch import RunningRequest, SchedulerView
from uniradix.sim.lost_hits import LostHit, LostHits
from uniradix.types import ComponentType, EvictResult, MatchResult

PROGRESS_MIN_REQUESTS = 500


class ReplayMetrics:
    """Counters per first admission (a retracted request's later admissions are recomputation,
    counted apart), eviction totals, and per-pool usage after every step."""

    def __init__(self, cache: UnifiedRadixCache, num_requests: int, progress: bool) -> None:
        self.cache = cache
        self._capacity = cache.pools.capacities()  # fixed: read once, not per step
        self.pools = list(self._capacity)
        self.prompt_tokens = 0
        self.hit_tokens = 0
        self.host_hit_tokens = 0  # part of hit_tokens loaded back from the host tier
        self.component_hit_tokens = dict.fromkeys((p for p in self.pools if p != "req"), 0)
        self.hit_lengths: list[int] = []
        self.cumulative_hit_rate: list[float] = []
        self.cumulative_host_hit_rate: list[float] = []  # the host tier's share of it
        self.evicted = dict.fromkeys(self.pools, 0)
        self.retractions = 0
        self.recomputed_tokens = 0
        self.finished = 0
        self.decode_tokens = 0
        self.timeline: dict[str, list[int]] = {p: [] for p in self.pools}
        self.peak_used = dict.fromkeys(self.pools, 0)
        readers = cache.pools.free_readers()  # per step: no dict of every pool built each time
        self._step_readers = [
            (p, self._capacity[p], readers[p], self.timeline[p]) for p in self.pools
        ]
        self.lost_hits = LostHits(cache)
        self._pending_match: dict[int, LostHit] = {}
        self._bar = tqdm(
            total=num_requests,
            unit="req",
            disable=not progress or num_requests < PROGRESS_MIN_REQUESTS,
            leave=False,
        )

    def on_match(self, rid: int, key: RadixKey, match: MatchResult) -> None:
        if self.lost_hits.enabled:
            self._pending_match[rid] = self.lost_hits.observe(key, match)

    def on_admit(self, request: RunningRequest, match: MatchResult) -> None:
        lost = self._pending_match.pop(request.spec.rid, None)
        if request.num_admissions > 1:
            self.recomputed_tokens += request.prompt_len - match.device_prefix_len
            return
        self.prompt_tokens += request.prompt_len
        self.hit_tokens += match.device_prefix_len
        self.host_hit_tokens += request.host_hit_tokens
        for pool in self.component_hit_tokens:
            # Full KV counts everything it matched; the other components count the usable
            # match, which every one of them accepted.
            self.component_hit_tokens[pool] += (
                match.full_kv_hit_length if pool == "full" else match.device_prefix_len
            )
        self.hit_lengths.append(match.device_prefix_len)
        if lost is not None:
            self.lost_hits.add(lost)
        self.cumulative_hit_rate.append(self.hit_tokens / self.prompt_tokens)
        self.cumulative_host_hit_rate.append(self.host_hit_tokens / self.prompt_tokens)

    def on_evict(self, result: EvictResult) -> None:
        self.evicted["full"] += result.num_tokens_evicted
        for pool, num in (
            ("swa", result.swa_num_tokens_evicted),
            ("mamba", result.mamba_num_evicted),
        ):
            if pool in self.evicted:
                self.evicted[pool] += num

    def on_retract(self, request: RunningRequest) -> None:
        self.retractions += 1

    def on_finish(self, request: RunningRequest) -> None:
        self.finished += 1
        self.decode_tokens += request.spec.output_len
        self._bar.update(1)

    def on_step(self, scheduler: SchedulerView) -> None:
        peak = self.peak_used
        for pool, capacity, read_free, timeline in self._step_readers:
            used = capacity - read_free()
            timeline.append(used)
            if used > peak[pool]:
                peak[pool] = used

    def close(self) -> None:
        self._bar.close()

    def leaked(self) -> dict[str, int]:
        """Per pool, after every request finished: slots neither free nor evictable."""
        capacity, free = self.cache.pools.capacities(), self.cache.pools.available()
        return {p: capacity[p] - free[p] - self._evictable(p) for p in self.pools}

    def _evictable(self, pool: str) -> int:
        """Units of `pool` the tree holds unlocked (request rows are never the tree's)."""
        return 0 if pool == "req" else self.cache.evictable_size(ComponentType[pool.upper()])

    def tombstones(self) -> int:
        """Nodes where an auxiliary component's value is dropped while the node stays."""
        aux = range(1, len(self.cache.components))
        return sum(1 for node in self.cache.tree.nodes() for i in aux if node.data[i].value is None)

    def components(self) -> dict[str, dict[str, Any]]:
        capacity, free = self.cache.pools.capacities(), self.cache.pools.available()
        return {
            p: {
                "capacity": capacity[p],
                "peak_used": self.peak_used[p],
                "final_used": capacity[p] - free[p],
                "evicted": self.evicted[p],
                "hit_tokens": self.component_hit_tokens.get(p, 0),
            }
            for p in self.pools
        }
