"""SWAComponent scenarios with exact slots: match over tombstones, recovery on insert, window
locks, early release, out-of-window freeing, cascades and the leaf cap split."""

import pytest
import torch

from benchmarks.studies.retired_orders import GREEDY_DUAL
from uniradix import CacheConfig, EvictParams, InsertParams, MatchPrefixParams, RadixKey, Req
from uniradix.cache.controller import UnifiedRadixCache
from uniradix.components.swa import SWAComponent
from uniradix.errors import InvariantError
from uniradix.factory import build_cache
from uniradix.memory.allocator import TokenSlotAllocator
from uniradix.memory.pools import CachePools
from uniradix.memory.req_pool import ReqToTokenPool
from uniradix.memory.swa_allocator import SWASlotAllocator
from uniradix.tree.node import TreeNode
from uniradix.types import CacheSettings, ComponentType

SWA = ComponentType.SWA


def make(window: int = 4, ps: int = 1, full: int = 64, swa: int = 32) -> UnifiedRadixCache:
    return build_cache(
        CacheConfig.of(
            full_tokens=full,
            swa_tokens=swa,
            sliding_window=window,
            page_size=ps,
            max_context_len=128,
            max_running_requests=8,
            # Victims named by the tests: each node credited by its own end.
            swa_eviction_policy=GREEDY_DUAL,
        )
    )


def alloc(cache: UnifiedRadixCache) -> SWASlotAllocator:
    a = cache.pools.kv_allocator
    assert isinstance(a, SWASlotAllocator)
    return a


def put(cache: UnifiedRadixCache, n: int, cursor: int = 0) -> torch.Tensor:
    """Inserts tokens 0..n-1 with fresh slots whose SWA below `cursor` was freed."""
    value = alloc(cache).alloc(n)
    assert value is not None
    if cursor:
        alloc(cache).free_swa(value[:cursor])
    cache.insert(InsertParams(RadixKey(list(range(n))), value, swa_evicted_seqlen=cursor))
    return value


def match(cache: UnifiedRadixCache, n: int) -> int:
    return cache.match_prefix(MatchPrefixParams(RadixKey(list(range(n))))).device_prefix_len


def node_at(cache: UnifiedRadixCache, *path_lens: int) -> TreeNode:
    """The node reached from the root by following children of these edge lengths."""
    node = cache.tree.root
    for n in path_lens:
        (node,) = [c for c in node.children.values() if c.num_tokens == n]
    return node


def full_of(node: TreeNode) -> list[int]:
    v = node.data[0].value
    assert v is not None
    return v.tolist()


def swa_of(node: TreeNode) -> list[int] | None:
    v = node.data[1].value
    return None if v is None else v.tolist()


def check(cache: UnifiedRadixCache, full: int = 0, swa: int = 0) -> None:
    cache.check_invariants({"full": full, "swa": swa})


def lru_ids(cache: UnifiedRadixCache) -> list[int]:
    c = cache.component(SWA)
    assert isinstance(c, SWAComponent)
    return [n.id for n in c.lru]


@pytest.fixture
def abc() -> UnifiedRadixCache:
    """W=4: A [0,4) -> B [4,8) tombstone -> C [8,12), full slots 1..12, SWA 1..4 and 9..12."""
    cache = make()
    put(cache, 12)  # cap split: [0,8) live parent + [8,12) leaf
    assert match(cache, 4) == 4  # splits the parent into A, B; A becomes most recent
    result = cache.evict(EvictParams(swa_num_tokens=4))
    assert result.swa_num_tokens_evicted == 4 and result.num_tokens_evicted == 0
    a, b, c = node_at(cache, 4), node_at(cache, 4, 4), node_at(cache, 4, 4, 4)
    assert (full_of(a), full_of(b), full_of(c)) == ([1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12])
    assert (swa_of(a), swa_of(b), swa_of(c)) == ([1, 2, 3, 4], None, [9, 10, 11, 12])
    check(cache)
    return cache


