"""Scenario tests of the host tier on hybrid caches (full+SWA, full+Mamba, full+SWA+Mamba),
with exact device and host indices: backups of the window and the state with the full KV,
demotion, host eviction cascade, load-back of the SWA window and of the Mamba state (into
the node's fresh slot and the request's slot), and every failure path of a load-back."""

import torch

from tests.helpers import alloc
from tests.tiers.builders import ack_all, hybrid_host_cache, values
from uniradix import (
    CacheConfig,
    EvictParams,
    InsertParams,
    MatchPrefixParams,
    RadixKey,
    Req,
    build_cache,
)
from uniradix.tiers.controller import HostTier

FULL, SWA, MAMBA = 0, 1, 1  # component indices (SWA and Mamba are 1 when alone)


def swa_chain(cache, tier, engine):
    """[1..4] -> [5..8] (W=4, page 1) inserted live and backed up, acked."""
    r = cache.insert(InsertParams(RadixKey(list(range(1, 9))), alloc(cache, 8)))
    ack_all(tier, engine)
    return r.last_device_node.parent, r.last_device_node


# ---------------------------------------------------------------------------- SWA
def test_swa_window_is_backed_up_with_the_full_kv_in_one_batch():
    cache, tier, engine = hybrid_host_cache(32, 64, sliding_window=4, swa_tokens=16)
    r = cache.insert(InsertParams(RadixKey(list(range(1, 9))), alloc(cache, 8)))
    assert engine.ops(1) == [
        ("full", "d2h", [1, 2, 3, 4, 5, 6, 7, 8], [1, 2, 3, 4, 5, 6, 7, 8]),
        ("swa", "d2h", [1, 2, 3, 4, 5, 6, 7, 8], [1, 2, 3, 4, 5, 6, 7, 8]),
    ]
    leaf = r.last_device_node
    assert values(leaf, SWA) == ([5, 6, 7, 8], [5, 6, 7, 8])
    cache.check_invariants({"full": 0, "swa": 0})
    ack_all(tier, engine)
    assert tier.host_pools.aux["swa"].available_size() == 56


def test_swa_tombstone_and_demotion_keep_the_host_window_and_load_back_copies_only_it():
    cache, tier, engine = hybrid_host_cache(32, 64, sliding_window=4, swa_tokens=16)
    top, leaf = swa_chain(cache, tier, engine)
    assert cache.evict(EvictParams(swa_num_tokens=4)).swa_num_tokens_evicted == 4
    assert values(top, SWA) == (None, [1, 2, 3, 4])  # a device tombstone, host copy kept
    assert list(tier.aux[0].host.lru) == [top]
    assert cache.evict(EvictParams(num_tokens=8)).num_tokens_evicted == 8  # both demoted
    assert values(leaf, FULL) == (None, [5, 6, 7, 8]) and values(leaf, SWA) == (None, [5, 6, 7, 8])
    assert tier.stats.demoted_tokens == 8 and tier.stats.lost_tokens == 0
    assert list(tier.aux[0].host.lru) == [top, leaf]
    allocator = cache.pools.kv_allocator
    assert (allocator.full_available_size(), allocator.swa_available_size()) == (32, 16)
    cache.check_invariants({"full": 0, "swa": 0})
    m = cache.match_prefix(MatchPrefixParams(RadixKey(list(range(1, 10)))))
    assert (m.device_prefix_len, m.host_hit_length, m.swa_host_hit_length) == (0, 8, 4)
    assert m.last_host_node is leaf
    loaded = tier.load_back(m)
    assert loaded.device_prefix_len == 8 and loaded.device_indices.tolist() == list(range(1, 9))
    assert engine.ops(2) == [
        ("full", "h2d", [1, 2, 3, 4, 5, 6, 7, 8], [1, 2, 3, 4, 5, 6, 7, 8]),
        ("swa", "h2d", [5, 6, 7, 8], [5, 6, 7, 8]),  # the window before the boundary only
    ]
    assert values(top, SWA) == (None, [1, 2, 3, 4])  # outside the window: stays a tombstone
    assert values(leaf, SWA) == ([5, 6, 7, 8], [5, 6, 7, 8])
    assert allocator.translate(leaf.data[FULL].value).tolist() == [5, 6, 7, 8]
    assert allocator.translate(top.data[FULL].value).tolist() == [0, 0, 0, 0]
    assert list(tier.aux[0].host.lru) == [top]
    tier.loading_check()
    cache.check_invariants({"full": 0, "swa": 0})
    again = cache.match_prefix(MatchPrefixParams(RadixKey(list(range(1, 10)))))
    assert (again.device_prefix_len, again.host_hit_length) == (8, 0)


