"""Background L3 prefetch through the public API: the stop policies, the half-pool cap on
reservations, abort, a store that fails, and nothing leaked on any of those paths; the
replay's default policy gives the same figures run to run."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from tests.helpers import insert_fresh
from uniradix import CacheConfig, EvictParams, RadixKey, build_cache
from uniradix.sim.replay import NullRunner, ReplayOptions, admissible, run_replay
from uniradix.sim.scheduler import Scheduler, SchedulerConfig
from uniradix.sim.workloads import generate_workload
from uniradix.storage.backend import StoredPage
from uniradix.storage.file_backend import FileBackend
from uniradix.storage.io import PrefetchTimeout
from uniradix.tiers.controller import HostTier
from uniradix.tiers.storage_tier import StorageTier
from uniradix.types import MatchPrefixParams

PAGE, HOST = 16, 4096


class GatedFileBackend(FileBackend):
    """A file store whose reads wait until the test opens the gate (or fail when `down`)."""

    def __init__(self, directory: Path) -> None:
        super().__init__(directory)
        self.gate = threading.Event()
        self.gate.set()
        self.down = False

    def _store_get(self, names: list[str]) -> list[StoredPage | None]:
        self.gate.wait()
        if self.down:
            raise ConnectionError("injected: store down")
        return super()._store_get(names)


def _cache(backend: FileBackend, policy: str, **kw: object) -> tuple[HostTier, StorageTier]:
    sizes: dict[str, object] = dict(full_tokens=4096, host_tokens=HOST, max_context_len=4096)
    sizes.update(kw)
    cache = build_cache(
        CacheConfig.of(
            page_size=PAGE,
            storage_backend=backend,
            prefetch_policy=policy,
            **sizes,  # type: ignore[arg-type]
        )
    )
    tier = cache.host_tier
    assert isinstance(tier, HostTier) and tier.storage is not None
    return tier, tier.storage


def _stored_key(storage: StorageTier, num_tokens: int, first: int = 1) -> RadixKey:
    """A key whose every page is in the store."""
    key = RadixKey(list(range(first, first + num_tokens)))
    pages = storage.keyspace.keys_for(key)
    assert storage.backend.batch_set(pages, [b""] * len(pages)) == len(pages)
    return key


def _assert_nothing_held(tier: HostTier) -> None:
    """Every pool whole once the tree is emptied: no slot, lock or reservation left."""
    cache = tier.cache
    assert tier.storage is not None and tier.storage.reserved_tokens == 0
    assert not tier.storage.prefetches.runs and tier.storage.prefetcher.pages_in_flight == 0
    cache.check_invariants({"full": 0})
    assert cache.protected_size() == 0
    cache.evict(EvictParams(num_tokens=cache.evictable_size()))
    tier.evict_host(tier.full.host_tokens)
    cache.check_invariants({"full": 0})
    assert tier.host_pools.full.available_size() == tier.host_pools.full.capacity
    assert cache.pools.kv_allocator.available_size() == cache.pools.kv_allocator.capacity


def test_best_effort_takes_what_arrived_and_frees_the_rest(tmp_path: Path) -> None:
    backend = GatedFileBackend(tmp_path)
    tier, storage = _cache(backend, "best_effort")
    key = _stored_key(storage, 1024)
    backend.gate.clear()  # the store answers only later
    run = storage.start_prefetch(key)
    assert run is not None and run.num_tokens == 1024
    assert storage.reserved_tokens == 1024
    tier.cache.check_invariants({"full": 0})  # reserved slots are in the host identity
    storage.wait_prefetch(run)  # best effort: returns at once
    assert storage.finish_prefetch(run) == 0
    backend.gate.set()
    _assert_nothing_held(tier)
    tier.close()


def test_wait_complete_inserts_every_stored_page(tmp_path: Path) -> None:
    backend = GatedFileBackend(tmp_path)
    tier, storage = _cache(backend, "wait_complete")
    key = _stored_key(storage, 1024)
    backend.gate.clear()
    run = storage.start_prefetch(key)
    assert run is not None
    threading.Timer(0.05, backend.gate.set).start()
    storage.wait_prefetch(run)
    assert storage.finish_prefetch(run) == 1024
    assert tier.cache.match_prefix(MatchPrefixParams(key)).host_hit_length == 1024
    _assert_nothing_held(tier)
    tier.close()


def test_timeout_stops_at_the_deadline_and_leaks_nothing(tmp_path: Path) -> None:
    backend = GatedFileBackend(tmp_path)
    tier, storage = _cache(backend, "timeout")
    storage.prefetcher.timeout = PrefetchTimeout(base_s=0.01, per_ki_token_s=0.0)
    key = _stored_key(storage, 512)
    backend.gate.clear()
    run = storage.start_prefetch(key)
    assert run is not None
    storage.wait_prefetch(run)  # the store never answered in time
    assert storage.prefetches.ready(run)
    assert storage.finish_prefetch(run) == 0
    backend.gate.set()
    _assert_nothing_held(tier)
    tier.close()


def test_the_deadline_grows_with_the_tokens() -> None:
    timeout = PrefetchTimeout(base_s=2.0, per_ki_token_s=0.1, max_s=30.0)
    assert timeout.deadline_s(0) == 2.0
    assert timeout.deadline_s(10 * 1024) == pytest.approx(3.0)
    assert timeout.deadline_s(10**9) == 30.0


def test_reservations_never_exceed_half_the_host_pool(tmp_path: Path) -> None:
    backend = GatedFileBackend(tmp_path)
    tier, storage = _cache(backend, "wait_complete")
    keys = [_stored_key(storage, 1536, first=1 + i * 100_000) for i in range(3)]
    backend.gate.clear()
    runs = [storage.start_prefetch(k) for k in keys]
    assert [r.num_tokens if r else 0 for r in runs] == [1536, HOST // 2 - 1536, 0]
    assert storage.reserved_tokens == HOST // 2
    assert storage.stats.reserve_failed == 1
    backend.gate.set()
    for run in runs:
        if run is not None:
            storage.wait_prefetch(run)
            storage.finish_prefetch(run)
    _assert_nothing_held(tier)
    tier.close()


def test_a_cancelled_prefetch_releases_its_slots_and_lock(tmp_path: Path) -> None:
    backend = GatedFileBackend(tmp_path)
    tier, storage = _cache(backend, "wait_complete")
    key = _stored_key(storage, 1024)
    # A device prefix, so the prefetch holds a device lock on it while it waits.
    insert_fresh(tier.cache, key.tolist()[:256])
    tier.drain()
    backend.gate.clear()
    run = storage.start_prefetch(key)
    assert run is not None and run.start == 256 and run.lock is not None
    assert tier.cache.protected_size() == 256
    storage.cancel_prefetch(run)
    with pytest.raises(ValueError, match="already finished or cancelled"):
        storage.finish_prefetch(run)
    backend.gate.set()
    assert storage.stats.cancelled == 1
    _assert_nothing_held(tier)
    tier.close()


def test_a_store_that_goes_down_mid_prefetch_is_a_miss(tmp_path: Path) -> None:
    backend = GatedFileBackend(tmp_path)
    tier, storage = _cache(backend, "wait_complete")
    key = _stored_key(storage, 1024)
    backend.down = True
    assert storage.prefetch(key) == 0
    assert backend.stats().failed_ops >= 1 and backend.stats().pages_missed >= 1
    _assert_nothing_held(tier)
    tier.close()


def test_aborting_a_waiting_request_releases_its_prefetch(tmp_path: Path) -> None:
    backend = GatedFileBackend(tmp_path)
    specs = admissible(generate_workload("long_doc_qa", 0, 8), 12_000, PAGE)
    fill = build_cache(
        CacheConfig.of(
            full_tokens=12_000,
            host_tokens=24_000,
            page_size=PAGE,
            max_context_len=12_000,
            storage_backend=backend,
        )
    )
    assert fill.host_tier.storage is not None
    for spec in specs:  # the store holds every prompt
        key = fill.make_key(spec.prompt.token_ids().tolist()[:-1])
        pages = fill.host_tier.storage.keyspace.keys_for(key)
        backend.batch_set(pages, [b""] * len(pages))
    fill.host_tier.close()
    tier, storage = _cache(
        backend, "wait_complete", full_tokens=12_000, host_tokens=24_000, max_context_len=12_000
    )
    config = SchedulerConfig(max_running=1, check_invariants=True)
    scheduler = Scheduler(tier.cache, NullRunner(), specs, config)
    backend.gate.clear()  # the waiting requests' fetches stay in flight
    threading.Timer(0.05, backend.gate.set).start()
    scheduler.step()
    waiting = sorted(scheduler.prefetch.runs)
    assert waiting, "the queue's head prefetches while the first request runs"
    reserved = storage.reserved_tokens
    run = scheduler.prefetch.runs[waiting[-1]]
    scheduler.abort(waiting[-1])
    assert waiting[-1] not in scheduler.prefetch.runs and storage.stats.cancelled == 1
    assert storage.reserved_tokens == reserved - run.num_tokens
    scheduler.run()
    assert storage.stats.hit_tokens > 0
    tier.drain()
    storage.flush()
    scheduler.check_invariants()
    _assert_nothing_held(tier)
    with pytest.raises(ValueError, match="not waiting"):
        scheduler.abort(0)
    tier.close()


def test_the_replay_default_policy_repeats_its_figures(tmp_path: Path) -> None:
    def run(directory: str) -> dict[str, object]:
        options = ReplayOptions.of(
            workload="long_doc_qa",
            config="full",
            full_tokens=12_000,
            host_tokens=24_000,
            page_size=PAGE,
            max_requests=16,
            storage_url=f"file://{tmp_path / directory}",
        )
        assert options.storage.prefetch_policy == "wait_complete"
        summary = run_replay(options).summary
        return {"by_tier": summary["hit_tokens_by_tier"], "tier": summary["storage"]["tier"]}

    first, second = run("a"), run("b")
    assert first == second
    assert first["by_tier"]["storage"] > 0  # type: ignore[index]


def test_a_retried_admission_still_counts_its_fetched_pages_as_storage_hits(
    tmp_path: Path,
) -> None:
    from uniradix.sim.prefetching import QueuePrefetch

    backend = GatedFileBackend(tmp_path)
    tier, storage = _cache(backend, "wait_complete")
    key = _stored_key(storage, 1024)
    queue = QueuePrefetch(tier.cache, lookahead=4)
    queue.start_waiting([7], lambda rid: key)
    queue.take(7, key)  # admission: the pages are inserted on the host ...
    assert storage.stats.fetched_tokens == 1024
    queue.declined(7)  # ... but the request did not fit; meanwhile they were loaded back
    m = tier.load_back(tier.cache.match_prefix(MatchPrefixParams(key)))
    assert m.device_prefix_len == 1024
    queue.take(7, key)  # the retry: nothing left to fetch
    assert storage.stats.fetched_tokens == 1024
    # The retry sees a device hit; the tokens still came from L3 for this request.
    assert queue.admitted(7, hit=1024, host_hit=0, first=True) == 1024
    assert storage.stats.hit_tokens == 1024
    # A retracted request's later admission is a recompute: no hit of any tier.
    queue.take(8, key)
    assert queue.admitted(8, hit=1024, host_hit=0, first=False) == 0
    assert storage.stats.hit_tokens == 1024
    tier.wait_loads()
    _assert_nothing_held(tier)
    tier.close()
