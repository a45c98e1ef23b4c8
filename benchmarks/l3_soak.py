"""L3 fault soak: random cache operations through the scheduler, with the host tier and an L3
store on, while the store is killed, filled, slowed and corrupted at random times.

Lanes: each config (full, swa, mamba, hybrid) on each store: a real `redis-server` reached
through an in-process delaying proxy (`delay_proxy`), and a file store. The traffic is
`soak`'s (random prompts from shared prefixes, pools small enough to evict, demote, load back
and prefetch all the time; host transfers acked after a random delay in random order), on
pools with one small layer each, so every L3 page has bytes of its own (the host pools start
random): a page read back is checked against what was written under its key (`l3_watch`).
Per round (300 requests) a random page size, write policy and prefetch stop policy
(`best_effort` a third of the time, else `timeout`, base 0.5 s); prefetches start past 8
tokens; 32 shared prefixes (`soak` has 6), more than device and host hold, so L3 is read.

Faults (`store_faults`, one at a time, exponential gaps of mean `--gap-s`, each held
`--hold-s` seconds): Redis killed and restarted empty, full (`noeviction`), slowed (proxy
latency 10-300 ms each way, the last above the 0.2 s client timeout), pages corrupted in the
server (flipped byte, truncated, deleted); file pages flipped, truncated, deleted.

Checked: `check_invariants()` every 1,000 operations and at each round's end, then every slot
of every device and host pool back (leaks); wrong data (must be 0); the longest wait on the
Redis server (connect or reply: bounded by the 0.2 s timeout), the longest store call, the
longest cache call and prefetch wait; L3 hits in the 1,000 operations before each fault,
while it lasted and after it was removed. An operation is one public cache call (`soak`'s,
and the storage tier's prefetch start / wait / finish / cancel).

    python -m benchmarks.l3_soak [--ops 1000000] [--seed 0] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from bisect import bisect_right
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import redis
import torch
from redis.backoff import NoBackoff
from redis.retry import Retry

from benchmarks.delay_proxy import DelayProxy
from benchmarks.l3_watch import Longest, NoticeCounter, StallMeter, StoreWatch, TimedConnection
from benchmarks.redis_servers import RedisProcess
from benchmarks.soak import ShuffledEngine, Soak, random_specs
from benchmarks.store_faults import FaultInjector, FileFaults, RedisFaults
from uniradix import CacheConfig, EvictParams, UnifiedRadixCache, build_cache
from uniradix.errors import InvariantError
from uniradix.sim.replay import NullRunner
from uniradix.sim.scheduler import Scheduler
from uniradix.sim.scheduler_config import SchedulerConfig
from uniradix.storage.backend import StorageBackend
from uniradix.storage.breaker import CircuitBreaker
from uniradix.storage.file_backend import FileBackend
from uniradix.storage.io import PrefetchTimeout
from uniradix.storage.redis_backend import RedisBackend
from uniradix.tiers.controller import HostTier
from uniradix.tiers.copiers import KVCopier, MambaCopier
from uniradix.tiers.storage_tier import StorageTier

TIMEOUT_S = 0.2  # the Redis client's connect and reply timeout, the file store's call timeout
# A wait is counted as past its timeout beyond this: the thread that timed out may wait its
# turn for a core (2 cores, load 6-9) and for the interpreter lock before it runs again.
SLACK_S = 0.05
PREFETCH_TIMEOUT = PrefetchTimeout(base_s=0.5, per_ki_token_s=0.1, max_s=2.0)
STORAGE_COUNTED = ("start_prefetch", "wait_prefetch", "finish_prefetch", "cancel_prefetch")
WINDOW_OPS = 1000  # operations before a fault / after its removal whose L3 hits are compared
FILE_CAP_BYTES = 64 << 20
PREFIXES = 32  # shared prefixes (`soak` has 6): more than device + host hold, so L3 hits


def breaker() -> CircuitBreaker:
    """Off after 3 failures in a row, probed again after 0.25 s, at most 2 s."""
    return CircuitBreaker(failure_threshold=3, cooldown_s=0.25, max_cooldown_s=2.0)


class Lane:
    """One config on one store: the counters that outlive its rounds' caches."""

    def __init__(self, config: str, store: str) -> None:
        self.config, self.store = config, store
        self.ops_before = 0  # operations of the finished rounds
        self.hits_before = 0  # their L3 hit tokens
        self.soak: LaneSoak | None = None
        self.samples: list[tuple[int, int]] = [(0, 0)]  # (operations, L3 hit tokens)
        self.calls = Longest()  # the longest public cache call, by name

    def ops(self) -> int:
        return self.ops_before + (0 if self.soak is None else self.soak.ops)

    def hits(self) -> int:
        return self.hits_before + (0 if self.soak is None else self.soak.hit_tokens())

    def hits_at(self, ops: int) -> int:
        """L3 hit tokens when `ops` operations were done (the last sample at or before)."""
        i = bisect_right(self.samples, (ops, 1 << 62)) - 1
        return self.samples[max(i, 0)][1]