# ---------------------------------------------------------------------- match
def test_match_passes_old_tombstones_when_the_last_window_is_live(abc: UnifiedRadixCache) -> None:
    r = abc.match_prefix(MatchPrefixParams(RadixKey(list(range(12)))))
    assert r.device_prefix_len == 12
    assert r.device_indices.tolist() == list(range(1, 13))


def test_match_stops_at_a_tombstone_gap(abc: UnifiedRadixCache) -> None:
    assert match(abc, 8) == 4  # ends on B, a tombstone
    r = abc.match_prefix(MatchPrefixParams(RadixKey(list(range(10)))))
    # ends inside C: 2 live tokens after the gap are less than the window
    assert (r.device_prefix_len, r.full_kv_hit_length) == (4, 10)
    assert r.device_indices.tolist() == [1, 2, 3, 4]
    check(abc)


def test_match_without_tombstones_accepts_any_boundary() -> None:
    cache = make(window=8)
    put(cache, 6)
    assert match(cache, 2) == 2
    check(cache)


# ---------------------------------------------------------------------- recovery
def test_insert_recovers_a_tombstone_with_full_unlocked(abc: UnifiedRadixCache) -> None:
    a = alloc(abc)
    value = a.alloc(12)
    assert value is not None
    assert value.tolist() == list(range(13, 25))
    assert a.translate(value).tolist() == [5, 6, 7, 8, *range(13, 21)]
    abc.insert(InsertParams(RadixKey(list(range(12))), value))
    b = node_at(abc, 4, 4)
    assert full_of(b) == [17, 18, 19, 20]  # B adopted the incoming slots
    assert swa_of(b) == [13, 14, 15, 16]
    assert not a.is_allocated(torch.arange(5, 9)).any()  # the old full slots went back
    assert (a.full_available_size(), a.swa_available_size()) == (52, 20)
    r = abc.match_prefix(MatchPrefixParams(RadixKey(list(range(8)))))
    assert r.device_indices.tolist() == [1, 2, 3, 4, 17, 18, 19, 20]
    check(abc)


def test_insert_recovers_a_tombstone_with_full_locked(abc: UnifiedRadixCache) -> None:
    receipt = abc.inc_lock_ref(node_at(abc, 4, 4, 4))  # locks A, B, C full; SWA on C only
    a = alloc(abc)
    value = a.alloc(12)
    assert value is not None
    abc.insert(InsertParams(RadixKey(list(range(12))), value))
    b = node_at(abc, 4, 4)
    assert full_of(b) == [5, 6, 7, 8]  # a running request reads these: they stay
    assert swa_of(b) == [13, 14, 15, 16]  # the incoming SWA slots moved over to them
    assert a.translate(torch.arange(5, 9)).tolist() == [13, 14, 15, 16]
    assert not a.is_allocated(value).any()  # every incoming full slot went back
    assert (a.full_available_size(), a.swa_available_size()) == (52, 20)
    assert (abc.protected_size(), abc.protected_size(SWA), abc.evictable_size(SWA)) == (12, 4, 8)
    check(abc)
    abc.dec_lock_ref(receipt.node, receipt)
    check(abc)
    assert match(abc, 8) == 8


def test_recovery_splits_at_the_request_cursor(abc: UnifiedRadixCache) -> None:
    value = put(abc, 12, cursor=6)
    b_low, b_high = node_at(abc, 4, 2), node_at(abc, 4, 2, 2)
    assert (full_of(b_low), swa_of(b_low)) == ([5, 6], None)
    assert full_of(b_high) == value[6:8].tolist()
    assert swa_of(b_high) == alloc(abc).translate(value[6:8]).tolist()
    assert match(abc, 8) == 4  # 2 live tokens after the gap
    assert match(abc, 12) == 12
    check(abc)


def test_tombstone_inside_the_callers_own_prefix_is_not_recovered(abc: UnifiedRadixCache) -> None:
    value = alloc(abc).alloc(4)
    assert value is not None
    own = torch.cat([torch.arange(1, 9), value])
    abc.insert(InsertParams(RadixKey(list(range(12))), own, prev_prefix_len=8))
    assert swa_of(node_at(abc, 4, 4)) is None
    check(abc, full=0, swa=0)