def test_swa_only_load_back_maps_fresh_swa_slots_under_device_full_kv():
    cache, tier, engine = hybrid_host_cache(32, 64, sliding_window=4, swa_tokens=16)
    top, mid = swa_chain(cache, tier, engine)
    tree_slots = torch.cat(
        [torch.from_numpy(top.data[0].value), torch.from_numpy(mid.data[0].value)]
    )
    fresh = alloc(cache, 4)  # a request extended [1..8] by [9..12]; its SWA cursor is 8
    params = InsertParams(
        RadixKey(list(range(1, 13))),
        torch.cat([tree_slots, fresh]),
        prev_prefix_len=8,
        swa_evicted_seqlen=8,
    )
    leaf = cache.insert(params).last_device_node
    ack_all(tier, engine)
    assert cache.evict(EvictParams(swa_num_tokens=8)).swa_num_tokens_evicted == 8
    assert values(top, SWA) == (None, [1, 2, 3, 4]) and values(mid, SWA) == (None, [5, 6, 7, 8])
    assert values(mid, FULL) == ([5, 6, 7, 8], [5, 6, 7, 8])
    m = cache.match_prefix(MatchPrefixParams(RadixKey(list(range(1, 9)))))
    assert (m.device_prefix_len, m.host_hit_length, m.swa_host_hit_length) == (0, 8, 4)
    loaded = tier.load_back(m)
    assert loaded.device_prefix_len == 8 and loaded.device_indices.tolist() == list(range(1, 9))
    assert loaded.last_device_node is mid
    assert engine.ops(3) == [("swa", "h2d", [5, 6, 7, 8], [5, 6, 7, 8])]  # no full copy
    assert cache.pools.kv_allocator.translate(mid.data[FULL].value).tolist() == [5, 6, 7, 8]
    assert values(mid, SWA) == ([5, 6, 7, 8], [5, 6, 7, 8]) and values(top, SWA)[0] is None
    tier.loading_check()
    cache.check_invariants({"full": 0, "swa": 0})
    assert leaf.data[SWA].value is not None


def test_revived_demoted_swa_node_publishes_the_callers_swa_slots():
    cache, tier, engine = hybrid_host_cache(32, 64, sliding_window=4, swa_tokens=16)
    top, leaf = swa_chain(cache, tier, engine)
    cache.evict(EvictParams(num_tokens=8))
    slots = alloc(cache, 8)
    cache.insert(InsertParams(RadixKey(list(range(1, 9))), slots))
    assert (
        values(top, FULL)[0] == slots[:4].tolist() and values(leaf, FULL)[0] == slots[4:].tolist()
    )
    peers = cache.pools.kv_allocator.translate(slots).tolist()
    assert values(top, SWA) == (peers[:4], [1, 2, 3, 4])
    assert values(leaf, SWA) == (peers[4:], [5, 6, 7, 8])
    assert not tier.aux[0].host.lru
    cache.check_invariants({"full": 0, "swa": 0})


def test_swa_host_eviction_leaves_a_host_tombstone_and_full_host_eviction_takes_all():
    cache, tier, engine = hybrid_host_cache(32, 64, sliding_window=4, swa_tokens=16)
    top, leaf = swa_chain(cache, tier, engine)
    cache.evict(EvictParams(num_tokens=8))
    assert list(tier.aux[0].host.lru) == [leaf, top]  # demoted leaf first
    assert tier.evict_host_aux("swa", 1) == 4  # the oldest host-only window: the leaf's
    assert values(leaf, SWA) == (None, None) and values(leaf, FULL) == (None, [5, 6, 7, 8])
    m = cache.match_prefix(MatchPrefixParams(RadixKey(list(range(1, 10)))))
    assert m.host_hit_length == 4 and m.last_host_node is top  # top's window still covers W
    assert tier.evict_host_aux("swa", 4) == 4
    m = cache.match_prefix(MatchPrefixParams(RadixKey(list(range(1, 10)))))
    assert m.host_hit_length == 0  # no window on any tier before the boundary
    cache.check_invariants({"full": 0, "swa": 0})
    assert tier.evict_host(8) == 8  # cascade: the nodes go, host-only leaf first
    assert not cache.tree.root.children
    for name in ("swa",):
        pool = tier.host_pools.aux[name]
        assert pool.available_size() == pool.capacity
    assert tier.host_pools.full.available_size() == 64
    cache.check_invariants({"full": 0, "swa": 0})


