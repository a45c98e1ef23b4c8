"""Soak: a million random cache operations through the scheduler, with and without the host
tier, checking every invariant every 1,000 operations and every slot at the end.

Configs: full, swa, mamba, hybrid, each without a host tier and with one under each write
policy, its transfers acked after a random delay and in random order. Traffic: random
prompts drawn from a few shared prefixes, branching and repeating, with pools small enough
to evict, demote, load back and retract all the time. An operation is one public cache
call (match, insert, lock, unlock, evict, request publish/finish, window frees, load-back,
ack drains, host eviction).

    .venv/bin/python benchmarks/soak.py [--ops 1000000] [--seed 0] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from uniradix import CacheConfig, EvictParams, UnifiedRadixCache, build_cache
from uniradix.errors import InvariantError
from uniradix.sim.batch import NullListener
from uniradix.sim.replay import NullRunner
from uniradix.sim.request_spec import RequestSpec, TokenPrompt
from uniradix.sim.scheduler import Scheduler, SchedulerConfig
from uniradix.tiers.controller import HostTier
from uniradix.tiers.transfer import CopyOp, Direction

COUNTED = (
    "match_prefix",
    "insert",
    "evict",
    "inc_lock_ref",
    "dec_lock_ref",
    "cache_unfinished_req",
    "cache_finished_req",
    "free_out_of_window_slots",
    "release_window_lock",
)
TIER_COUNTED = ("load_back", "writing_check", "loading_check", "evict_host")


class ShuffledEngine:
    """Acks each batch after 0-3 polls, in random order (accounting only)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.bytes_moved = {Direction.D2H: 0, Direction.H2D: 0}
        self._next = 1
        self._pending: dict[int, int] = {}  # ticket -> polls left
        self._done: list[int] = []

    def submit(self, ops: Sequence[CopyOp]) -> int:
        ticket, self._next = self._next, self._next + 1
        self._pending[ticket] = self.rng.randrange(4)
        return ticket

    def poll(self) -> list[int]:
        for t in list(self._pending):
            self._pending[t] -= 1
            if self._pending[t] < 0:
                del self._pending[t]
                self._done.append(t)
        self.rng.shuffle(self._done)
        done, self._done = self._done, []
        return done

    def failed(self) -> list[int]:
        return []

    def wait(self, ticket: int) -> None:
        if self._pending.pop(ticket, None) is not None:
            self._done.append(ticket)

    def close(self) -> None:
        return


class Soak(NullListener):
    def __init__(self, cache: UnifiedRadixCache, every: int) -> None:
        self.ops = 0
        self.every = self.next_check = every
        self.checks = 0
        for name in COUNTED:
            setattr(cache, name, self._count(getattr(cache, name)))
        if isinstance(cache.host_tier, HostTier):
            for name in TIER_COUNTED:
                setattr(cache.host_tier, name, self._count(getattr(cache.host_tier, name)))

    def _count(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any, **kwargs: Any) -> Any:
            self.ops += 1
            return fn(*args, **kwargs)

        return counted

    def on_step(self, scheduler: Scheduler) -> None:
        if self.ops >= self.next_check:
            scheduler.check_invariants()
            self.checks += 1
            self.next_check = self.ops + self.every
        tier = scheduler.cache.host_tier
        if isinstance(tier, HostTier) and scheduler.num_steps % 7 == 0:
            tier.evict_host(64)  # host pressure from elsewhere


def random_specs(
    rng: random.Random, num: int, page_size: int, num_prefixes: int = 6
) -> list[RequestSpec]:
    prefixes = [
        [rng.randrange(50) for _ in range(rng.randrange(8, 96))] for _ in range(num_prefixes)
    ]
    specs = []
    for rid in range(num):
        prompt = list(rng.choice(prefixes))
        prompt = prompt[: rng.randrange(1, len(prompt) + 1)]
        prompt += [rng.randrange(50) for _ in range(rng.randrange(1, 48))]
        outputs = np.array([rng.randrange(50) for _ in range(rng.randrange(1, 12))])
        specs.append(RequestSpec(rid, TokenPrompt(prompt), outputs, rid))
        if rng.random() < 0.2:
            prefixes[rng.randrange(len(prefixes))] = prompt + list(outputs)
    return specs


