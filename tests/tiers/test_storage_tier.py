"""The L3 store under the host tier, end to end through the replayer and the scheduler: a
second cache on the same file store hits what the first wrote; a store that fails at random
(raises, drops pages) leaks nothing, with invariants checked after every step; model
fingerprints isolate. The Redis case is in `tests/storage/test_storage_tier_redis.py`
(it needs that directory's server fixtures)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from uniradix import CacheConfig, EvictParams, build_cache
from uniradix.sim.replay import NullRunner, ReplayOptions, admissible, run_replay
from uniradix.sim.scheduler import Scheduler, SchedulerConfig
from uniradix.sim.workloads import generate_workload
from uniradix.storage import CircuitBreaker
from uniradix.storage.backend import StoredPage
from uniradix.storage.file_backend import FileBackend
from uniradix.storage.page_format import Payload
from uniradix.tiers.controller import HostTier

DEVICE, HOST, PAGE = 12_000, 24_000, 16


def _options(**kw: object) -> ReplayOptions:
    base: dict[str, object] = dict(
        workload="long_doc_qa",
        config="full",
        full_tokens=DEVICE,
        host_tokens=HOST,
        page_size=PAGE,
        max_requests=16,
        check_invariants=True,
    )
    base.update(kw)
    return ReplayOptions.of(**base)  # type: ignore[arg-type]


def test_second_cache_on_the_same_directory_hits_what_the_first_wrote(tmp_path: Path) -> None:
    url = f"file://{tmp_path / 'l3'}"
    first = run_replay(_options(storage_url=url)).summary
    assert first["storage"]["pages_written"] > 0
    assert first["storage"]["tier"]["stored_pages"] == first["storage"]["pages_written"]
    assert first["storage"]["tier"]["backup_pages_dropped"] == 0  # the replay waits instead
    # Documents the host tier evicted come back from L3 within the run; each fetch serves
    # the admission that made it, so every fetched token counts as a storage hit (not a
    # host hit, as it did before the credit went with the request).
    tier = first["storage"]["tier"]
    assert tier["fetched_tokens"] > 0
    assert first["hit_tokens_by_tier"]["storage"] == tier["fetched_tokens"] == tier["hit_tokens"]
    second = run_replay(_options(storage_url=url)).summary
    by_tier = second["hit_tokens_by_tier"]
    assert by_tier["storage"] > 0 and second["storage"]["pages_read"] > 0
    assert by_tier["device"] + by_tier["host"] + by_tier["storage"] == second["hit_tokens"]
    assert second["hit_tokens"] > first["hit_tokens"]  # the first request's document hits now
    assert not any(second["leaked"].values()) and not any(first["leaked"].values())
    # Another model's fingerprint finds none of it; the same one finds the first prompt.
    prompt = generate_workload("long_doc_qa", 0, 1)[0].prompt.token_ids().tolist()
    stored = []
    for fingerprint in ("uniradix-sim", "other@1"):
        cache = build_cache(
            CacheConfig.of(
                full_tokens=DEVICE,
                host_tokens=HOST,
                page_size=PAGE,
                storage_url=url,
                model_fingerprint=fingerprint,
            )
        )
        assert cache.host_tier.storage is not None
        stored.append(cache.host_tier.storage.prefetch(cache.make_key(prompt)))
        cache.check_invariants({"full": 0})
        cache.host_tier.close()
    assert stored[0] >= len(prompt) // PAGE * PAGE - PAGE and stored[1] == 0


def test_a_hybrid_replay_stores_windows_and_states_and_a_second_run_hits_them(
    tmp_path: Path,
) -> None:
    url = f"file://{tmp_path / 'l3'}"
    first = run_replay(_options(config="hybrid", storage_url=url)).summary
    tier = first["storage"]["tier"]
    aux = tier["aux_stored_pages"]
    assert aux["swa"] > 0 and aux["mamba"] > 0
    # Every page written is a full page, a window page or a state the tier counted stored.
    assert first["storage"]["pages_written"] == tier["stored_pages"] + aux["swa"] + aux["mamba"]
    second = run_replay(_options(config="hybrid", storage_url=url)).summary
    by_tier = second["hit_tokens_by_tier"]
    assert by_tier["storage"] > 0 and second["storage"]["pages_read"] > 0
    assert by_tier["device"] + by_tier["host"] + by_tier["storage"] == second["hit_tokens"]
    assert second["hit_tokens"] > first["hit_tokens"]


def test_replay_without_storage_reports_no_storage_block() -> None:
    summary = run_replay(_options(max_requests=4)).summary
    assert "storage" not in summary and "storage" not in summary["hit_tokens_by_tier"]


def test_storage_needs_a_host_tier(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="host tier"):
        build_cache(CacheConfig.of(full_tokens=64, storage_url=f"file://{tmp_path}"))


class FlakyFileBackend(FileBackend):
    """A file store whose operations raise `OSError` or lose pages at random."""

    def __init__(self, directory: Path, seed: int, fail: float) -> None:
        super().__init__(directory, breaker=CircuitBreaker(failure_threshold=2, cooldown_s=0.0))
        self.rng = random.Random(seed)
        self.fail = fail

    def _maybe_fail(self) -> None:
        if self.rng.random() < self.fail:
            raise OSError("injected store failure")

    def _store_exists_prefix(self, names: list[str]) -> int:
        self._maybe_fail()
        return super()._store_exists_prefix(names)

    def _store_get(self, names: list[str]) -> list[StoredPage | None]:
        self._maybe_fail()
        pages = super()._store_get(names)
        cut = self.rng.randrange(len(pages) + 1) if self.rng.random() < self.fail else len(pages)
        return pages[:cut] + [None] * (len(pages) - cut)  # a page lost mid-batch

    def _store_set(self, names: list[str], headers: list[bytes], payloads: list[Payload]) -> int:
        self._maybe_fail()
        return super()._store_set(names, headers, payloads)


# A full+SWA+Mamba cache: L3 stores windows and states beside the full pages.
HYBRID: dict[str, object] = dict(
    sliding_window=1024, swa_tokens=DEVICE // 2, mamba_slots=64, mamba_extra_buffer=True
)


def _run_scheduler(
    backend: FileBackend, seed: int, policy: str = "wait_complete", hybrid: bool = False
) -> tuple[int, HostTier]:
    cache = build_cache(
        CacheConfig.of(
            full_tokens=DEVICE,
            host_tokens=HOST,
            page_size=PAGE,
            max_context_len=DEVICE,
            storage_backend=backend,
            prefetch_policy=policy,
            **(HYBRID if hybrid else {}),  # type: ignore[arg-type]
        )
    )
    specs = admissible(generate_workload("long_doc_qa", seed, 16), DEVICE, PAGE)
    scheduler = Scheduler(cache, NullRunner(), specs, SchedulerConfig(check_invariants=True))
    scheduler.run()
    tier = cache.host_tier
    assert isinstance(tier, HostTier) and tier.storage is not None
    tier.drain()
    tier.storage.flush()
    scheduler.check_invariants()
    fetched = tier.storage.stats.fetched_tokens
    # Every pool back at the end: nothing locked, pinned or reserved survives.
    assert cache.protected_size() == 0 and not tier.writes and not tier.loads
    cache.evict(EvictParams(num_tokens=cache.evictable_size()))
    tier.evict_host(tier.full.host_tokens)
    cache.check_invariants({"full": 0})
    for name in tier.host_pools.names():  # host aux pools too: every window and state back
        pool = tier.host_pools.pool(name)
        assert pool.available_size() == pool.capacity, name
    assert cache.pools.available() == cache.pools.capacities()
    assert tier.storage.reserved_tokens == 0 and not tier.storage.prefetches.runs
    tier.close()
    return fetched, tier


@pytest.mark.parametrize(
    ("seed", "policy", "hybrid"),
    [
        (0, "wait_complete", False),
        (1, "wait_complete", False),
        (0, "best_effort", False),
        (1, "timeout", False),
        (0, "wait_complete", True),
        (1, "timeout", True),
    ],
)
def test_injected_store_failures_leak_nothing(
    tmp_path: Path, seed: int, policy: str, hybrid: bool
) -> None:
    healthy = FileBackend(tmp_path)
    _, written = _run_scheduler(healthy, seed, hybrid=hybrid)  # fills the store
    if hybrid:
        assert written.storage is not None
        stored = written.storage.stats.aux_stored_pages
        assert stored.get("swa", 0) > 0 and stored.get("mamba", 0) > 0
    flaky = FlakyFileBackend(tmp_path, seed, fail=0.3)
    fetched, _ = _run_scheduler(flaky, seed, policy, hybrid)
    stats = flaky.stats()
    assert stats.failed_ops > 0  # the faults did happen ...
    assert stats.pages_missed > 0
    if policy != "best_effort":  # (best effort takes what came in time: maybe nothing)
        assert fetched > 0  # ... and pages still came through between them


def test_instances_share_one_store(tmp_path: Path) -> None:
    from uniradix.sim.cluster import Cluster

    options = _options(workload="agentic", max_requests=40)
    alone = Cluster(options, 2, "round-robin").run()
    shared = Cluster(options.updated(storage_url=f"file://{tmp_path}"), 2, "round-robin").run()
    assert alone["storage"] is None and "storage" not in alone["hit_tokens_by_tier"]
    assert shared["storage"]["pages_written"] > 0 and shared["storage"]["pages_read"] > 0
    assert sum(shared["hit_tokens_by_tier"].values()) == shared["hit_tokens"]
    assert shared["hit_rate"] > alone["hit_rate"]  # one instance reads what the other wrote
    with pytest.raises(ValueError, match="sessions"):
        Cluster(options.updated(sessions=True), 2, "round-robin").run()


def test_instances_read_each_other_with_a_host_no_bigger_than_the_device(tmp_path: Path) -> None:
    """Under write-through a host pool the size of the device fills with copies of device
    nodes: a prefetch drops some of those to make room instead of failing to reserve."""
    from uniradix.sim.cluster import Cluster

    options = _options(workload="agentic", max_requests=80, full_tokens=6000, host_tokens=6000)
    alone = Cluster(options, 2, "round-robin").run()
    shared = Cluster(options.updated(storage_url=f"file://{tmp_path}"), 2, "round-robin").run()
    tiers = [inst["storage_tier"] for inst in shared["instances"]]
    assert sum(t["probed_pages"] for t in tiers) > 0
    assert all(t["reserve_failed"] == 0 for t in tiers)
    assert shared["hit_tokens_by_tier"]["storage"] > 0
    assert shared["hit_rate"] > alone["hit_rate"]
    assert all(sum(inst["leaked"].values()) == 0 for inst in shared["instances"])
