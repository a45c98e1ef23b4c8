"""Scenario tests of the host tier on full attention, with exact device and host indices."""

import pytest

from tests.helpers import alloc, insert_fresh
from tests.tiers.builders import host_cache
from uniradix import EvictParams, InsertParams, MatchPrefixParams, RadixKey


def match(cache, tokens):
    return cache.match_prefix(MatchPrefixParams(RadixKey(tokens)))


def check(cache, held=0):
    cache.check_invariants({"full": held})


def test_write_through_backs_up_at_insert_and_locks_until_the_ack():
    cache, tier, engine = host_cache()
    result, _ = insert_fresh(cache, [1, 2, 3, 4])
    node = result.last_device_node
    d = node.data[0]
    assert d.value.tolist() == [1, 2, 3, 4] and d.host_value.tolist() == [1, 2, 3, 4]
    assert engine.ops(1) == [("full", "d2h", [1, 2, 3, 4], [1, 2, 3, 4])]
    assert d.lock_ref == 1 and d.metadata == {"write": 1}
    assert tier.host_usage() == {"free": 28, "evictable": 0, "protected": 0, "in_flight": 4}
    assert cache.evict(EvictParams(num_tokens=4)).num_tokens_evicted == 0  # in flight
    check(cache)
    tier.writing_check()
    assert d.lock_ref == 1 and d.metadata == {"write": 1}  # not acked yet
    engine.release(1)
    tier.writing_check()
    assert d.lock_ref == 0 and d.metadata is None
    assert tier.host_usage()["evictable"] == 4
    check(cache)


def test_demotion_keeps_the_node_matchable_and_load_back_revives_it():
    cache, tier, engine = host_cache()
    result, _ = insert_fresh(cache, [1, 2, 3, 4])
    leaf = insert_fresh(cache, [1, 2, 3, 4, 5, 6])[0].last_device_node  # slots 5..10, 5..8 dup
    assert leaf.data[0].value.tolist() == [9, 10]
    assert engine.ops(2) == [("full", "d2h", [9, 10], [5, 6])]  # only the unbacked leaf
    engine.release(1), engine.release(2)
    tier.writing_check()
    assert cache.evict(EvictParams(num_tokens=6)).num_tokens_evicted == 6
    top = result.last_device_node
    assert top.data[0].value is None and leaf.data[0].value is None
    assert cache.pools.kv_allocator.available_size() == 16
    assert tier.stats.demoted_tokens == 6 and tier.stats.lost_tokens == 0
    assert tier.full.host_leaves.members == {leaf}
    check(cache)
    assert alloc(cache, 3).tolist() == [1, 2, 3]  # a request takes the old slots
    m = match(cache, [1, 2, 3, 4, 5, 6, 7])
    assert (m.device_prefix_len, m.host_hit_length) == (0, 6)
    assert m.last_device_node is cache.tree.root and m.last_host_node is leaf
    assert m.best_match_node is leaf
    loaded = tier.load_back(m)
    assert loaded.device_prefix_len == 6 and loaded.last_device_node is leaf
    dst = loaded.device_indices.tolist()
    assert dst == [4, 9, 10, 5, 6, 7]  # the allocator's free stack order
    assert engine.ops(3) == [("full", "h2d", [1, 2, 3, 4, 5, 6], dst)]
    assert top.data[0].value.tolist() == dst[:4] and leaf.data[0].value.tolist() == dst[4:]
    assert leaf.data[0].lock_ref == 1 and top.data[0].metadata == {"load": 3}
    check(cache, held=3)
    assert 3 not in engine.held  # load_back waited for its batch (a failed copy is undone)
    tier.loading_check()
    assert leaf.data[0].lock_ref == 0 and leaf.data[0].metadata is None
    assert match(cache, [1, 2, 3, 4, 5, 6, 7]).device_prefix_len == 6
    check(cache, held=3)


def test_evict_host_removes_host_leaves_then_their_parents():
    cache, tier, engine = host_cache()
    insert_fresh(cache, [1, 2, 3, 4])
    insert_fresh(cache, [1, 2, 3, 4, 5, 6])
    engine.release(1), engine.release(2)
    tier.writing_check()
    cache.evict(EvictParams(num_tokens=6))
    assert tier.evict_host(1) == 2  # the leaf [5, 6] goes whole
    assert len(cache.tree.root.children) == 1
    assert cache.host_tier.host_pools.full.available_size() == 28
    check(cache)
    assert tier.evict_host(10) == 4
    assert not cache.tree.root.children and tier.stats.host_evicted_tokens == 6
    assert tier.host_pools.full.available_size() == 32
    check(cache)


