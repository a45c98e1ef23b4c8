"""Random request sequences on the full-attention cache; invariants after every step."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.driver import MiniScheduler
from tests.helpers import make_cache
from uniradix import EvictParams, MatchPrefixParams, RadixKey

PREFIXES = [[1, 2, 3, 4, 5, 6, 7, 8], [1, 2, 3, 4, 9, 9], [20, 21, 22, 23], []]

op = st.one_of(
    st.tuples(
        st.just("admit"), st.integers(0, 3), st.lists(st.integers(0, 6), min_size=1, max_size=12)
    ),
    st.tuples(st.just("chunk"), st.integers(0, 7), st.integers(1, 9)),
    st.tuples(st.just("decode"), st.integers(0, 7), st.integers(0, 6)),
    st.tuples(st.just("finish"), st.integers(0, 7), st.booleans()),
    st.tuples(st.just("evict"), st.integers(0, 40), st.none()),
    st.tuples(st.just("lookup"), st.integers(0, 3), st.lists(st.integers(0, 6), max_size=6)),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    page_size=st.sampled_from([1, 2, 4]),
    policy=st.sampled_from(["lru", "lfu", "priority"]),
    ops=st.lists(op, min_size=1, max_size=40),
)
def test_random_requests_keep_invariants_and_leak_nothing(page_size, policy, ops):
    cache = make_cache(full_tokens=48, page_size=page_size, eviction_policy=policy)
    sched = MiniScheduler(cache)
    for name, a, b in ops:
        running = sched.running
        if name == "admit":
            sched.admit(PREFIXES[a] + b)
        elif name == "lookup":
            cache.match_prefix(MatchPrefixParams(RadixKey(PREFIXES[a] + b)))
        elif name == "evict":
            cache.evict(EvictParams(num_tokens=a))
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
        sched.check()
    for req in list(sched.running):
        sched.finish(req)
        sched.check()
    assert cache.protected_size() == 0
    cache.evict(EvictParams(num_tokens=cache.evictable_size()))
    cache.check_invariants({"full": 0})
    assert cache.total_size() == 0
    assert cache.pools.kv_allocator.available_size() == cache.pools.kv_allocator.capacity
    assert cache.pools.req_to_token_pool.available_size() == cache.pools.req_to_token_pool.size