def test_write_back_backs_up_the_victims_window_at_eviction():
    cache, _tier, engine = hybrid_host_cache(
        32, 64, write_policy="write_back", sliding_window=4, swa_tokens=16
    )
    r = cache.insert(InsertParams(RadixKey(list(range(1, 9))), alloc(cache, 8)))
    assert not engine.batches  # write-back: nothing at insert
    leaf = r.last_device_node
    cache.evict(EvictParams(num_tokens=4))
    assert engine.ops(1) == [
        ("full", "d2h", [5, 6, 7, 8], [1, 2, 3, 4]),
        ("swa", "d2h", [5, 6, 7, 8], [1, 2, 3, 4]),
    ]
    assert values(leaf, FULL) == (None, [1, 2, 3, 4]) and values(leaf, SWA) == (None, [1, 2, 3, 4])
    cache.check_invariants({"full": 0, "swa": 0})


# ---------------------------------------------------------------------------- Mamba
def mamba_chain(cache, tier, engine):
    """[1..4] (state s1) -> [5..8] (state s2), backed up and acked."""
    states = cache.pools.mamba.allocator
    full = alloc(cache, 8)
    s1 = states.alloc_one()
    r1 = cache.insert(
        InsertParams(RadixKey(list(range(1, 5))), full[:4], mamba_value=torch.tensor([s1]))
    )
    s2 = states.alloc_one()
    r2 = cache.insert(
        InsertParams(
            RadixKey(list(range(1, 9))), full, prev_prefix_len=4, mamba_value=torch.tensor([s2])
        )
    )
    ack_all(tier, engine)
    return r1.last_device_node, r2.last_device_node


def test_mamba_state_is_backed_up_with_its_node_and_demotion_keeps_it():
    cache, tier, engine = hybrid_host_cache(32, 64, mamba_slots=8, host_mamba_slots=4)
    top, leaf = mamba_chain(cache, tier, engine)
    assert engine.ops(1) == [
        ("full", "d2h", [1, 2, 3, 4], [1, 2, 3, 4]),
        ("mamba", "d2h", [1], [1]),
    ]
    assert engine.ops(2) == [
        ("full", "d2h", [5, 6, 7, 8], [5, 6, 7, 8]),
        ("mamba", "d2h", [2], [2]),
    ]
    assert cache.evict(EvictParams(mamba_num=1)).mamba_num_evicted == 1
    assert values(top, MAMBA) == (None, [1])  # internal: a device tombstone, host kept
    assert cache.evict(EvictParams(num_tokens=8)).num_tokens_evicted == 8
    assert values(leaf, MAMBA) == (None, [2])
    assert list(tier.aux[0].host.lru) == [top, leaf]
    assert cache.pools.mamba.allocator.available_size() == 8
    cache.check_invariants({"full": 0, "mamba": 0})