class LaneSoak(Soak):
    """`soak.Soak` on a cache with L3: counts the storage tier's prefetch calls too, times
    every call, and samples the lane's L3 hits."""

    def __init__(self, cache: UnifiedRadixCache, every: int, lane: Lane) -> None:
        self.lane = lane
        self.storage = _storage(cache)
        super().__init__(cache, every)
        for name in STORAGE_COUNTED:
            setattr(self.storage, name, self._count(getattr(self.storage, name)))

    def _count(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        name, lane = fn.__name__, self.lane

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.ops += 1
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                lane.calls.note(name, time.perf_counter() - t0)

        return counted

    def hit_tokens(self) -> int:
        return self.storage.stats.hit_tokens

    def on_step(self, scheduler: Scheduler) -> None:
        super().on_step(scheduler)
        if self.lane.ops() - self.lane.samples[-1][0] >= 100:
            self.lane.samples.append((self.lane.ops(), self.lane.hits()))


def _storage(cache: UnifiedRadixCache) -> StorageTier:
    tier = cache.host_tier
    assert isinstance(tier, HostTier) and tier.storage is not None
    return tier.storage


def build(
    name: str, store: StorageBackend, page_size: int, rng: random.Random
) -> UnifiedRadixCache:
    swa, mamba = name in ("swa", "hybrid"), name in ("mamba", "hybrid")
    full_tokens = 512 * page_size if page_size > 1 else 512
    cache = build_cache(
        CacheConfig.of(
            full_tokens=full_tokens,
            page_size=page_size,
            max_context_len=512,
            max_running_requests=8,
            sliding_window=16 if swa else None,
            swa_tokens=full_tokens // 2 if swa else None,
            mamba_slots=40 if mamba else None,
            mamba_extra_buffer=mamba and page_size > 1,
            host_tokens=2 * full_tokens,
            write_policy=rng.choice(["write_through", "write_through_selective", "write_back"]),
            num_full_layers=1,
            num_swa_layers=1 if swa else 0,
            num_mamba_layers=1 if mamba else 0,
            head_dim=8,
            mamba_conv_shape=(2,),
            mamba_temporal_shape=(4,),
            storage_backend=store,
            prefetch_threshold=8,
            prefetch_policy=rng.choice(["best_effort", "timeout", "timeout"]),
        )
    )
    tier = cache.host_tier
    assert isinstance(tier, HostTier)
    gen = torch.Generator().manual_seed(rng.randrange(1 << 31))
    for copier in tier.engine.copiers.values():  # type: ignore[attr-defined]
        if isinstance(copier, KVCopier):
            pool = copier.host_pool
            pages = np.arange(1, pool.num_pages)
            floats = torch.rand(len(pages), pool.page_nbytes() // 4, generator=gen)
            pool.set_page_bytes(pages, floats.view(torch.uint8))
        elif isinstance(copier, MambaCopier):
            for states in (copier.host_states.conv_states, copier.host_states.temporal_states):
                states.copy_(torch.rand(states.shape, generator=gen))
    tier.engine = ShuffledEngine(rng)
    _storage(cache).prefetcher.timeout = PREFETCH_TIMEOUT
    return cache


def run_round(lane: Lane, store: StorageBackend, rng: random.Random) -> dict[str, Any]:
    """One cache, 300 requests; its invariant checks, violations and leaked slots."""
    page_size = rng.choice([1, 2, 4])
    cache = build(lane.config, store, page_size, rng)
    soak = lane.soak = LaneSoak(cache, 1000, lane)
    specs = random_specs(rng, 300, page_size, PREFIXES)
    config = SchedulerConfig(rng.randrange(1, 8), 16 * page_size * rng.randrange(1, 5), 0.3)
    scheduler = Scheduler(cache, NullRunner(), specs, config, soak)
    tier, storage = cache.host_tier, soak.storage
    assert isinstance(tier, HostTier)
    leaks: dict[str, int] = {}
    violations = 0
    try:
        scheduler.run()
        tier.drain()
        storage.flush()
        scheduler.check_invariants()
        capacities = cache.pools.capacities()
        cache.evict(EvictParams(capacities["full"], capacities.get("swa", 0), 10**6))
        tier.evict_host(tier.host_pools.full.capacity)
        capacities |= tier.host_pools.capacities()
        cache.check_invariants(dict.fromkeys(["full", "swa", "mamba", "req"], 0))
        available = cache.pools.available() | tier.host_pools.available()
        for pool, cap in capacities.items():
            if available[pool] != cap:
                leaks[pool] = cap - available[pool]
        for name, held in (
            ("prefetch_reserved", storage.reserved_tokens),
            ("prefetch_in_flight", storage.prefetcher.pages_in_flight),
        ):
            if held:
                leaks[name] = held
    except InvariantError as exc:
        violations += 1
        print(f"{lane.config}/{lane.store}: {exc}", file=sys.stderr)
    tier.close()
    lane.soak = None
    lane.ops_before += soak.ops
    lane.hits_before += storage.stats.hit_tokens
    return {"checks": soak.checks + 1, "violations": violations, "leaks": leaks}


@contextmanager
def open_store(kind: str, work: Path, hold_s: tuple[float, float]) -> Iterator[Any]:
    """The store of a lane, its faults, and what tears it down."""
    if kind == "file":
        backend = FileBackend(
            work / "file", max_bytes=FILE_CAP_BYTES, breaker=breaker(), timeout_s=TIMEOUT_S
        )
        try:
            yield backend, FileFaults(work / "file").kinds()
        finally:
            backend.close()
        return
    server = RedisProcess(work / "redis").start()
    proxy = DelayProxy(server.port).start()
    pool = redis.ConnectionPool(
        connection_class=TimedConnection,
        host="127.0.0.1",
        port=proxy.port,
        socket_timeout=TIMEOUT_S,
        socket_connect_timeout=TIMEOUT_S,
        retry=Retry(NoBackoff(), 0),
    )
    store = RedisBackend(redis.Redis, client_kwargs={"connection_pool": pool}, breaker=breaker())
    try:
        yield store, RedisFaults(server, proxy, hold_s).kinds()
    finally:
        store.close()
        proxy.close()
        server.stop()


def soak_lane(
    config: str,
    store: str,
    ops: int,
    seed: int,
    gap_s: float,
    hold_s: tuple[float, float],
    min_each: int = 0,
) -> dict[str, Any]:
    """Rounds of one config on one store until `ops` operations are done and each kind of
    fault was injected `min_each` times."""
    rng = random.Random(seed)
    lane = Lane(config, store)
    checks = violations = 0
    leaks: dict[str, int] = {}
    work = Path(tempfile.mkdtemp(prefix="uniradix-l3-soak-"))
    with (
        StallMeter() as stalls,
        NoticeCounter() as notices,
        open_store(store, work, hold_s) as (backend, kinds),
    ):
        watch = StoreWatch(backend, TIMEOUT_S + SLACK_S)
        injector = FaultInjector(kinds, seed, gap_s, lane.ops).start()
        t0 = time.perf_counter()
        try:
            while lane.ops() < ops or injector.fewest() < min_each:
                row = run_round(lane, backend, rng)
                checks += row["checks"]
                violations += row["violations"]
                for pool, n in row["leaks"].items():
                    leaks[pool] = leaks.get(pool, 0) + n
        finally:
            injector.stop()
        wall = time.perf_counter() - t0
        stats = asdict(backend.stats())
    lane.samples.append((lane.ops(), lane.hits()))
    faults = []
    for f in injector.faults:
        before = lane.hits_at(f.ops_start) - lane.hits_at(f.ops_start - WINDOW_OPS)
        during = lane.hits_at(f.ops_end) - lane.hits_at(f.ops_start)
        after = lane.hits_at(f.ops_end + WINDOW_OPS) - lane.hits_at(f.ops_end)
        faults.append({**asdict(f), "hits_before": before, "hits_during": during,
                       "hits_after": after})  # fmt: skip
    return {
        "config": config,
        "store": store,
        "ops": lane.ops(),
        "wall_s": wall,
        "ops_per_s": lane.ops() / wall,
        "invariant_checks": checks,
        "violations": violations,
        "leaked": leaks,
        "pages_checked": watch.pages_checked,
        "wrong_data": watch.wrong_data,
        "wrong_examples": watch.wrong_examples,
        "l3_hit_tokens": lane.hits(),
        "longest_cache_call_s": lane.calls.seconds,
        "longest_store_call_s": watch.calls.seconds,
        "store_calls": watch.calls.count,
        "store_calls_over": watch.calls.over,
        "faults": faults,
        "fault_errors": injector.errors,
        "notices": notices.counts,
        "process_stall_s": stalls.longest_s,
        "process_stalls": stalls.stalls,
        "store_stats": stats,
    }


def main(argv: list[str] | None = None) -> int:
    from benchmarks.l3_soak_report import render

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=1_000_000, help="in all, over every lane")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--configs", default="full,swa,mamba,hybrid")
    parser.add_argument("--stores", default="redis,file")
    parser.add_argument("--gap-s", type=float, default=1.0, help="mean gap between faults")
    parser.add_argument("--hold-s", default="0.3,1.5", help="how long a fault lasts: min,max")
    parser.add_argument(
        "--min-each",
        type=int,
        default=0,
        help="run each lane on until every kind of fault came this often",
    )
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args(argv)
    low, high = (float(x) for x in args.hold_s.split(","))
    TimedConnection.waits = Longest(TIMEOUT_S + SLACK_S)
    lanes = [(c, s) for c in args.configs.split(",") for s in args.stores.split(",")]
    rows = []
    for i, (config, store) in enumerate(lanes):
        row = soak_lane(config, store, args.ops // len(lanes), args.seed + i, args.gap_s,
                        (low, high), args.min_each)  # fmt: skip
        rows.append(row)
        print(
            f"{config:>7} {store:>6} {row['ops']:>8} ops {row['ops_per_s']:>7.0f} ops/s "
            f"{len(row['faults']):>4} faults, violations {row['violations']} "
            f"leaked {row['leaked']} wrong data {row['wrong_data']}",
            flush=True,
        )
    print(render(rows, TimedConnection.waits, TIMEOUT_S, PREFETCH_TIMEOUT.max_s, WINDOW_OPS))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    bad = sum(r["violations"] + sum(r["leaked"].values()) + r["wrong_data"] for r in rows)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