def test_recovery_with_pages() -> None:
    cache = make(window=3, ps=2)  # window_tail 4
    put(cache, 12)  # [0,8) + leaf [8,12)
    assert match(cache, 4) == 4
    cache.evict(EvictParams(swa_num_tokens=2))
    b = node_at(cache, 4, 4)
    assert swa_of(b) is None
    value = put(cache, 12)
    assert full_of(b) == value[4:8].tolist()
    assert swa_of(b) == alloc(cache).translate(value[4:8]).tolist()
    check(cache)


# ---------------------------------------------------------------------- leaf cap
def test_new_leaf_keeps_one_page_rounded_window() -> None:
    cache = make(window=5, ps=2)  # window_tail 6
    put(cache, 14)
    parent, leaf = node_at(cache, 8), node_at(cache, 8, 6)
    assert (swa_of(parent), swa_of(leaf)) == (list(range(2, 10)), list(range(10, 16)))
    assert lru_ids(cache) == [leaf.id, parent.id]
    receipt = cache.inc_lock_ref(leaf)
    assert (cache.protected_size(SWA), cache.protected_size()) == (6, 14)
    assert receipt.component_lock_uuids[SWA] is not None
    check(cache)
    cache.dec_lock_ref(leaf, receipt)
    short = make(window=5, ps=2)
    put(short, 6)
    assert node_at(short, 6).parent is short.tree.root
    check(short)


def test_leaf_below_the_cursor_is_a_tombstone() -> None:
    cache = make()
    value = put(cache, 8, cursor=8)
    (node,) = cache.tree.root.children.values()
    assert (full_of(node), swa_of(node)) == (value.tolist(), None)
    assert alloc(cache).swa_available_size() == 32
    check(cache)


def test_unfinished_request_cursor_splits_the_leaf() -> None:
    cache = make()
    put(cache, 8, cursor=4)
    tomb, live = node_at(cache, 4), node_at(cache, 4, 4)
    assert (swa_of(tomb), swa_of(live)) == (None, [5, 6, 7, 8])
    assert match(cache, 8) == 8 and match(cache, 4) == 0
    check(cache)


# ---------------------------------------------------------------------- locks
def test_window_lock_boundary_survives_a_split() -> None:
    cache = make()
    put(cache, 3)
    put(cache, 5)  # A [0,3) -> B [3,5)
    a, b = node_at(cache, 3), node_at(cache, 3, 2)
    receipt = cache.inc_lock_ref(b)
    uuid = receipt.component_lock_uuids[SWA]
    assert uuid is not None and a.data[1].metadata == {"uuid": uuid}
    assert cache.inc_lock_ref(b).component_lock_uuids[SWA] == uuid  # the boundary is reused
    assert cache.protected_size(SWA) == 5
    assert match(cache, 2) == 2  # splits A into A1 [0,2) + A2 [2,3)
    a1, a2 = node_at(cache, 2), node_at(cache, 2, 1)
    assert a2 is a and a1.data[1].metadata == {"uuid": uuid} and not a2.data[1].metadata
    assert (a1.data[1].lock_ref, a2.data[1].lock_ref, b.data[1].lock_ref) == (2, 2, 2)
    check(cache)
    cache.dec_lock_ref(b)
    cache.dec_lock_ref(b)
    assert [n.data[1].lock_ref for n in (a1, a2, b)] == [0, 0, 0]
    assert not a1.data[1].metadata
    assert (cache.protected_size(SWA), cache.evictable_size(SWA)) == (0, 5)
    check(cache)


def test_window_lock_reaching_the_root_has_no_boundary() -> None:
    cache = make(window=8)
    put(cache, 3)
    receipt = cache.inc_lock_ref(node_at(cache, 3))
    assert receipt.component_lock_uuids[SWA] is None
    cache.dec_lock_ref(receipt.node, receipt)
    check(cache)