def test_mamba_load_back_copies_the_state_into_a_fresh_slot_and_the_requests_slot():
    cache, tier, engine = hybrid_host_cache(32, 64, mamba_slots=8, host_mamba_slots=4)
    top, leaf = mamba_chain(cache, tier, engine)
    cache.evict(EvictParams(mamba_num=1))
    cache.evict(EvictParams(num_tokens=8))
    req = Req(token_ids=list(range(1, 10)), req_pool_idx=0)
    m = cache.match_prefix(MatchPrefixParams(RadixKey(list(range(1, 9))), req=req))
    assert (m.device_prefix_len, m.host_hit_length, m.mamba_host_hit_length) == (0, 8, 1)
    assert m.last_host_node is leaf and req.mamba_pool_idx == 2
    loaded = tier.load_back(m, req=req)
    assert loaded.device_prefix_len == 8 and loaded.last_device_node is leaf
    assert engine.ops(3) == [
        ("full", "h2d", [1, 2, 3, 4, 5, 6, 7, 8], [1, 2, 3, 4, 5, 6, 7, 8]),
        ("mamba", "h2d", [2, 2], [1, 2]),  # node's fresh slot 1 and the request's slot 2
    ]
    assert values(leaf, MAMBA) == ([1], [2]) and values(top, MAMBA) == (None, [1])
    assert cache.pools.mamba.allocator.available_size() == 6
    tier.loading_check()
    cache.check_invariants({"full": 0, "mamba": 1})


def test_mamba_only_load_back_when_the_full_kv_is_on_the_device():
    cache, tier, engine = hybrid_host_cache(32, 64, mamba_slots=8, host_mamba_slots=4)
    _top, leaf = mamba_chain(cache, tier, engine)
    tail = alloc(cache, 12)  # a child without a state makes the leaf internal
    cache.insert(InsertParams(RadixKey(list(range(1, 13))), tail))
    ack_all(tier, engine)
    cache.evict(EvictParams(mamba_num=2))  # both states: device tombstones, host copies kept
    assert values(leaf, FULL)[0] == [5, 6, 7, 8] and values(leaf, MAMBA) == (None, [2])
    m = cache.match_prefix(MatchPrefixParams(RadixKey(list(range(1, 9)))))
    assert (m.device_prefix_len, m.host_hit_length, m.mamba_host_hit_length) == (0, 8, 1)
    loaded = tier.load_back(m)
    assert loaded.device_prefix_len == 8 and loaded.device_indices.tolist() == list(range(1, 9))
    assert engine.ops(4) == [("mamba", "h2d", [2], [2])]
    tier.loading_check()
    cache.check_invariants({"full": 0, "mamba": 0})


def test_mamba_host_eviction_and_cascade():
    cache, tier, engine = hybrid_host_cache(32, 64, mamba_slots=8, host_mamba_slots=4)
    top, leaf = mamba_chain(cache, tier, engine)
    cache.evict(EvictParams(num_tokens=8))
    assert tier.evict_host_aux("mamba", 1) == 1  # the leaf's state, demoted first
    assert values(leaf, MAMBA) == (None, None) and leaf.parent is top
    m = cache.match_prefix(MatchPrefixParams(RadixKey(list(range(1, 9)))))
    assert m.host_hit_length == 4 and m.last_host_node is top  # the state before it
    assert tier.evict_host(4) == 4  # the host leaf goes whole
    assert values(top, MAMBA) == (None, [1]) and not top.children
    assert tier.evict_host(4) == 4  # then its parent, state and all
    assert not cache.tree.root.children
    assert tier.host_pools.aux["mamba"].available_size() == 4
    cache.check_invariants({"full": 0, "mamba": 0})


# ---------------------------------------------------------------------------- failures
def demoted_hybrid(**kw):
    cache, tier, engine = hybrid_host_cache(
        16, 64, sliding_window=4, swa_tokens=8, mamba_slots=8, host_mamba_slots=4, **kw
    )
    full = alloc(cache, 8)
    s = cache.pools.mamba.allocator.alloc_one()
    r = cache.insert(InsertParams(RadixKey(list(range(1, 9))), full, mamba_value=torch.tensor([s])))
    ack_all(tier, engine)
    cache.evict(EvictParams(num_tokens=8))
    return cache, tier, engine, r.last_device_node


def pools_free(cache, tier):
    return cache.pools.available() | tier.host_pools.available()