def test_insert_onto_a_demoted_node_recovers_it_with_the_callers_slots():
    cache, tier, engine = host_cache()
    node = insert_fresh(cache, [1, 2, 3, 4])[0].last_device_node
    engine.release(1)
    tier.writing_check()
    cache.evict(EvictParams(num_tokens=4))
    slots = alloc(cache, 6)
    free_before = cache.pools.kv_allocator.available_size()
    result = cache.insert(InsertParams(RadixKey([1, 2, 3, 4, 5, 6]), slots))
    assert result.prefix_len == 4
    assert node.data[0].value.tolist() == slots[:4].tolist()  # adopted, not freed
    assert node.data[0].host_value.tolist() == [1, 2, 3, 4]  # the host copy stays
    assert cache.pools.kv_allocator.available_size() == free_before
    assert engine.ops(2) == [("full", "d2h", slots[4:].tolist(), [5, 6])]  # only the new leaf
    assert node not in tier.full.host_leaves.members
    check(cache)


def test_split_during_a_pending_write_marks_and_releases_both_fragments():
    cache, tier, engine = host_cache()
    node = insert_fresh(cache, [1, 2, 3, 4])[0].last_device_node
    m = match(cache, [1, 2, 9])
    top = m.last_device_node
    assert top is node.parent and top.num_tokens == 2
    assert top.data[0].host_value.tolist() == [1, 2] and node.data[0].host_value.tolist() == [3, 4]
    assert top.data[0].metadata == node.data[0].metadata == {"write": 1}
    assert top.data[0].lock_ref == node.data[0].lock_ref == 1
    check(cache)
    engine.release(1)
    tier.writing_check()
    assert top.data[0].metadata is None and node.data[0].metadata is None
    assert top.data[0].lock_ref == node.data[0].lock_ref == 0
    check(cache)


def test_acks_in_any_order_commit_only_their_own_chain():
    cache, tier, engine = host_cache()
    a = insert_fresh(cache, [1, 2])[0].last_device_node
    b = insert_fresh(cache, [3, 4])[0].last_device_node
    engine.release(2)
    tier.writing_check()
    assert a.data[0].metadata == {"write": 1} and a.data[0].lock_ref == 1
    assert b.data[0].metadata is None and b.data[0].lock_ref == 0
    check(cache)
    engine.release(1)
    tier.writing_check()
    assert a.data[0].metadata is None and a.data[0].lock_ref == 0
    check(cache)


def test_write_back_backs_up_only_at_eviction():
    cache, tier, engine = host_cache(write_policy="write_back")
    base = insert_fresh(cache, [1, 2, 3, 4])[0].last_device_node
    leaf = insert_fresh(cache, [1, 2, 3, 4, 5, 6])[0].last_device_node
    assert base.data[0].host_value is None and not engine.batches
    lock = cache.inc_lock_ref(base)
    assert cache.evict(EvictParams(num_tokens=2)).num_tokens_evicted == 2
    assert engine.ops(1) == [("full", "d2h", [9, 10], [1, 2])]
    assert leaf.data[0].value is None and leaf.data[0].host_value.tolist() == [1, 2]
    assert base.data[0].host_value is None  # the parent is not backed up (H53)
    check(cache)
    cache.dec_lock_ref(base, lock)
    cache.evict(EvictParams(num_tokens=4))
    assert base.data[0].value is None and base.data[0].host_value.tolist() == [3, 4, 5, 6]
    tier.writing_check()  # the eviction's own acks are already committed
    assert tier.stats.demoted_tokens == 6 and not tier.writes
    check(cache)


def test_write_back_evicts_host_first_and_counts_a_real_loss_when_still_short():
    cache, tier, _ = host_cache(host_tokens=4, write_policy="write_back")
    a = insert_fresh(cache, [1, 2, 3, 4])[0].last_device_node
    cache.evict(EvictParams(num_tokens=4))
    assert a.data[0].host_value.tolist() == [1, 2, 3, 4]
    insert_fresh(cache, [5, 6, 7, 8])
    cache.evict(EvictParams(num_tokens=4))  # host full: a is evicted from the host first
    assert a.parent is None and tier.stats.host_evicted_tokens == 4
    assert match(cache, [5, 6, 7, 8, 9]).host_hit_length == 4
    check(cache)
    insert_fresh(cache, [9, 10, 11, 12, 13, 14])
    cache.evict(EvictParams(num_tokens=6))  # 6 > host capacity: lost
    assert tier.stats.lost_tokens == 6 and tier.stats.write_skipped_tokens == 6
    assert match(cache, [9, 10, 11, 12, 13, 14, 15]).host_hit_length == 0
    check(cache)