def build(name: str, policy: str | None, page_size: int, rng: random.Random) -> UnifiedRadixCache:
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
            host_tokens=2 * full_tokens if policy else None,
            write_policy=policy or "write_through",
        )
    )
    if isinstance(cache.host_tier, HostTier):
        cache.host_tier.engine = ShuffledEngine(rng)
    return cache


def soak_one(name: str, policy: str | None, ops: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    done_ops = checks = steps = violations = 0
    leaks: dict[str, int] = {}
    tier_stats: dict[str, int] = {}
    t0 = time.perf_counter()
    while done_ops < ops:
        page_size = rng.choice([1, 2, 4])
        cache = build(name, policy, page_size, rng)
        soak = Soak(cache, 1000)
        specs = random_specs(rng, 300, page_size)
        config = SchedulerConfig(rng.randrange(1, 8), 16 * page_size * rng.randrange(1, 5), 0.3)
        scheduler = Scheduler(cache, NullRunner(), specs, config, soak)
        try:
            scheduler.run()
            cache.host_tier.drain()
            scheduler.check_invariants()
            capacities = cache.pools.capacities()
            cache.evict(EvictParams(capacities["full"], capacities.get("swa", 0), 10**6))
            tier = cache.host_tier
            if isinstance(tier, HostTier):
                for key, value in tier.stats.as_dict().items():
                    if isinstance(value, dict):  # per auxiliary component
                        for aux, num in value.items():
                            tier_stats[f"{key}_{aux}"] = tier_stats.get(f"{key}_{aux}", 0) + num
                    else:
                        tier_stats[key] = tier_stats.get(key, 0) + value
                tier.evict_host(tier.host_pools.full.capacity)
                capacities |= tier.host_pools.capacities()
            cache.check_invariants(dict.fromkeys(["full", "swa", "mamba", "req"], 0))
            available = cache.pools.available()
            if isinstance(tier, HostTier):
                available |= tier.host_pools.available()
            for pool, cap in capacities.items():
                if available[pool] != cap:
                    leaks[pool] = leaks.get(pool, 0) + cap - available[pool]
        except InvariantError as exc:
            violations += 1
            print(f"{name}/{policy}: {exc}", file=sys.stderr)
        done_ops += soak.ops
        checks += soak.checks + 1
        steps += scheduler.num_steps
    wall = time.perf_counter() - t0
    return {
        "config": name,
        "write_policy": policy,
        "ops": done_ops,
        "ops_per_s": done_ops / wall,
        "invariant_checks": checks,
        "violations": violations,
        "leaked": leaks,
        "steps": steps,
        "wall_s": wall,
        "host_tier": tier_stats,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=1_000_000, help="in all, over every run")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args()
    policies = (None, "write_through", "write_through_selective", "write_back")
    runs = [(c, p) for c in ("full", "swa", "mamba", "hybrid") for p in policies]
    rows = []
    for i, (name, policy) in enumerate(runs):
        row = soak_one(name, policy, args.ops // len(runs), args.seed + i)
        rows.append(row)
        print(
            f"{name:>7} {policy or 'no host tier':>24} {row['ops']:>8} ops "
            f"{row['ops_per_s']:>8.0f} ops/s {row['invariant_checks']:>5} checks "
            f"{row['violations']} violations leaked {row['leaked']}",
            flush=True,
        )
    total = sum(r["ops"] for r in rows)
    bad = sum(r["violations"] for r in rows) + sum(sum(r["leaked"].values()) for r in rows)
    print(f"total {total} ops, {sum(r['wall_s'] for r in rows):.0f} s, violations+leaks {bad}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
