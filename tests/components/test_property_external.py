"""Random inserts, matches, locks and evictions on full+SWA+Mamba plus the sidecar example (and
sessions on): every pool's accounting, the sidecar's included, after every step."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from examples.sidecar_component import BLOCK, NAME
from uniradix import CacheConfig, EvictParams, InsertParams, MatchPrefixParams, RadixKey
from uniradix.factory import build_cache
from uniradix.memory.allocator import TokenSlotAllocator
from uniradix.types import IncLockRefResult

STEMS = [[1] * 2 * BLOCK, [1] * BLOCK + [2] * BLOCK, [3] * BLOCK]

op = st.one_of(
    st.tuples(st.just("insert"), st.integers(0, 2), st.integers(1, 2 * BLOCK), st.booleans()),
    st.tuples(st.just("match"), st.integers(0, 2), st.integers(1, 3 * BLOCK), st.booleans()),
    st.tuples(st.just("unlock"), st.integers(0, 7), st.just(0), st.booleans()),
    st.tuples(
        st.just("evict"),
        st.sampled_from(["full", "swa", "mamba", NAME]),
        st.integers(1, 300),
        st.booleans(),
    ),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(op, min_size=1, max_size=25), window=st.integers(1, 200))
def test_random_operations_keep_every_pool_exact(ops, window) -> None:  # type: ignore[no-untyped-def]
    pool = TokenSlotAllocator(24)
    config = CacheConfig.of(
        full_tokens=2048,
        max_context_len=1024,
        sliding_window=window,
        swa_tokens=2048,
        mamba_slots=16,
        enable_session_cache=True,
    )
    cache = build_cache(config, extra_components=[(NAME, pool)])
    locks: list[IncLockRefResult] = []
    for name, a, b, flag in ops:
        if name == "insert":
            tokens = STEMS[a] + [a + 10] * b
            value = cache.pools.kv_allocator.alloc(len(tokens))
            entries = pool.alloc(len(tokens) // BLOCK)
            state = cache.pools.mamba.allocator.alloc(1) if flag else None  # type: ignore[union-attr]
            if value is None or entries is None:
                for slots in (value, entries):
                    if slots is not None:
                        (pool if slots is entries else cache.pools.kv_allocator).free(slots)
                if state is not None:
                    cache.pools.mamba.allocator.free(state)  # type: ignore[union-attr]
                continue
            params = InsertParams(
                RadixKey(tokens), value, mamba_value=state, extra_values={NAME: entries}
            )
            result = cache.insert(params)
            if result.mamba_exist and state is not None:
                cache.pools.mamba.allocator.free(state)  # type: ignore[union-attr]
            leaf = result.last_device_node
            if flag:
                cache.sessions.register(f"s{a}", leaf)
        elif name == "match":
            tokens = (STEMS[a] + [a + 10] * 3 * BLOCK)[:b]
            match = cache.match_prefix(MatchPrefixParams(RadixKey(tokens)))
            assert match.device_prefix_len % BLOCK == 0
            if flag:
                locks.append(cache.inc_lock_ref(match.last_device_node))
        elif name == "unlock" and locks:
            receipt = locks.pop(a % len(locks))
            cache.dec_lock_ref(receipt.node, receipt)
        elif name == "evict":
            wanted = {"full": 0, "swa": 0, "mamba": 0, NAME: 0} | {a: b}
            cache.evict(
                EvictParams(wanted["full"], wanted["swa"], wanted["mamba"], {NAME: wanted[NAME]})
            )
        cache.check_invariants({"full": 0, "swa": 0, "mamba": 0, NAME: 0})
    for receipt in locks:
        cache.dec_lock_ref(receipt.node, receipt)
    for sid in ("s0", "s1", "s2"):
        cache.release_session(sid)
    cache.evict(EvictParams(num_tokens=4096))
    assert cache.total_size() == 0
    assert cache.pools.available() == cache.pools.capacities()
