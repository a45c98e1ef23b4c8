"""Random request traffic on a full-attention cache with a host tier, under every write
policy, with transfer acks delayed and released in random order: invariants (device and
host pools, host data rules, transfer marks) after every step, every slot back at the end."""

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.driver import MiniScheduler
from tests.tiers.builders import host_cache
from tests.tiers.held_engine import HeldEngine
from uniradix import EvictParams, MatchPrefixParams, RadixKey, UnifiedRadixCache
from uniradix.tiers.controller import HostTier

PREFIXES = [[1, 2, 3, 4, 5, 6, 7, 8], [1, 2, 3, 4, 9, 9], [20, 21, 22, 23], []]

op = st.one_of(
    st.tuples(
        st.just("admit"), st.integers(0, 3), st.lists(st.integers(0, 6), min_size=1, max_size=12)
    ),
    st.tuples(st.just("chunk"), st.integers(0, 7), st.integers(1, 9)),
    st.tuples(st.just("decode"), st.integers(0, 7), st.integers(0, 6)),
    st.tuples(st.just("finish"), st.integers(0, 7), st.booleans()),
    st.tuples(st.just("evict"), st.integers(0, 40), st.none()),
    st.tuples(st.just("evict_host"), st.integers(0, 40), st.none()),
    st.tuples(st.just("ack"), st.integers(0, 7), st.none()),
    st.tuples(st.just("drain"), st.none(), st.none()),
    st.tuples(st.just("lookup"), st.integers(0, 3), st.lists(st.integers(0, 6), max_size=6)),
)


def apply_op(
    sched: MiniScheduler,
    cache: UnifiedRadixCache,
    tier: HostTier,
    engine: HeldEngine,
    name: str,
    a: Any,
    b: Any,
) -> None:
    """One random operation drawn from `op` on a host-tier cache driven by `sched`."""
    running = sched.running
    if name == "admit":
        sched.admit(PREFIXES[a] + b)
    elif name == "lookup":
        cache.match_prefix(MatchPrefixParams(RadixKey(PREFIXES[a] + b)))
    elif name == "evict":
        cache.evict(EvictParams(num_tokens=a))
    elif name == "evict_host":
        tier.evict_host(a)
    elif name == "ack":
        if engine.held:
            engine.release(engine.held[a % len(engine.held)])
        tier.writing_check()
        tier.loading_check()
    elif name == "drain":
        tier.drain()
    elif running:
        req = running[a % len(running)]
        remaining = len(req.token_ids) - req.kv_committed_len
        if name == "chunk" and remaining > 0:
            sched.chunk(req, min(b, remaining))
        elif name == "decode":
            req.token_ids.append(b)
            if not sched.extend(req, len(req.token_ids) - req.kv_committed_len):
                req.token_ids.pop()
        elif name == "finish":
            sched.finish(req, is_insert=b)


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    page_size=st.sampled_from([1, 2, 4]),
    write_policy=st.sampled_from(["write_through", "write_through_selective", "write_back"]),
    host_tokens=st.sampled_from([16, 64]),
    ops=st.lists(op, min_size=1, max_size=40),
)
def test_random_traffic_with_reordered_acks_keeps_invariants(
    page_size, write_policy, host_tokens, ops
):
    cache, tier, engine = host_cache(48, host_tokens, page_size, write_policy)
    sched = MiniScheduler(cache)
    for name, a, b in ops:
        apply_op(sched, cache, tier, engine, name, a, b)
        sched.check()
    for req in list(sched.running):
        sched.finish(req)
        sched.check()
    tier.drain()
    assert cache.protected_size() == 0 and not tier.writes and not tier.loads
    cache.evict(EvictParams(num_tokens=cache.evictable_size()))
    tier.evict_host(tier.full.host_tokens)
    cache.check_invariants({"full": 0})
    assert not cache.tree.root.children
    assert cache.pools.kv_allocator.available_size() == cache.pools.kv_allocator.capacity
    assert tier.host_pools.full.available_size() == tier.host_pools.full.capacity
    assert cache.pools.req_to_token_pool.available_size() == cache.pools.req_to_token_pool.size
