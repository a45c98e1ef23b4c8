"""What goes to L3 and what the event stream says about it: a write-through backup after
its host ack, a write-back victim after its host backup at device eviction, each then
announced as `BlockStored(medium="DISK")` with the hashes of its other media."""

from __future__ import annotations

from pathlib import Path

from tests.events.test_host_events import TOKENS, removed, stored
from tests.helpers import insert_fresh
from tests.tiers.builders import host_cache
from uniradix import EvictParams, RadixKey
from uniradix.events.recorder import EventRecorder
from uniradix.storage.file_backend import FileBackend
from uniradix.tiers.storage_tier import StorageTier


def attached(write_policy: str, directory: Path):  # type: ignore[no-untyped-def]
    cache, tier, engine = host_cache(16, 32, 2, write_policy)
    storage = StorageTier(tier, FileBackend(directory), "test-model@1", prefetch_threshold=2)
    recorder = EventRecorder(cache)
    cache.set_event_sink(recorder)
    return cache, tier, engine, storage, recorder


def stored_pages(storage: StorageTier) -> int:
    return storage.backend.batch_exists(storage.keyspace.keys_for(RadixKey(TOKENS)))


def test_write_through_goes_to_l3_after_the_host_ack(tmp_path: Path) -> None:
    cache, tier, engine, storage, recorder = attached("write_through", tmp_path)
    insert_fresh(cache, TOKENS)
    storage.flush()
    assert stored_pages(storage) == 0  # the host copy is not acked yet
    engine.release(1)
    tier.writing_check()
    storage.flush()
    assert stored_pages(storage) == 4 and storage.stats.stored_pages == 4
    assert recorder.take_events() == [stored("GPU"), stored("CPU_PINNED"), stored("DISK")]
    # Leaving the device and the host publishes their removals; the DISK copy stays.
    cache.evict(EvictParams(num_tokens=8))
    assert tier.evict_host(8) == 8
    assert recorder.take_events() == [removed("GPU"), removed("CPU_PINNED")]
    assert stored_pages(storage) == 4
    tier.close()


def test_a_write_back_victim_goes_to_l3_after_its_host_backup(tmp_path: Path) -> None:
    cache, tier, _, storage, recorder = attached("write_back", tmp_path)
    insert_fresh(cache, TOKENS)
    storage.flush()
    assert stored_pages(storage) == 0  # write-back: nothing leaves the device before eviction
    assert cache.evict(EvictParams(num_tokens=8)).num_tokens_evicted == 8  # demoted
    storage.flush()
    assert stored_pages(storage) == 4 and tier.stats.demoted_tokens == 8
    assert recorder.take_events() == [
        stored("GPU"),
        stored("CPU_PINNED"),
        removed("GPU"),
        stored("DISK"),
    ]
    cache.check_invariants({"full": 0})
    tier.close()


def test_a_page_the_store_refused_is_not_announced(tmp_path: Path) -> None:
    cache, tier, engine = host_cache(16, 32, 2, "write_through")
    backend = FileBackend(tmp_path, max_bytes=1)  # no page fits: every write is refused
    storage = StorageTier(tier, backend, "test-model@1", prefetch_threshold=2)
    recorder = EventRecorder(cache)
    cache.set_event_sink(recorder)
    insert_fresh(cache, TOKENS)
    engine.release(1)
    tier.writing_check()
    storage.flush()
    assert storage.stats.stored_pages == 0
    assert recorder.take_events() == [stored("GPU"), stored("CPU_PINNED")]
    tier.close()