def admit(cache: UnifiedRadixCache, tokens: list[int]) -> Req:
    """Matches, locks and allocates the rest of `tokens` (all computed)."""
    pools = cache.pools
    row = pools.req_to_token_pool.alloc()
    assert row is not None
    m = cache.match_prefix(MatchPrefixParams(cache.make_key(tokens)))
    req = Req(token_ids=list(tokens), req_pool_idx=row)
    pools.req_to_token_pool.write(row, 0, m.device_indices)
    req.lock = cache.inc_lock_ref(m.last_device_node)
    req.cache_protected_len = m.device_prefix_len
    rest = alloc(cache).alloc(len(tokens) - m.device_prefix_len)
    assert rest is not None
    pools.req_to_token_pool.write(row, m.device_prefix_len, rest)
    req.kv_committed_len = req.kv_allocated_len = len(tokens)
    return req


def decode(cache: UnifiedRadixCache, req: Req, n: int) -> None:
    assert req.req_pool_idx is not None
    slots = alloc(cache).alloc(n)
    assert slots is not None
    cache.pools.req_to_token_pool.write(req.req_pool_idx, req.kv_allocated_len, slots)
    req.token_ids += [1000 + i for i in range(n)]
    req.kv_committed_len = req.kv_allocated_len = req.kv_allocated_len + n


def test_early_window_release_keeps_full_locked() -> None:
    cache = make()
    req = admit(cache, list(range(8)))
    cache.cache_unfinished_req(req)  # tree: [0,4) + leaf [4,8), locked
    assert (cache.protected_size(), cache.protected_size(SWA)) == (8, 4)
    decode(cache, req, 3)  # 11 computed: the window [7, 11) still reads position 7
    cache.release_window_lock(req)
    assert cache.protected_size(SWA) == 4
    decode(cache, req, 1)  # 12 computed: the window [8, 12) is all the request's own
    cache.release_window_lock(req)
    assert req.lock is not None and req.lock.skipped_lock_components == (SWA,)
    assert (cache.protected_size(), cache.protected_size(SWA)) == (8, 0)
    cache.release_window_lock(req)  # idempotent
    check(cache, full=4, swa=4)
    # The locked leaf is not an evictable leaf: SWA eviction tombstones it, full stays.
    result = cache.evict(EvictParams(swa_num_tokens=8))
    assert (result.num_tokens_evicted, result.swa_num_tokens_evicted) == (0, 8)
    assert (swa_of(node_at(cache, 4)), swa_of(node_at(cache, 4, 4))) == (None, None)
    assert cache.protected_size() == 8
    check(cache, full=4, swa=4)
    cache.cache_finished_req(req)  # must not release SWA a second time
    assert cache.protected_size() == 0
    assert swa_of(node_at(cache, 4, 4, 4)) == [9, 10, 11, 12]
    check(cache)


def test_out_of_window_slots_of_a_running_request() -> None:
    cache = make()
    put(cache, 8)
    a = alloc(cache)
    req = admit(cache, list(range(20)))
    assert req.cache_protected_len == 8
    assert req.req_pool_idx is not None
    row = cache.pools.req_to_token_pool.read(req.req_pool_idx, 0, 20).clone()
    swa_before = a.swa_available_size()
    assert cache.free_out_of_window_slots(req) == 8  # window starts at 20 - 4
    assert req.swa_evicted_seqlen == 16
    peers = a.translate(row)
    assert (peers[:8] > 0).all() and (peers[8:16] == 0).all() and (peers[16:] > 0).all()
    assert a.swa_available_size() == swa_before + 8
    assert cache.free_out_of_window_slots(req) == 0
    check(cache, full=12, swa=4)
    cache.cache_finished_req(req)
    tomb, live = node_at(cache, 4, 4, 8), node_at(cache, 4, 4, 8, 4)
    assert (swa_of(tomb), full_of(tomb)) == (None, row[8:16].tolist())
    assert full_of(live) == row[16:].tolist()
    r = cache.match_prefix(MatchPrefixParams(RadixKey(list(range(20)))))
    assert r.device_prefix_len == 20
    assert match(cache, 16) == 8
    check(cache)


