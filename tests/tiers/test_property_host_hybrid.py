"""Random request traffic through the scheduler on every config (full, full+SWA, full+Mamba,
full+SWA+Mamba) with a host tier under every write policy: transfer acks delayed and
released in random order, host pressure from elsewhere (full, SWA and Mamba host
eviction) and load-back copies that fail at random; `check_invariants()` after every
scheduler step, and at the end every slot of every pool, device and host, back."""

from __future__ import annotations

import random
from collections.abc import Sequence

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from uniradix import CacheConfig, EvictParams, build_cache
from uniradix.sim.batch import NullListener
from uniradix.sim.replay import NullRunner
from uniradix.sim.request_spec import RequestSpec, TokenPrompt
from uniradix.sim.scheduler import Scheduler, SchedulerConfig
from uniradix.tiers.controller import HostTier
from uniradix.tiers.transfer import CopyOp, Direction

CONFIGS = ("full", "swa", "mamba", "hybrid")
POLICIES = ("write_through", "write_through_selective", "write_back")


class RandomAckEngine:
    """Acks each batch after 0-3 polls, in random order; a load-back batch fails with
    probability `fail_rate` (its copy "raised")."""

    def __init__(self, rng: random.Random, fail_rate: float) -> None:
        self.rng = rng
        self.fail_rate = fail_rate
        self.bytes_moved = {Direction.D2H: 0, Direction.H2D: 0}
        self._next = 1
        self._pending: dict[int, int] = {}
        self._done: list[int] = []
        self._failing: set[int] = set()
        self._failed: list[int] = []

    def submit(self, ops: Sequence[CopyOp]) -> int:
        ticket, self._next = self._next, self._next + 1
        self._pending[ticket] = self.rng.randrange(4)
        if ops and ops[0].direction is Direction.H2D and self.rng.random() < self.fail_rate:
            self._failing.add(ticket)
        return ticket

    def poll(self) -> list[int]:
        for t in list(self._pending):
            self._pending[t] -= 1
            if self._pending[t] < 0:
                del self._pending[t]
                self._done.append(t)
        self.rng.shuffle(self._done)
        done, self._done = self._done, []
        self._failed += [t for t in done if t in self._failing]
        return done

    def failed(self) -> list[int]:
        failed, self._failed = self._failed, []
        return failed

    def wait(self, ticket: int) -> None:
        if self._pending.pop(ticket, None) is not None:
            self._done.append(ticket)

    def close(self) -> None:
        return


class Checker(NullListener):
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.steps = 0

    def on_step(self, scheduler: Scheduler) -> None:
        scheduler.check_invariants()
        self.steps += 1
        tier = scheduler.cache.host_tier
        assert isinstance(tier, HostTier)
        if self.rng.random() < 0.2:  # host pressure from elsewhere
            tier.evict_host(self.rng.randrange(32))
            for c in tier.aux:
                tier.evict_host_aux(c.name, self.rng.randrange(8))
            scheduler.check_invariants()


def specs_for(rng: random.Random, num: int) -> list[RequestSpec]:
    prefixes = [[rng.randrange(20) for _ in range(rng.randrange(4, 40))] for _ in range(3)]
    specs = []
    for rid in range(num):
        prompt = list(rng.choice(prefixes))[: rng.randrange(1, 41)]
        prompt += [rng.randrange(20) for _ in range(rng.randrange(1, 16))]
        outputs = np.array([rng.randrange(20) for _ in range(rng.randrange(1, 6))])
        specs.append(RequestSpec(rid, TokenPrompt(prompt), outputs, rid))
    return specs


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    config=st.sampled_from(CONFIGS),
    policy=st.sampled_from(POLICIES),
    page_size=st.sampled_from([1, 2, 4]),
    host_ratio=st.sampled_from([0.5, 2.0]),
    seed=st.integers(0, 2**31),
)
def test_scheduler_traffic_with_a_host_tier_keeps_every_pool_exact(
    config, policy, page_size, host_ratio, seed
):
    rng = random.Random(seed)
    swa, mamba = config in ("swa", "hybrid"), config in ("mamba", "hybrid")
    full_tokens = 96 * page_size
    cache = build_cache(
        CacheConfig.of(
            full_tokens=full_tokens,
            page_size=page_size,
            max_context_len=256,
            max_running_requests=6,
            sliding_window=6 if swa else None,
            swa_tokens=full_tokens // 2 if swa else None,
            mamba_slots=20 if mamba else None,
            mamba_extra_buffer=mamba and page_size > 1,
            hicache_ratio=host_ratio,
            write_policy=policy,
        )
    )
    tier = cache.host_tier
    assert isinstance(tier, HostTier)
    tier.engine = RandomAckEngine(rng, fail_rate=0.15)
    checker = Checker(rng)
    sched_config = SchedulerConfig(rng.randrange(1, 5), 8 * page_size * rng.randrange(1, 4), 0.3)
    scheduler = Scheduler(cache, NullRunner(), specs_for(rng, 30), sched_config, checker)
    scheduler.run()
    tier.drain()
    scheduler.check_invariants()
    assert not tier.writes and not tier.loads and cache.protected_size() == 0
    capacities = cache.pools.capacities()
    cache.evict(EvictParams(capacities["full"], capacities.get("swa", 0), 10**6))
    tier.evict_host(tier.host_pools.full.capacity)
    cache.check_invariants(dict.fromkeys(["full", "swa", "mamba", "req"], 0))
    assert not cache.tree.root.children
    assert cache.pools.available() == capacities
    assert tier.host_pools.available() == tier.host_pools.capacities()