def test_load_back_with_the_swa_pool_held_by_a_request_fails_and_releases_everything():
    cache, tier, _engine, leaf = demoted_hybrid()
    held = alloc(cache, 8)  # a running request holds every SWA slot
    before = pools_free(cache, tier)
    req = Req(token_ids=list(range(1, 10)), req_pool_idx=0)
    m = cache.match_prefix(MatchPrefixParams(RadixKey(list(range(1, 9))), req=req))
    assert m.host_hit_length == 8 and m.mamba_host_hit_length == 1
    out = tier.load_back(m, req=req)
    assert out is m and out.device_prefix_len == 0
    assert tier.stats.load_failed == 1 and not tier.loads
    assert pools_free(cache, tier) == before | {"mamba": before["mamba"] - 1}  # the request's
    assert values(leaf, FULL)[0] is None and leaf.data[0].host_lock_ref == 0
    cache.check_invariants({"full": 8, "swa": 8, "mamba": 1})
    cache.pools.kv_allocator.free(held)


def test_load_back_past_the_quota_is_skipped():
    cache, tier, engine, _leaf = demoted_hybrid()
    m = cache.match_prefix(MatchPrefixParams(RadixKey(list(range(1, 9)))))
    assert tier.load_back(m, mem_quota=7) is m
    assert tier.stats.load_skipped == 1 and not engine.held
    cache.check_invariants({"full": 0, "swa": 0, "mamba": 0})


def test_a_failed_hybrid_load_copy_is_undone_and_the_request_keeps_its_device_state():
    cache, tier, engine, leaf = demoted_hybrid()
    before = pools_free(cache, tier)
    req = Req(token_ids=list(range(1, 10)), req_pool_idx=0)
    m = cache.match_prefix(MatchPrefixParams(RadixKey(list(range(1, 9))), req=req))
    engine.failing.add(max(engine.batches) + 1)
    out = tier.load_back(m, req=req)
    assert out is m and tier.stats.load_copy_failed == 1
    assert values(leaf, FULL)[0] is None and values(leaf, SWA)[0] is None
    assert values(leaf, 2)[0] is None and values(leaf, 2)[1] is not None
    after = pools_free(cache, tier)
    assert after == before | {"mamba": before["mamba"] - 1}  # only the request's own slot
    cache.check_invariants({"full": 0, "swa": 0, "mamba": 1})
    tier.loading_check()  # nothing pending, nothing raised


def test_the_factory_builds_a_host_tier_on_every_hybrid_config():
    for kw in (
        {"sliding_window": 4, "swa_tokens": 32},
        {"mamba_slots": 8},
        {"sliding_window": 4, "swa_tokens": 32, "mamba_slots": 8},
    ):
        cache = build_cache(CacheConfig.of(full_tokens=64, hicache_ratio=2.0, **kw))
        tier = cache.host_tier
        assert isinstance(tier, HostTier) and tier.host_pools.full.capacity == 128
        caps = tier.host_pools.capacities()
        if "swa_tokens" in kw:
            assert caps["host_swa"] == 64
        if "mamba_slots" in kw:
            assert caps["host_mamba"] == 16
        cache.check_invariants()


def test_write_back_backs_up_an_internal_state_before_its_device_tombstone():
    cache, tier, engine = hybrid_host_cache(
        32, 64, write_policy="write_back", mamba_slots=8, host_mamba_slots=4
    )
    top, leaf = mamba_chain(cache, tier, engine)
    assert not engine.batches and values(top, MAMBA) == ([1], None)
    assert cache.evict(EvictParams(mamba_num=1)).mamba_num_evicted == 1  # top: internal
    assert engine.ops(1) == [
        ("full", "d2h", [1, 2, 3, 4], [1, 2, 3, 4]),
        ("mamba", "d2h", [1], [1]),
    ]
    assert values(top, MAMBA) == (None, [1]) and values(top, FULL) == ([1, 2, 3, 4], [1, 2, 3, 4])
    assert values(leaf, FULL) == ([5, 6, 7, 8], None)  # write-back: only what is evicted
    m = cache.match_prefix(MatchPrefixParams(RadixKey(list(range(1, 5)))))
    assert (m.device_prefix_len, m.host_hit_length, m.mamba_host_hit_length) == (0, 4, 1)
    assert tier.load_back(m).device_prefix_len == 4
    assert engine.ops(2) == [("mamba", "h2d", [1], [1])]
    tier.loading_check()
    cache.check_invariants({"full": 0, "mamba": 0})


