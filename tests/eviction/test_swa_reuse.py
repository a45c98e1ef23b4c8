"""The `reuse_aware` eviction order of SWA windows, with exact victims: among the least recent
windows, one no match ended under goes before older ones that served a match."""

import numpy as np
import pytest

from benchmarks.studies.retired_orders import SWA_REUSE_AWARE
from uniradix import CacheConfig, EvictParams, InsertParams, RadixKey, build_cache
from uniradix.cache.controller import UnifiedRadixCache
from uniradix.eviction import swa_order
from uniradix.memory.swa_allocator import SWASlotAllocator
from uniradix.types import ComponentType, MatchPrefixParams


def swa_cache(policy: str) -> UnifiedRadixCache:
    return build_cache(
        CacheConfig.of(
            full_tokens=128,
            swa_tokens=64,
            sliding_window=4,
            max_context_len=64,
            swa_eviction_policy=policy,
        )
    )


def insert(cache: UnifiedRadixCache, tokens: list[int]) -> None:
    a = cache.pools.kv_allocator
    assert isinstance(a, SWASlotAllocator)
    value = a.alloc(len(tokens))
    assert value is not None
    cache.insert(InsertParams(RadixKey(tokens), value))


def match(cache: UnifiedRadixCache, tokens: list[int]) -> int:
    return cache.match_prefix(MatchPrefixParams(RadixKey(tokens))).device_prefix_len


def live_windows(cache: UnifiedRadixCache) -> set[int]:
    """The first token of every node holding a live SWA window (distinct in these tests)."""
    swa = cache.component(ComponentType.SWA)
    return {
        int(np.frombuffer(n.key, dtype="<i8")[0])
        for n in cache.tree.nodes()
        if n.parent is not None and swa.has_value(n)
    }


def evict_order(cache: UnifiedRadixCache) -> list[int]:
    """Evicts one window at a time until none is left; the first tokens, in order."""
    order = []
    while before := live_windows(cache):
        cache.evict(EvictParams(swa_num_tokens=1))
        cache.check_invariants()
        (gone,) = before - live_windows(cache)
        order.append(gone)
    return order


@pytest.mark.parametrize("policy", ["lru", SWA_REUSE_AWARE])
def test_a_shared_path_alone_is_no_evidence(policy: str) -> None:
    """Window 4, page 1. A = [1..4], then B = [10..13], then A extended by 8 tokens: its
    insert passes over A (A's prefix is shared) and leaves two live windows, [20..23] and the
    leaf [24..27]. No match ended anywhere, so both orders evict A, B, then the extension's
    windows from the top down (counting the shared prefix as evidence lost on the trace)."""
    cache = swa_cache(policy)
    insert(cache, [1, 2, 3, 4])
    insert(cache, [10, 11, 12, 13])
    insert(cache, [1, 2, 3, 4, *range(20, 28)])
    assert live_windows(cache) == {1, 10, 20, 24}
    assert evict_order(cache) == [1, 10, 20, 24]


@pytest.mark.parametrize(
    ("policy", "order"), [("lru", [1, 10, 20]), (SWA_REUSE_AWARE, [10, 20, 1])]
)
def test_a_window_that_served_a_match_outlives_newer_unused_ones(
    policy: str, order: list[int]
) -> None:
    """A is stored and matched (it served a hit), then B and C are stored: A is the least
    recent, but `reuse_aware` keeps it past B and C."""
    cache = swa_cache(policy)
    insert(cache, [1, 2, 3, 4])
    assert match(cache, [1, 2, 3, 4]) == 4
    insert(cache, [10, 11, 12, 13])
    insert(cache, [20, 21, 22, 23])
    assert evict_order(cache) == order


@pytest.mark.parametrize(("scan", "first"), [(2, 1), (3, 20)])
def test_the_scan_is_bounded_so_windows_with_evidence_age_out(
    monkeypatch: pytest.MonkeyPatch, scan: int, first: int
) -> None:
    """A and B served matches, C did not. Scanning 2 windows finds only A and B, so the
    least recent (A) goes; scanning 3 finds C."""
    monkeypatch.setattr(swa_order, "SCAN", scan)
    cache = swa_cache(SWA_REUSE_AWARE)
    for start in (1, 10):
        insert(cache, [start, start + 1, start + 2, start + 3])
    for start in (1, 10):
        assert match(cache, [start, start + 1, start + 2, start + 3]) == 4
    insert(cache, [20, 21, 22, 23])
    assert evict_order(cache)[0] == first


def test_serve_marks_go_with_the_window() -> None:
    """An evicted window's serve mark is dropped (the invariant check would name it), and a
    split passes the mark to the new parent."""
    cache = swa_cache(SWA_REUSE_AWARE)
    insert(cache, [1, 2, 3, 4, 5, 6])
    assert match(cache, [1, 2, 3, 4, 5, 6]) == 6
    insert(cache, [1, 2, 3, 4, 9, 9])  # splits [1..6] into [1..4] and [5, 6]
    swa = cache.component(ComponentType.SWA)
    order = swa._reuse
    assert order is not None
    top = next(n for n in cache.tree.nodes() if n.parent is cache.tree.root)
    assert order.was_served(top)
    evict_order(cache)
    cache.check_invariants()
    assert not any(order.was_served(n) for n in cache.tree.nodes())


def test_unknown_swa_policy_is_rejected() -> None:
    with pytest.raises(ValueError, match="swa_eviction_policy 'nope'"):
        build_cache(
            CacheConfig.of(
                full_tokens=64, swa_tokens=32, sliding_window=4, swa_eviction_policy="nope"
            )
        )
