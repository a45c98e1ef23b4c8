"""Backup writer and prefetcher on real file and Redis stores, with failures, stop policies
and aborts."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from uniradix.key import RadixKey
from uniradix.storage import KeySpace, open_backend
from uniradix.storage.file_backend import FileBackend
from uniradix.storage.io import (
    BATCH_PAGES,
    BackupWriter,
    Prefetcher,
    PrefetchPolicy,
    PrefetchTimeout,
)
from uniradix.storage.page_format import Payload

from .conftest import RedisServer, du

KS = KeySpace("org/m@rev1", "bfloat16", "layer_first", 2, "full")
SIZE = 512


def chain(num_pages: int, start: int = 0) -> tuple[list, list[bytes]]:  # type: ignore[type-arg]
    keys = KS.keys_for(RadixKey(list(range(start, start + 2 * num_pages))))
    return keys, [bytes([(start + i) % 256]) * SIZE for i in range(num_pages)]


def test_backup_then_prefetch_round_trip(backend_url: str) -> None:
    store = open_backend(backend_url)
    writer, prefetcher = BackupWriter(store), Prefetcher(store, PrefetchPolicy.WAIT_COMPLETE)
    chains = [chain(BATCH_PAGES + 44, 0), chain(5, 10_000), chain(1, 20_000)]
    tickets = [writer.submit(k, p) for k, p in chains]
    assert writer.flush(timeout_s=30)
    results = sorted(writer.poll(), key=lambda r: r.ticket)
    assert [r.ticket for r in results] == tickets and all(r.complete for r in results)
    assert writer.poll() == []  # each ticket once
    keys, data = chains[0]
    longer = KS.keys_for(RadixKey(list(range(2 * (len(keys) + 10)))))
    hit = prefetcher.probe(longer)
    assert hit == len(keys)
    handle = prefetcher.start(longer[:hit], num_tokens=2 * hit, expected_bytes=SIZE)
    assert handle._done.wait(30) and prefetcher.can_finish(handle)
    pages = prefetcher.finish(handle)
    assert [bytes(p) for p in pages] == data
    assert prefetcher.pages_in_flight == 0 and prefetcher.handles_in_flight == 0
    writer.close()
    prefetcher.close()
    store.close()


class FlakyStore(FileBackend):
    """Fails its first `failures` writes, and stores at most `cap` pages per call."""

    def __init__(self, directory: Path, failures: int = 0, cap: int = 1 << 30) -> None:
        super().__init__(directory)
        self.failures, self.cap, self.calls = failures, cap, 0

    def _store_set(self, names: list[str], headers: list[bytes], payloads: list[Payload]) -> int:
        self.calls += 1
        if self.failures > 0:
            self.failures -= 1
            raise OSError(5, "injected I/O error")
        n = min(self.cap, len(names))
        return super()._store_set(names[:n], headers[:n], payloads[:n])


def test_backup_retries_then_reports_the_contiguous_prefix(tmp_path: Path) -> None:
    store = FlakyStore(tmp_path / "a", failures=2)
    writer = BackupWriter(store, max_retries=3, retry_delay_s=0.001)
    keys, data = chain(10)
    writer.submit(keys, data)
    writer.flush()
    (result,) = writer.poll()
    assert result.complete and result.attempts == 3 and store.stats().failed_ops == 2
    writer.close()
    # A store that refuses pages without failing (full): no retry, the stored prefix only.
    stuck = FlakyStore(tmp_path / "b", cap=3)
    writer = BackupWriter(stuck, max_retries=2, retry_delay_s=0.001)
    writer.submit(keys, data)
    writer.flush()
    (result,) = writer.poll()
    assert (result.stored_pages, result.attempts, result.complete) == (3, 1, False)
    assert stuck.batch_exists(keys) == 3
    writer.close()


def test_backup_thread_survives_a_bug_and_a_full_queue(tmp_path: Path) -> None:
    class Buggy(FileBackend):
        def _store_set(self, *args: object) -> int:  # type: ignore[override]
            raise RuntimeError("bug in a backend")

    gate = threading.Event()

    class Slow(FileBackend):
        def _store_set(self, *args: object) -> int:  # type: ignore[override]
            gate.wait(10)
            return super()._store_set(*args)  # type: ignore[arg-type]

    writer = BackupWriter(Buggy(tmp_path / "a"))
    keys, data = chain(3)
    writer.submit(keys, data)
    writer.submit(keys, data)
    writer.flush()
    results = writer.poll()
    assert [r.error for r in results] == ["RuntimeError: bug in a backend"] * 2
    writer.close()
    slow = BackupWriter(Slow(tmp_path / "b"), max_queued=1)
    assert slow.submit(keys, data) is not None
    deadline = time.monotonic() + 5
    while slow.submit(keys, data) is not None:  # the queue holds one chain past the writer's
        assert time.monotonic() < deadline
    gate.set()
    slow.flush()
    assert all(r.complete for r in slow.poll())
    slow.close()


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class GatedStore(FileBackend):
    """Each read waits for the test to open the gate."""

    def __init__(self, directory: Path) -> None:
        super().__init__(directory)
        self.gate = threading.Event()
        self.entered = threading.Event()

    def _store_get(self, names: list[str]) -> list[Payload | None]:
        self.entered.set()
        self.gate.wait(10)
        return super()._store_get(names)


@pytest.mark.parametrize("policy", list(PrefetchPolicy))
def test_stop_policies(tmp_path: Path, policy: PrefetchPolicy) -> None:
    store = GatedStore(tmp_path)
    keys, data = chain(BATCH_PAGES + 10)
    store.batch_set(keys, data)
    clock = Clock()
    timeout = PrefetchTimeout(base_s=0.5, per_ki_token_s=0.25, max_s=30.0)
    prefetcher = Prefetcher(store, policy, timeout, clock=clock)
    handle = prefetcher.start(keys, num_tokens=4096, expected_bytes=SIZE)
    assert handle.deadline == 100.0 + 0.5 + 0.25 * 4
    assert store.entered.wait(10)
    clock.now = 101.49
    expect_early = policy is PrefetchPolicy.BEST_EFFORT
    assert prefetcher.can_finish(handle) is expect_early
    clock.now = 101.5
    assert prefetcher.can_finish(handle) is (policy is not PrefetchPolicy.WAIT_COMPLETE)
    store.gate.set()
    assert handle._done.wait(10)
    assert prefetcher.can_finish(handle) and handle.arrived_pages == len(keys)
    assert len(prefetcher.finish(handle)) == len(keys)
    prefetcher.close()


def test_finish_early_returns_the_arrived_prefix(tmp_path: Path) -> None:
    store = GatedStore(tmp_path)
    keys, data = chain(BATCH_PAGES * 3)
    store.batch_set(keys, data)
    prefetcher = Prefetcher(store)
    handle = prefetcher.start(keys, num_tokens=2 * len(keys))
    store.gate.set()
    while handle.arrived_pages == 0:
        time.sleep(0.001)
    pages = prefetcher.finish(handle)  # best effort: whatever arrived, a whole-batch prefix
    assert len(pages) % BATCH_PAGES == 0 and [bytes(p) for p in pages] == data[: len(pages)]
    assert prefetcher.pages_in_flight == 0
    prefetcher.close()


def test_cancel_releases_everything(tmp_path: Path) -> None:
    store = GatedStore(tmp_path)
    keys, data = chain(BATCH_PAGES * 2)
    store.batch_set(keys, data)
    prefetcher = Prefetcher(store, PrefetchPolicy.WAIT_COMPLETE)
    handle = prefetcher.start(keys, num_tokens=2 * len(keys))
    assert store.entered.wait(10)
    prefetcher.cancel(handle)  # the worker is inside a read
    assert prefetcher.pages_in_flight == 0 and prefetcher.handles_in_flight == 0
    store.gate.set()
    assert handle._done.wait(10)
    assert handle.arrived_pages == 0  # what it read after the abort was dropped
    assert store.stats().pages_read == BATCH_PAGES  # and it read no further batch
    with pytest.raises(ValueError, match="already"):
        prefetcher.finish(handle)
    prefetcher.close()


def test_prefetch_from_a_redis_that_dies_ends(own_redis: RedisServer) -> None:
    store = open_backend(own_redis.url + "?timeout_s=0.2&breaker_failures=1&breaker_cooldown_s=60")
    keys, data = chain(BATCH_PAGES * 2)
    writer = BackupWriter(store)
    writer.submit(keys, data)
    writer.flush()
    assert writer.poll()[0].complete
    prefetcher = Prefetcher(store, PrefetchPolicy.WAIT_COMPLETE)
    hit = prefetcher.probe(keys)
    own_redis.stop()
    handle = prefetcher.start(keys[:hit], num_tokens=2 * hit)
    assert handle._done.wait(10)  # wait_complete ends: the dead store is a miss, not a hang
    assert prefetcher.can_finish(handle) and prefetcher.finish(handle) == []
    writer.submit(keys, data)
    writer.flush()
    result = writer.poll()[0]
    # L3 is off: the job ends at once, not a single call, retry or sleep.
    assert result.stored_pages == 0 and result.attempts == 0
    assert store.stats().breaker_trips == 1
    writer.close()
    prefetcher.close()


def test_timeout_deadline_is_capped() -> None:
    timeout = PrefetchTimeout(base_s=2.0, per_ki_token_s=0.1, max_s=30.0)
    assert timeout.deadline_s(0) == 2.0
    assert timeout.deadline_s(10240) == pytest.approx(3.0)
    assert timeout.deadline_s(10**7) == 30.0


def test_concurrent_backup_prefetch_and_probes_keep_the_store_consistent(tmp_path: Path) -> None:
    # The cap counts disk blocks: 40 pages of one block, each maybe with a shard folder's.
    store = FileBackend(tmp_path, max_bytes=FileBackend(tmp_path).used_bytes + 80 * 4096)
    writer, prefetcher = BackupWriter(store), Prefetcher(store, num_workers=2)
    chains = [chain(8, start=1000 * i) for i in range(12)]
    stop = threading.Event()

    def probe() -> None:
        while not stop.is_set():
            for keys, _ in chains:
                assert 0 <= store.batch_exists(keys) <= len(keys)
            time.sleep(0.001)  # let the workers have the GIL

    prober = threading.Thread(target=probe)
    prober.start()
    handles = []
    for _ in range(3):
        for keys, data in chains:
            writer.submit(keys, data)
            handles.append(prefetcher.start(keys, num_tokens=2 * len(keys), expected_bytes=SIZE))
    writer.flush()
    for i, handle in enumerate(handles):
        assert handle._done.wait(10)
        keys, data = chains[i % len(chains)]
        pages = prefetcher.finish(handle) if i % 2 else []
        if not i % 2:
            prefetcher.cancel(handle)
        assert [bytes(p) for p in pages] == data[: len(pages)]
    stop.set()
    prober.join()
    assert prefetcher.pages_in_flight == 0 and prefetcher.handles_in_flight == 0
    s = store.stats()
    assert s.pages_corrupt == 0 and s.failed_ops == 0
    assert store.used_bytes == du(tmp_path) <= store.max_bytes
    writer.close()
    prefetcher.close()