def test_out_of_window_with_pages_and_cursor_below_the_cached_prefix() -> None:
    cache = make(window=3, ps=2)  # window_tail 4
    req = admit(cache, list(range(8)))
    cache.cache_unfinished_req(req)  # cached [0, 8)
    decode(cache, req, 4)  # 12 computed: window start 12 - 4 = 8
    assert cache.free_out_of_window_slots(req) == 0
    decode(cache, req, 4)  # 16 computed: start 12; frees [8, 12)
    assert cache.free_out_of_window_slots(req) == 4
    assert req.swa_evicted_seqlen == 12
    check(cache, full=8, swa=4)
    cache.cache_finished_req(req)
    check(cache)


def test_full_only_cache_has_no_windows() -> None:
    cache = build_cache(CacheConfig.of(full_tokens=32, max_context_len=32))
    row = cache.pools.req_to_token_pool.alloc()
    slots = cache.pools.kv_allocator.alloc(8)
    assert row is not None and slots is not None
    cache.pools.req_to_token_pool.write(row, 0, slots)
    req = Req(token_ids=list(range(8)), req_pool_idx=row, kv_committed_len=8, kv_allocated_len=8)
    req.lock = cache.inc_lock_ref(cache.tree.root)
    assert cache.free_out_of_window_slots(req) == 0
    cache.release_window_lock(req)
    assert req.lock.skipped_lock_components == ()
    cache.cache_finished_req(req)
    cache.check_invariants({"full": 0})


# ---------------------------------------------------------------------- eviction
def test_full_eviction_cascades_to_swa_on_a_leaf() -> None:
    cache = make()
    put(cache, 8)
    r = cache.evict(EvictParams(num_tokens=4))
    assert (r.num_tokens_evicted, r.swa_num_tokens_evicted) == (4, 4)
    r = cache.evict(EvictParams(num_tokens=4))
    assert (r.num_tokens_evicted, r.swa_num_tokens_evicted) == (4, 4)
    a = alloc(cache)
    assert (a.full_available_size(), a.swa_available_size()) == (64, 32)
    assert not cache.tree.root.children
    check(cache)


def test_swa_eviction_of_a_leaf_removes_it_whole(abc: UnifiedRadixCache) -> None:
    assert lru_ids(abc) == [node_at(abc, 4).id, node_at(abc, 4, 4, 4).id]
    r = abc.evict(EvictParams(swa_num_tokens=4))
    assert (r.num_tokens_evicted, r.swa_num_tokens_evicted) == (4, 4)  # C, a leaf
    r = abc.evict(EvictParams(swa_num_tokens=4))  # A, internal: a tombstone
    assert (r.num_tokens_evicted, r.swa_num_tokens_evicted) == (0, 4)
    r = abc.evict(EvictParams(num_tokens=100))  # tombstoned leaf B, then A
    assert (r.num_tokens_evicted, r.swa_num_tokens_evicted) == (8, 0)
    assert alloc(abc).full_available_size() == 64 and alloc(abc).swa_available_size() == 32
    check(abc)


def test_locked_window_is_not_evicted(abc: UnifiedRadixCache) -> None:
    receipt = abc.inc_lock_ref(node_at(abc, 4, 4, 4))
    r = abc.evict(EvictParams(num_tokens=100, swa_num_tokens=100))
    assert (r.num_tokens_evicted, r.swa_num_tokens_evicted) == (0, 4)  # only A's SWA
    assert swa_of(node_at(abc, 4, 4, 4)) == [9, 10, 11, 12]
    abc.dec_lock_ref(receipt.node, receipt)
    check(abc)


def test_lru_refresh_covers_one_window_and_a_page() -> None:
    cache = make(window=4)
    put(cache, 12)  # [0,8) + [8,12)
    put(cache, 2)  # splits [0,8) into [0,2) + [2,8)
    side = cache.pools.kv_allocator.alloc(4)
    assert side is not None
    cache.insert(InsertParams(RadixKey([50, 51, 52, 53]), side))
    a, b, c = node_at(cache, 2), node_at(cache, 2, 6), node_at(cache, 2, 6, 4)
    s = node_at(cache, 4)
    assert match(cache, 12) == 12  # refreshes C and B (4 + 6 >= 5), not A
    assert lru_ids(cache) == [c.id, b.id, s.id, a.id]
    check(cache)