def test_write_through_selective_waits_for_the_second_hit():
    cache, _, engine = host_cache(write_policy="write_through_selective")
    insert_fresh(cache, [1, 2, 3, 4])
    assert not engine.batches
    insert_fresh(cache, [1, 2, 3, 4])  # hit_count 1
    assert not engine.batches
    node = insert_fresh(cache, [1, 2, 3, 4, 5])[0].last_device_node  # prefix hit twice
    assert engine.ops(1) == [("full", "d2h", [1, 2, 3, 4], [1, 2, 3, 4])]
    assert node.data[0].host_value is None
    check(cache)


def test_load_back_skips_below_threshold_and_past_the_quota():
    cache, tier, engine = host_cache(load_back_threshold=3)
    insert_fresh(cache, [1, 2])
    insert_fresh(cache, [1, 2, 3, 4, 5, 6])
    engine.release(1), engine.release(2)
    tier.writing_check()
    cache.evict(EvictParams(num_tokens=6))
    m = match(cache, [1, 2, 9])
    assert m.host_hit_length == 2 and tier.load_back(m) == m  # below the threshold
    m = match(cache, [1, 2, 3, 4, 5, 6, 7])
    assert m.host_hit_length == 6 and tier.load_back(m, mem_quota=5) == m
    assert tier.stats.load_skipped == 2 and not engine.held
    check(cache)


def test_load_back_with_the_device_full_releases_everything():
    cache, tier, engine = host_cache(full_tokens=4)
    node = insert_fresh(cache, [1, 2, 3, 4])[0].last_device_node
    engine.release(1)
    tier.writing_check()
    cache.evict(EvictParams(num_tokens=4))
    alloc(cache, 4)  # a running request holds the whole device pool
    m = match(cache, [1, 2, 3, 4, 5])
    assert tier.load_back(m) == m and tier.stats.load_failed == 1
    assert node.data[0].host_lock_ref == 0 and node in tier.full.host_leaves.members
    assert node.data[0].value is None and not tier.loads
    check(cache, held=4)


def test_init_load_back_rejects_a_foreign_node_and_a_bad_quota():
    cache, tier, _ = host_cache()
    other, _, _ = host_cache()
    foreign = insert_fresh(other, [1, 2])[0].last_device_node
    with pytest.raises(ValueError, match="not a node"):
        tier.init_load_back(foreign)
    with pytest.raises(ValueError, match="mem_quota"):
        tier.init_load_back(cache.tree.root, mem_quota=-1)
    with pytest.raises(ValueError, match="num_tokens"):
        tier.evict_host(-1)


def test_reset_empties_the_host_pool():
    cache, tier, _ = host_cache()
    insert_fresh(cache, [1, 2, 3, 4])
    cache.reset()
    assert tier.host_pools.full.available_size() == 32 and tier.full.host_tokens == 0
    check(cache)


def test_write_back_keeps_one_copy_after_a_load_back():
    cache, tier, engine = host_cache(write_policy="write_back")
    node = insert_fresh(cache, [1, 2, 3, 4])[0].last_device_node
    cache.evict(EvictParams(num_tokens=4))
    assert node.data[0].host_value.tolist() == [1, 2, 3, 4]
    assert tier.host_pools.full.available_size() == 28
    loaded = tier.load_back(match(cache, [1, 2, 3, 4, 5]))
    assert loaded.device_prefix_len == 4 and engine.ops(2)[0][1] == "h2d"
    assert node.data[0].host_value is not None  # read by the load until its ack
    check(cache)
    engine.release(2)
    tier.loading_check()
    assert node.data[0].host_value is None and node.data[0].value is not None
    assert tier.host_pools.full.available_size() == 32
    check(cache)
    cache.evict(EvictParams(num_tokens=4))  # backed up again at eviction
    assert node.data[0].value is None and node.data[0].host_value.tolist() == [1, 2, 3, 4]
    check(cache)


def test_a_failed_write_through_drops_its_host_copies():
    cache, tier, engine = host_cache()
    node = insert_fresh(cache, [1, 2, 3, 4])[0].last_device_node
    engine.failing.add(1)
    engine.release(1)
    tier.writing_check()
    assert node.data[0].host_value is None and node.data[0].lock_ref == 0
    assert tier.host_pools.full.available_size() == 32
    assert tier.stats.write_failed_tokens == 4
    check(cache)
    cache.evict(EvictParams(num_tokens=4))  # unbacked now: a real loss
    assert node.parent is None and tier.stats.lost_tokens == 4
    check(cache)