def test_write_back_backs_up_an_internal_window_before_its_device_tombstone():
    cache, _tier, engine = hybrid_host_cache(
        32, 64, write_policy="write_back", sliding_window=4, swa_tokens=16
    )
    r = cache.insert(InsertParams(RadixKey(list(range(1, 9))), alloc(cache, 8)))
    top = r.last_device_node.parent
    assert cache.evict(EvictParams(swa_num_tokens=4)).swa_num_tokens_evicted == 4
    assert engine.ops(1) == [
        ("full", "d2h", [1, 2, 3, 4], [1, 2, 3, 4]),
        ("swa", "d2h", [1, 2, 3, 4], [1, 2, 3, 4]),
    ]
    assert values(top, SWA) == (None, [1, 2, 3, 4])
    m = cache.match_prefix(MatchPrefixParams(RadixKey(list(range(1, 5)))))
    assert (m.host_hit_length, m.swa_host_hit_length) == (4, 4)
    cache.check_invariants({"full": 0, "swa": 0})


def test_a_host_boundary_with_its_state_on_the_device_gives_the_request_that_state():
    """Found by the engine's equal-output test: the device match stopped above the boundary
    (no device window there), so the request's slot held a shallower state."""
    cache, tier, engine = hybrid_host_cache(
        32, 64, sliding_window=4, swa_tokens=16, mamba_slots=8, host_mamba_slots=4
    )
    states = cache.pools.mamba.allocator
    full = alloc(cache, 12)
    s1, s2 = states.alloc_one(), states.alloc_one()
    cache.insert(
        InsertParams(RadixKey(list(range(1, 5))), full[:4], mamba_value=torch.tensor([s1]))
    )
    leaf = cache.insert(
        InsertParams(RadixKey(list(range(1, 9))), full[:8], 4, mamba_value=torch.tensor([s2]))
    ).last_device_node
    cache.insert(InsertParams(RadixKey(list(range(1, 13))), full, 8, swa_evicted_seqlen=8))
    ack_all(tier, engine)
    cache.evict(EvictParams(swa_num_tokens=8))  # the windows of [1..4] and [5..8] (states too)
    s3 = states.alloc_one()  # a request publishes the state at [1..8] again, not the window
    cache.insert(
        InsertParams(
            RadixKey(list(range(1, 9))),
            full[:8],
            8,
            mamba_value=torch.tensor([s3]),
            swa_evicted_seqlen=8,
        )
    )
    assert values(leaf, SWA)[0] is None and values(leaf, 2) == ([s3], [s2])
    copies = []
    cache.pools.mamba.states.copy = lambda src, dst: copies.append((src, dst))
    req = Req(token_ids=list(range(1, 10)), req_pool_idx=0)
    m = cache.match_prefix(MatchPrefixParams(RadixKey(list(range(1, 9))), req=req))
    assert (m.device_prefix_len, m.host_hit_length, m.mamba_host_hit_length) == (0, 8, 0)
    assert m.last_host_node is leaf and copies == []  # nothing matched on the device
    assert tier.load_back(m, req=req).device_prefix_len == 8
    assert copies == [(s3, req.mamba_pool_idx)]
    assert engine.ops(max(engine.batches)) == [("swa", "h2d", [5, 6, 7, 8], [5, 6, 7, 8])]
    tier.loading_check()
    cache.check_invariants({"full": 0, "swa": 0, "mamba": 1})


def test_a_load_back_whose_window_was_host_evicted_since_the_match_recomputes():
    cache, tier, engine, leaf = demoted_hybrid()
    req = Req(token_ids=list(range(1, 10)), req_pool_idx=0)
    m = cache.match_prefix(MatchPrefixParams(RadixKey(list(range(1, 9))), req=req))
    assert m.host_hit_length == 8
    tier.evict_host_aux("swa", 8)  # host pressure between the match and the load-back
    before = pools_free(cache, tier)
    assert tier.load_back(m, req=req) is m
    assert tier.stats.load_failed == 1 and pools_free(cache, tier) == before
    assert not tier.loads and max(engine.batches) == 1  # nothing submitted
    tier.evict_host(8)  # and once the anchor itself is gone
    assert leaf.parent is None and tier.load_back(m, req=req) is m
    assert tier.stats.load_failed == 2
    cache.check_invariants({"full": 0, "swa": 0, "mamba": 1})
