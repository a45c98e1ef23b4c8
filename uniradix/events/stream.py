"""KVEventStream: one cache's event stream. It attaches an `EventRecorder` to the cache and,
at each `flush()` (once per scheduler step), hands the step's events to its publishers.

The first batch is `AllBlocksCleared` followed by the cache's whole content (a subscriber
cannot know what a restarted publisher held), and so is the next batch after any publisher
dropped one: a gap never leaves a router with stale or missing blocks for longer than a step.
"""

from __future__ import annotations

from collections.abc import Sequence

from uniradix.cache.controller import UnifiedRadixCache
from uniradix.event_sink import MEDIUM_CPU_PINNED
from uniradix.events.packed import StepEvents
from uniradix.events.publisher import EventPublisher
from uniradix.events.recorder import EventRecorder
from uniradix.events.types import AllBlocksCleared, KVEvent


class KVEventStream:
    def __init__(
        self,
        cache: UnifiedRadixCache,
        publishers: Sequence[EventPublisher],
        cache_salt: str | None = None,
        hash_algo: str = "sglang_sha256",
        hash_seed: str | None = None,
    ) -> None:
        """`hash_algo` / `hash_seed`: the block hash (`uniradix.events.hashing`)."""
        self.cache = cache
        self.recorder = EventRecorder(cache, cache_salt, hash_algo=hash_algo, hash_seed=hash_seed)
        self.publishers = list(publishers)
        self.events_published = 0
        self.resyncs = 0
        self._resync = [True] * len(self.publishers)
        cache.set_event_sink(self.recorder)

    def flush(self) -> StepEvents:
        """Publishes the events since the last flush (nothing when there are none and no
        publisher needs a resync); returns them (a sequence of `KVEvent`, made on first read:
        `uniradix.events.packed`)."""
        events = self.recorder.take_step()
        resync: list[KVEvent] | None = None
        handed = 0  # events in the largest batch handed on (counted once, not per publisher)
        for i, publisher in enumerate(self.publishers):
            batch: Sequence[KVEvent] = events
            if self._resync[i]:
                if resync is None:
                    resync = [AllBlocksCleared(), *self.recorder.snapshot()]
                    if self.cache.host_tier.enabled:
                        resync += self.recorder.snapshot(MEDIUM_CPU_PINNED)
                    self.resyncs += 1
                batch = resync
            if not batch:
                continue
            self._resync[i] = not publisher.publish(batch)
            if not self._resync[i]:
                handed = max(handed, len(batch))
        self.events_published += handed
        return events

    @property
    def events_dropped(self) -> int:
        return sum(p.dropped for p in self.publishers)

    def close(self) -> None:
        """Detaches from the cache and closes the publishers."""
        self.cache.set_event_sink(None)
        for p in self.publishers:
            p.close()