def test_a_failed_write_back_at_eviction_is_a_real_loss():
    cache, tier, engine = host_cache(write_policy="write_back")
    node = insert_fresh(cache, [1, 2, 3, 4])[0].last_device_node
    engine.failing.add(1)
    assert cache.evict(EvictParams(num_tokens=4)).num_tokens_evicted == 4
    assert node.parent is None and tier.stats.lost_tokens == 4
    assert tier.host_pools.full.available_size() == 32
    check(cache)


def test_a_failed_load_back_copy_degrades_to_the_device_only_hit():
    cache, tier, engine = host_cache()
    node = insert_fresh(cache, [1, 2, 3, 4])[0].last_device_node
    engine.release(1)
    tier.writing_check()
    cache.evict(EvictParams(num_tokens=4))
    m = match(cache, [1, 2, 3, 4, 5])
    engine.failing.add(2)
    loaded = tier.load_back(m)
    assert loaded is m and loaded.device_prefix_len == 0  # the request recomputes
    assert node.data[0].value is None and node.data[0].host_value.tolist() == [1, 2, 3, 4]
    assert node.data[0].lock_ref == 0 and node.data[0].metadata is None and not tier.loads
    assert tier.stats.load_copy_failed == 1 and tier.stats.loaded_tokens == 0
    assert cache.pools.kv_allocator.available_size() == 16
    tier.loading_check()  # nothing left to commit, nothing raised
    check(cache)
    engine.failing.clear()
    assert tier.load_back(match(cache, [1, 2, 3, 4, 5])).device_prefix_len == 4


def test_a_failed_asynchronous_init_load_back_fails_loudly_at_the_ack():
    cache, tier, engine = host_cache()
    node = insert_fresh(cache, [1, 2, 3, 4])[0].last_device_node
    engine.release(1)
    tier.writing_check()
    cache.evict(EvictParams(num_tokens=4))
    tier.init_load_back(node)
    engine.failing.add(2)
    engine.release(2)
    with pytest.raises(RuntimeError, match="load-back batch 2 failed"):
        tier.loading_check()


def test_write_through_backs_up_the_unbacked_chain_root_first_in_one_batch():
    cache, tier, engine = host_cache(full_tokens=32, host_tokens=8)
    other = insert_fresh(cache, [9, 9, 9, 9, 9, 9, 9, 9])[0].last_device_node  # host full
    engine.release(1)
    tier.writing_check()
    insert_fresh(cache, [1, 2])  # each of these finds the host full: skipped
    insert_fresh(cache, [1, 2, 3, 4])
    insert_fresh(cache, [1, 2, 3, 4, 5, 6])
    assert tier.stats.write_skipped_tokens == 2 + 4 + 6  # each chain from the root
    lock = cache.inc_lock_ref(match(cache, [1, 2, 3, 4, 5, 6, 7]).last_device_node)
    cache.evict(EvictParams(num_tokens=8))  # demotes `other`: a host leaf now
    cache.dec_lock_ref(lock.node, lock)
    assert other.data[0].value is None
    result, _ = insert_fresh(cache, [1, 2, 3, 4, 5, 6, 7, 8])
    device = cache.path_indices(result.last_device_node).tolist()
    (ticket,) = engine.held
    assert engine.ops(ticket) == [("full", "d2h", device, [1, 2, 3, 4, 5, 6, 7, 8])]
    assert other.parent is None  # evicted from the host to make room
    chain = list(cache.tree.path_to_root(result.last_device_node))
    assert [n.data[0].metadata for n in chain] == [{"write": ticket}] * 4
    check(cache)


def test_a_host_pin_keeps_a_host_leaf_and_a_bad_release_raises():
    cache, tier, engine = host_cache()
    node = insert_fresh(cache, [1, 2, 3, 4])[0].last_device_node
    engine.release(1)
    tier.writing_check()
    cache.evict(EvictParams(num_tokens=4))
    tier.inc_host_lock_ref(node)
    assert tier.evict_host(4) == 0 and node.data[0].host_lock_ref == 1
    assert tier.host_usage()["protected"] == 4
    check(cache)
    tier.dec_host_lock_ref(node)
    with pytest.raises(ValueError, match="host_lock_ref=0"):
        tier.dec_host_lock_ref(node)
    assert tier.evict_host(4) == 4 and node.parent is None
    check(cache)


def test_bad_host_tier_configs_are_refused():
    from uniradix import CacheConfig, build_cache

    with pytest.raises(ValueError, match="host_tokens"):
        build_cache(CacheConfig.of(full_tokens=64, host_tokens=8, hicache_ratio=2.0))
    with pytest.raises(ValueError, match="write policy"):
        build_cache(CacheConfig.of(full_tokens=64, host_tokens=64, write_policy="sometimes"))
