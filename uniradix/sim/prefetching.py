"""QueuePrefetch: the scheduler's side of L3 prefetch (`uniradix.tiers.storage_tier`).

While requests wait, the first `lookahead` of the queue each get one prefetch started
(`start_waiting`, at the top of every step), so the store is read on the prefetcher's
thread while earlier requests run. At admission (`take`, before the admission's match) the
request's prefetch is waited for as the stop policy says and its pages are inserted as host
copies; a request that reaches admission without one gets one started there (under
`best_effort` that one brings what arrived at once, usually nothing).

**Hit accounting.** The tokens a request's prefetches inserted are its credit. The
admission that succeeds (its first; a retracted request's later admissions are recomputes)
counts `min(credit, hit)` as storage hits, also when an earlier attempt that failed for
memory had already loaded them to the device (they would otherwise count as device hits).

`cancel(rid)` (an aborted request) and `cancel_all()` (a stalled step: the prefetches'
device locks go before the scheduler gives up) release everything a prefetch holds.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

from uniradix.cache.controller import UnifiedRadixCache
from uniradix.key import RadixKey
from uniradix.tiers.storage_prefetch import PrefetchRun


class QueuePrefetch:
    def __init__(self, cache: UnifiedRadixCache, lookahead: int) -> None:
        self.storage = cache.host_tier.storage
        self.lookahead = lookahead
        self.runs: dict[int, PrefetchRun] = {}
        self._tried: set[int] = set()  # waiting requests whose prefetch was started
        self._credit: dict[int, int] = {}

    def start_waiting(self, ready: list[int], key_of: Callable[[int], RadixKey]) -> None:
        """Starts a prefetch for each of the first `lookahead` requests of the `ready` heap
        that has not had one."""
        if self.storage is None or not ready:
            return
        k = self.lookahead  # a heap's k smallest lie in its first 2^k - 1 slots
        for rid in heapq.nsmallest(k, ready[: (1 << k) - 1]):
            if rid in self._tried:
                continue
            self._tried.add(rid)
            run = self.storage.start_prefetch(key_of(rid))
            if run is not None:
                self.runs[rid] = run

    def take(self, rid: int, key: RadixKey) -> None:
        """At admission, before its match: brings request `rid`'s fetched pages in."""
        storage = self.storage
        if storage is None:
            return
        run = self.runs.pop(rid, None)
        if run is None and rid not in self._tried:
            run = storage.start_prefetch(key)
        self._tried.add(rid)
        if run is not None:
            storage.wait_prefetch(run)
            got = storage.finish_prefetch(run)
            self._credit[rid] = self._credit.get(rid, 0) + got

    def admitted(self, rid: int, hit: int, host_hit: int, first: bool) -> int:
        """Counts the storage hits of a successful admission; returns its host hit (at
        least its storage hit: L3 pages come through the host)."""
        self._tried.discard(rid)
        credit = self._credit.pop(rid, 0)
        if self.storage is None or not first:
            return host_hit
        storage_hit = min(credit, hit)
        self.storage.stats.hit_tokens += storage_hit
        return max(host_hit, storage_hit)

    def declined(self, rid: int) -> None:
        """An admission that failed for memory: the request may prefetch again."""
        self._tried.discard(rid)

    def cancel(self, rid: int) -> None:
        run = self.runs.pop(rid, None)
        if run is not None and self.storage is not None:
            self.storage.cancel_prefetch(run)
        self._tried.discard(rid)
        self._credit.pop(rid, None)

    def cancel_all(self) -> None:
        for rid in list(self.runs):
            self.cancel(rid)