def test_priorities() -> None:
    c = make().component(SWA)
    assert (c.eviction_priority(is_leaf=False), c.eviction_priority(is_leaf=True)) == (1, 0)
    f = make().component(ComponentType.FULL)
    assert (f.eviction_priority(is_leaf=False), f.eviction_priority(is_leaf=True)) == (2, 0)


# ---------------------------------------------------------------------- misuse
def test_bad_inputs_raise_before_changing_anything() -> None:
    cache = make(ps=2)
    a = alloc(cache)
    value = a.alloc(8)
    assert value is not None
    key = RadixKey(list(range(8)))
    with pytest.raises(ValueError, match="swa_evicted_seqlen"):
        cache.insert(InsertParams(key, value, swa_evicted_seqlen=3))
    with pytest.raises(ValueError, match="below swa_evicted_seqlen"):
        cache.insert(InsertParams(key, value, swa_evicted_seqlen=2))
    with pytest.raises(ValueError, match="must all have SWA slots"):
        cache.insert(InsertParams(key))  # the key's tokens are no allocated slots
    assert not cache.tree.root.children
    with pytest.raises(ValueError, match="no outstanding lock"):
        cache.release_window_lock(Req(token_ids=[1]))
    check(cache, full=8, swa=8)


def test_construction_errors() -> None:
    pools = CachePools(ReqToTokenPool(2, 8), TokenSlotAllocator(16))
    with pytest.raises(TypeError, match="SWASlotAllocator"):
        UnifiedRadixCache(pools, CacheSettings(sliding_window=4), (ComponentType.FULL, SWA))
    pools = CachePools(ReqToTokenPool(2, 8), SWASlotAllocator(16, 8))
    with pytest.raises(ValueError, match="sliding_window"):
        UnifiedRadixCache(pools, CacheSettings(), (ComponentType.FULL, SWA))
    with pytest.raises(ValueError, match="without sliding_window"):
        build_cache(CacheConfig.of(full_tokens=16, swa_tokens=8))


def test_reset_empties_both_pools(abc: UnifiedRadixCache) -> None:
    abc.reset()
    assert len(abc.component(SWA).lru) == 0  # type: ignore[attr-defined]
    assert (alloc(abc).full_available_size(), alloc(abc).swa_available_size()) == (64, 32)
    put(abc, 4)
    check(abc)


def test_caching_again_after_early_release_locks_a_fresh_window() -> None:
    cache = make()
    req = admit(cache, list(range(8)))
    cache.cache_unfinished_req(req)
    decode(cache, req, 4)
    cache.release_window_lock(req)
    assert cache.protected_size(SWA) == 0
    cache.cache_unfinished_req(req)  # the old receipt's SWA part is skipped on unlock
    assert req.lock is not None and req.lock.skipped_lock_components == ()
    assert (cache.protected_size(), cache.protected_size(SWA)) == (12, 4)
    check(cache)
    cache.cache_finished_req(req)
    assert (cache.protected_size(), cache.protected_size(SWA)) == (0, 0)
    check(cache)


def test_check_invariants_catches_swa_corruption(abc: UnifiedRadixCache) -> None:
    alloc(abc).full_to_swa[9] = 30  # C's first full slot now points at a wrong SWA slot
    with pytest.raises(InvariantError, match="not its full slots' peers"):
        abc.check_invariants()
    alloc(abc).full_to_swa[9] = 9
    abc.component(SWA).evictable_tokens += 1
    with pytest.raises(InvariantError, match="swa: ledger"):
        abc.check_invariants()
    abc.component(SWA).evictable_tokens -= 1
    with pytest.raises(InvariantError, match="swa: free"):
        abc.check_invariants({"full": 0, "swa": 1})
