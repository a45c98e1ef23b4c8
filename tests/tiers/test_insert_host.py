"""`HostTier.insert_host`: pages that arrived on the host (an L3 prefetch) join the tree as
host copies, with exact nodes and slots; spare slots are freed; bad input changes nothing."""

import numpy as np
import pytest

from tests.helpers import insert_fresh
from tests.tiers.builders import host_cache
from uniradix import EvictParams, MatchPrefixParams, RadixKey


def host_slots(tier, n):
    slots = tier.alloc_host(n)
    assert slots is not None
    return slots


def check(cache, tier):
    cache.check_invariants({"full": 0})
    errors: list[str] = []
    tier.check_invariants(errors)
    assert errors == []


def drain_everything(cache, tier):
    """Evicts everything and checks both pools are whole again."""
    for t in list(tier.engine.held):
        tier.engine.release(t)
    tier.writing_check()
    tier.loading_check()
    cache.evict(EvictParams(num_tokens=cache.evictable_size()))
    tier.evict_host(tier.full.host_tokens)
    check(cache, tier)
    assert tier.host_pools.full.available_size() == tier.host_pools.full.capacity
    assert cache.pools.kv_allocator.available_size() == cache.pools.kv_allocator.capacity


def test_pages_past_the_match_become_one_host_only_leaf_that_loads_back():
    cache, tier, engine = host_cache(page_size=2)
    insert_fresh(cache, [1, 2, 3, 4])
    engine.release(1)
    tier.writing_check()
    slots = host_slots(tier, 4)
    key = RadixKey([1, 2, 3, 4, 5, 6, 7, 8, 9])
    assert tier.insert_host(key, slots, 4) == 4
    check(cache, tier)
    m = cache.match_prefix(MatchPrefixParams(key))
    assert (m.device_prefix_len, m.host_hit_length) == (4, 4)
    leaf = m.last_host_node
    assert leaf.data[0].value is None and leaf.data[0].host_value.tolist() == slots.tolist()
    assert tier.full.host_leaves.members == {leaf}
    loaded = tier.load_back(m)
    assert loaded.device_prefix_len == 8
    drain_everything(cache, tier)


def test_covered_nodes_without_a_host_copy_take_theirs_and_spare_slots_are_freed():
    cache, tier, _ = host_cache(page_size=2, write_policy="write_back")
    insert_fresh(cache, [1, 2, 3, 4])  # write-back: device only
    node = cache.match_prefix(MatchPrefixParams(RadixKey([1, 2, 3, 4]))).last_device_node
    assert node.data[0].host_value is None
    slots = host_slots(tier, 8)
    free_before = tier.host_pools.full.available_size()
    key = RadixKey([1, 2, 3, 4, 5, 6, 7, 8])
    assert tier.insert_host(key, slots, 0) == 8  # 4 as the node's host copy, 4 new
    assert node.data[0].host_value.tolist() == slots[:4].tolist()
    assert tier.host_pools.full.available_size() == free_before
    check(cache, tier)
    # Inserting the same pages again gains nothing and frees every slot.
    again = host_slots(tier, 8)
    assert tier.insert_host(key, again, 0) == 0
    assert tier.host_pools.full.available_size() == free_before
    check(cache, tier)
    drain_everything(cache, tier)


def test_write_through_drops_pages_whose_parent_has_no_host_copy():
    cache, tier, _ = host_cache(page_size=2, write_policy="write_through_selective")
    insert_fresh(cache, [1, 2, 3, 4])  # selective: not backed up on the first insert
    free_before = tier.host_pools.full.available_size()
    slots = host_slots(tier, 4)
    assert tier.insert_host(RadixKey([1, 2, 3, 4, 5, 6, 7, 8]), slots, 4) == 0
    assert tier.stats.host_insert_dropped_tokens == 4
    assert tier.host_pools.full.available_size() == free_before
    check(cache, tier)
    drain_everything(cache, tier)


def test_a_diverging_key_splits_the_node_and_hangs_the_leaf_at_the_split():
    cache, tier, _ = host_cache(page_size=2, write_policy="write_back")
    insert_fresh(cache, [1, 2, 3, 4, 5, 6])
    slots = host_slots(tier, 4)
    key = RadixKey([1, 2, 3, 4, 9, 9, 8, 8])
    assert tier.insert_host(key, slots, 4) == 4
    m = cache.match_prefix(MatchPrefixParams(key))
    assert (m.device_prefix_len, m.host_hit_length) == (4, 4)
    assert m.last_device_node.num_tokens == 4  # the split
    check(cache, tier)
    drain_everything(cache, tier)


def test_extra_key_namespaces_the_inserted_pages():
    cache, tier, _ = host_cache(page_size=2, write_policy="write_back")
    slots = host_slots(tier, 4)
    assert tier.insert_host(RadixKey([1, 2, 3, 4], "lora-a"), slots, 0) == 4
    assert cache.match_prefix(MatchPrefixParams(RadixKey([1, 2, 3, 4]))).host_hit_length == 0
    hit = cache.match_prefix(MatchPrefixParams(RadixKey([1, 2, 3, 4], "lora-a")))
    assert hit.host_hit_length == 4
    check(cache, tier)
    drain_everything(cache, tier)


@pytest.mark.parametrize(
    "start, n, message",
    [
        (1, 2, "start=1"),
        (-2, 2, "start=-2"),
        (0, 3, "whole pages"),
        (4, 4, "whole pages"),  # past the key's 6 tokens
        (2, 2, "fewer than start=2"),  # nothing of the key is in the tree
    ],
)
def test_bad_arguments_raise_and_change_nothing(start, n, message):
    cache, tier, _ = host_cache(page_size=2, write_policy="write_back")
    slots = host_slots(tier, 4)
    free_before = tier.host_pools.full.available_size()
    with pytest.raises(ValueError, match=message):
        tier.insert_host(RadixKey([1, 2, 3, 4, 5, 6]), slots[:n], start)
    assert tier.host_pools.full.available_size() == free_before  # the caller keeps them
    assert not cache.tree.root.children
    tier.host_pools.full.free(slots)
    check(cache, tier)


def test_slots_that_are_free_repeated_or_not_a_key_raise():
    cache, tier, _ = host_cache(page_size=2, write_policy="write_back")
    key = RadixKey([1, 2, 3, 4])
    with pytest.raises(ValueError, match="not allocated"):
        tier.insert_host(key, np.array([3, 4, 5, 6]), 0)
    slots = host_slots(tier, 2)
    with pytest.raises(ValueError, match="repeat"):
        tier.insert_host(key, np.concatenate([slots, slots]), 0)
    with pytest.raises(ValueError, match="RadixKey"):
        tier.insert_host([1, 2, 3, 4], slots, 0)
    with pytest.raises(ValueError, match="1-D integers"):
        tier.insert_host(key, np.zeros((1, 2)), 0)
    assert not cache.tree.root.children
