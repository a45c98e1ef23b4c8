"""Random traffic through the scheduler on every config (and EAGLE bigram keys where the
cache has no Mamba): after every step the published stream keeps its contract and the
index, fed the decoded bytes, equals the cache's actual full-KV content, on the device and
(full attention with a host tier) on the host. With a publish interval (steps coalesced into
one batch) the contract holds for every batch, and the index equals the content after
every forced flush."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.events.oracle import StrictStream, cached_hashes
from tests.sim.specs import fitting_specs, small_cache
from uniradix import EvictParams
from uniradix.events import NullEventPublisher, encode_batch
from uniradix.events.index import KVEventIndex
from uniradix.events.stream import KVEventStream
from uniradix.sim.batch import NullListener
from uniradix.sim.replay import NullRunner
from uniradix.sim.scheduler import Scheduler, SchedulerConfig


class Checker(NullListener):
    def __init__(
        self, stream: KVEventStream, index: KVEventIndex, wire: str, force_every: int = 1
    ) -> None:
        """`force_every`: a coalescing stream's flush is forced (and the index compared with
        the cache) every that many steps."""
        self.stream, self.index, self.wire = stream, index, wire
        self.strict = StrictStream(index.block_size)
        self.seq = 0
        self.force_every = force_every
        self.steps = 0

    def check(self, force: bool = True) -> None:
        self.stream.flush(force=force)
        events: list[Any] = []
        for batch in self.sent:
            payload = encode_batch(batch, 0.0, 0, self.wire)
            self.index.apply("a", payload, self.seq)
            self.seq += 1
            events.extend(batch)
        self.sent.clear()
        self.strict.apply(events)
        if not force:
            return
        cache = self.stream.cache
        assert self.index.blocks("a") == cached_hashes(cache) == set(self.strict.parent)
        host = cached_hashes(cache, "CPU_PINNED")
        assert (
            self.index.blocks("a", "CPU_PINNED")
            == host
            == set(self.strict.held.get("CPU_PINNED", {}))
        )
        assert self.index.stats.orphan_stores == 0

    def on_step(self, scheduler: Scheduler) -> None:
        self.steps += 1
        self.check(force=self.steps % self.force_every == 0)


class Capture(NullEventPublisher):
    def __init__(self, sink: list[Any]) -> None:
        super().__init__()
        self.sink = sink

    def publish(self, events: list[Any]) -> bool:
        self.sink.append(events)
        return super().publish(events)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    config=st.sampled_from(["full", "swa", "mamba", "hybrid"]),
    wire=st.sampled_from(["map", "vllm-array", "sglang-array"]),
    prompts=st.lists(st.lists(st.integers(0, 2), min_size=1, max_size=40), min_size=1, max_size=8),
    outputs=st.lists(st.integers(1, 12), min_size=8, max_size=8),
    page_size=st.sampled_from([1, 2, 4]),
    full_pages=st.integers(24, 48),
    window=st.integers(1, 8),
    max_running=st.integers(1, 3),
    chunk_pages=st.integers(1, 6),
    reset_midway=st.booleans(),
    write_policy=st.sampled_from([None, "write_through", "write_through_selective", "write_back"]),
    eagle=st.booleans(),
    force_every=st.sampled_from([1, 1, 3, 7]),
)
def test_index_follows_the_cache(  # type: ignore[no-untyped-def]
    config, wire, prompts, outputs, page_size, full_pages, window, max_running, chunk_pages,
    reset_midway, write_policy, eagle, force_every,
) -> None:  # fmt: skip
    full_tokens = full_pages * page_size
    eagle = eagle and config in ("full", "swa")  # Mamba refuses bigram keys
    # Full attention gets a host tier of half the device's size (so it evicts too).
    host = config == "full" and write_policy is not None
    cache = small_cache(
        config, full_tokens, page_size, window, 12,
        host_tokens=full_tokens // 2 if host else None,
        write_policy=write_policy or "write_through", is_eagle=eagle,
    )  # fmt: skip
    sent: list[Any] = []
    # force_every > 1: steps coalesced (a flush within a second of the last batch waits).
    interval = 0 if force_every == 1 else 1000
    stream = KVEventStream(cache, [Capture(sent)], publish_interval_ms=interval)
    checker = Checker(stream, KVEventIndex(page_size, bigram=eagle), wire, force_every)
    checker.sent = sent  # type: ignore[attr-defined]
    specs = fitting_specs(prompts, outputs, full_tokens // 2)
    for round_ in range(2 if reset_midway else 1):
        scheduler = Scheduler(
            cache,
            NullRunner(),
            specs,
            SchedulerConfig(max_running, chunk_pages * page_size, 0.0, check_invariants=True),
            checker,
        )
        scheduler.run()
        if reset_midway and round_ == 0:
            cache.reset()
            checker.check()
    cache.host_tier.drain()
    cache.evict(EvictParams(num_tokens=full_tokens, swa_num_tokens=full_tokens, mamba_num=12))
    if cache.host_tier.enabled:
        cache.host_tier.evict_host(cache.host_tier.full.host_tokens)
    checker.check()
    cache.check_invariants({"full": 0, "swa": 0, "mamba": 0, "req": 0})
    assert checker.index.blocks("a") == checker.index.blocks("a", "CPU_PINNED") == set()
