"""KVEventStream: one cache's event stream. It attaches an `EventRecorder` to the cache and,
at each `flush()` (once per scheduler step), hands the step's events to its publishers.

A flush publishes at most every `publish_interval_ms` (20 by default): within the interval it
only reads the clock, and the events of the steps in between go out with the next flush that
publishes, coalesced into one batch (still at most one batch per step). A scheduler whose
steps take longer than the interval publishes every step, at once; one running many short
steps (a CPU-bound replay, small decode batches) does the recorder's per-step work once per
interval instead: each step's bookkeeping between cache calls cost the next calls ~5-8% when
steps are ~50 µs (`benchmarks/events_ops.py`). Call `flush()` in idle scheduler iterations
too, or `flush(force=True)`, so that a burst's last events do not wait for the next request;
`close()` publishes what is pending. 0 publishes at every flush.

The first batch is `AllBlocksCleared` followed by the cache's whole content (a subscriber
cannot know what a restarted publisher held), and so is the next batch after any publisher
dropped one: a gap never leaves a router with stale or missing blocks for longer than a step.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from uniradix.cache.controller import UnifiedRadixCache
from uniradix.event_sink import MEDIUM_CPU_PINNED
from uniradix.events.groups import GroupTracker
from uniradix.events.publisher import EventPublisher
from uniradix.events.recorder import EventRecorder
from uniradix.events.types import AllBlocksCleared, KVEvent

PUBLISH_INTERVAL_MS = 20.0  # events reach routers at most this much later than per step
MAX_PUBLISH_INTERVAL_MS = 1000.0


class KVEventStream:
    def __init__(
        self,
        cache: UnifiedRadixCache,
        publishers: Sequence[EventPublisher],
        cache_salt: str | None = None,
        hash_algo: str = "sglang_sha256",
        hash_seed: str | None = None,
        publish_interval_ms: float = PUBLISH_INTERVAL_MS,
        groups: bool = False,
    ) -> None:
        """`hash_algo` / `hash_seed`: the block hash (`uniradix.hashing.events`);
        `publish_interval_ms`: the least time between two published batches (module doc);
        `groups`: publish the SWA / Mamba components as KV-cache groups too
        (`uniradix.events.groups`; `publishes_groups` says when)."""
        if not 0 <= publish_interval_ms <= MAX_PUBLISH_INTERVAL_MS:
            raise ValueError(
                f"publish_interval_ms must be in [0, {MAX_PUBLISH_INTERVAL_MS}], "
                f"got {publish_interval_ms}"
            )
        self.cache = cache
        self.recorder = EventRecorder(cache, cache_salt, hash_algo=hash_algo, hash_seed=hash_seed)
        self.publishers = list(publishers)
        self.events_published = 0
        self.resyncs = 0
        self._resync = [True] * len(self.publishers)
        self._resync_pending = True
        self._interval_ns = int(publish_interval_ms * 1e6)
        self._due_ns = 0  # no publishing before this (monotonic clock)
        self._nothing = self.recorder.empty_step()
        self.groups = GroupTracker(self.recorder) if groups else None
        self._closed = False
        cache.set_event_sink(self.recorder)

    def flush(self, force: bool = False) -> Sequence[KVEvent]:
        """Publishes the events since the last published batch, unless the last one went out
        less than `publish_interval_ms` ago and no publisher needs a resync (`force`:
        regardless); returns what it published (a sequence of `KVEvent`, made on first read:
        `uniradix.events.packed`; empty when it published nothing)."""
        if self._interval_ns:
            now = time.monotonic_ns()
            if not force and now < self._due_ns and not self._resync_pending:
                return self._nothing
            if self.recorder.pending:
                self._due_ns = now + self._interval_ns  # a pause ends with a batch at once
        events: Sequence[KVEvent] = self.recorder.take_step()
        if self.groups is not None and (changed := self.groups.take()):
            events = [*events, *changed]
        resync: list[KVEvent] | None = None
        handed = 0  # events in the largest batch handed on (counted once, not per publisher)
        for i, publisher in enumerate(self.publishers):
            batch: Sequence[KVEvent] = events
            if self._resync[i]:
                if resync is None:
                    resync = [AllBlocksCleared(), *self.recorder.snapshot()]
                    if self.cache.host_tier.enabled:
                        resync += self.recorder.snapshot(MEDIUM_CPU_PINNED)
                    if self.groups is not None:
                        resync += self.groups.snapshot()
                    self.resyncs += 1
                batch = resync
            if not batch:
                continue
            self._resync[i] = not publisher.publish(batch)
            if not self._resync[i]:
                handed = max(handed, len(batch))
        self.events_published += handed
        self._resync_pending = any(self._resync)
        return events

    @property
    def events_dropped(self) -> int:
        return sum(p.dropped for p in self.publishers)

    def close(self) -> None:
        """Publishes what is pending, detaches from the cache and closes the publishers;
        a second call does nothing."""
        if self._closed:
            return
        self._closed = True
        try:
            self.flush(force=True)
        finally:
            self.cache.set_event_sink(None)
            for p in self.publishers:
                p.close()
