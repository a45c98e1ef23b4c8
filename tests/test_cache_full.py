"""Scenario tests of the full-attention cache with exact slot indices."""

import pytest
import torch

from tests.helpers import alloc, insert_fresh, make_cache, tree_shape
from uniradix import EvictParams, InsertParams, InvariantError, MatchPrefixParams, RadixKey
from uniradix.cache.insert_slots import NATIVE_DEDUP_MAX_PAGES


def match(cache, tokens, extra_key=None):
    return cache.match_prefix(MatchPrefixParams(RadixKey(tokens, extra_key)))


def test_insert_match_and_split_on_partial_match():
    cache = make_cache()
    result, slots = insert_fresh(cache, [1, 2, 3, 4, 5, 6, 7, 8])
    assert result.prefix_len == 0 and slots.tolist() == [1, 2, 3, 4, 5, 6, 7, 8]
    m = match(cache, [1, 2, 3, 4, 9])
    assert m.device_indices.tolist() == [1, 2, 3, 4]
    assert m.device_prefix_len == 4 and m.full_kv_hit_length == 4
    assert tree_shape(cache) == [(0, [1, 2, 3, 4], [1, 2, 3, 4]), (1, [5, 6, 7, 8], [5, 6, 7, 8])]
    assert m.last_device_node.num_tokens == 4
    assert match(cache, [9]).device_prefix_len == 0
    assert match(cache, [1, 2, 3, 4, 5, 6, 7, 8, 9]).device_indices.tolist() == list(range(1, 9))
    cache.check_invariants({"full": 0})


def test_shared_prefixes_branch_and_keep_their_slots():
    cache = make_cache()
    insert_fresh(cache, [1, 2, 3, 4, 5])  # slots 1..5
    result, _ = insert_fresh(cache, [1, 2, 3, 6, 7])  # slots 6..10; 6,7,8 are duplicates
    assert result.prefix_len == 3
    assert tree_shape(cache) == [
        (0, [1, 2, 3], [1, 2, 3]),
        (1, [4, 5], [4, 5]),
        (1, [6, 7], [9, 10]),
    ]
    assert cache.pools.kv_allocator.available_size() == 64 - 7
    assert match(cache, [1, 2, 3, 6, 7]).device_indices.tolist() == [1, 2, 3, 9, 10]
    cache.check_invariants({"full": 0})


@pytest.mark.parametrize("page_size", [1, 4, 16])
def test_page_alignment_of_keys_values_and_matches(page_size):
    cache = make_cache(full_tokens=256, page_size=page_size)
    tokens = list(range(100, 100 + 3 * page_size + 1))  # 3 pages and one stray token
    slots = alloc(cache, 4 * page_size)[: len(tokens)]
    result = cache.insert(InsertParams(RadixKey(tokens), slots))
    cached = len(tokens) - len(tokens) % page_size
    assert result.prefix_len == 0 and cache.total_size() == cached
    m = match(cache, tokens[: 2 * page_size + 1])
    assert (
        m.device_indices.tolist() == slots[: (2 * page_size + 1) // page_size * page_size].tolist()
    )
    assert match(cache, tokens[: page_size - 1] + [0]).device_prefix_len == 0
    diverged = tokens[:page_size] + [7] + tokens[page_size + 1 :]
    assert match(cache, diverged).device_prefix_len == page_size
    if cached < len(tokens):
        cache.pools.kv_allocator.free(slots[cached:])  # the stray page stayed ours
    cache.check_invariants({"full": 0})


def test_extra_key_namespaces_never_share():
    cache = make_cache()
    insert_fresh(cache, [1, 2, 3], extra_key="lora-a")
    assert match(cache, [1, 2, 3]).device_prefix_len == 0
    assert match(cache, [1, 2, 3], "lora-b").device_prefix_len == 0
    assert match(cache, [1, 2, 3], "lora-a").device_indices.tolist() == [1, 2, 3]
    insert_fresh(cache, [1, 2, 3])
    assert match(cache, [1, 2, 3]).device_indices.tolist() == [4, 5, 6]
    cache.check_invariants({"full": 0})


def test_bigram_keys_store_one_slot_per_bigram():
    cache = make_cache(is_eagle=True)
    key = cache.make_key([1, 2, 3, 4, 5])
    assert len(key) == 4
    slots = alloc(cache, 4)
    cache.insert(InsertParams(key, slots))
    m = cache.match_prefix(MatchPrefixParams(cache.make_key([1, 2, 3, 9])))
    assert m.device_indices.tolist() == [1, 2]
    with pytest.raises(ValueError, match="is_bigram"):
        match(cache, [1, 2, 3])
    cache.check_invariants({"full": 0})


def test_lock_prevents_eviction_until_released():
    cache = make_cache()
    insert_fresh(cache, [1, 2, 3, 4])
    insert_fresh(cache, [1, 2, 3, 4, 5, 6])
    m = match(cache, [1, 2, 3, 4])
    receipt = cache.inc_lock_ref(m.last_device_node)
    assert receipt.delta == 4
    assert (cache.evictable_size(), cache.protected_size()) == (2, 4)
    assert cache.evict(EvictParams(num_tokens=100)).num_tokens_evicted == 2
    assert match(cache, [1, 2, 3, 4]).device_prefix_len == 4
    cache.check_invariants({"full": 0})
    cache.dec_lock_ref(m.last_device_node, receipt)
    assert (cache.evictable_size(), cache.protected_size()) == (4, 0)
    assert cache.evict(EvictParams(num_tokens=1)).num_tokens_evicted == 4
    assert cache.pools.kv_allocator.available_size() == 64
    cache.check_invariants({"full": 0})


def test_lru_order_of_eviction_and_parent_after_children():
    cache = make_cache()
    insert_fresh(cache, [1, 1])  # slots 1,2
    insert_fresh(cache, [2, 2])  # slots 3,4
    insert_fresh(cache, [3, 3])  # slots 5,6
    match(cache, [1, 1])  # [1,1] becomes most recent
    assert cache.evict(EvictParams(num_tokens=2)).num_tokens_evicted == 2
    assert match(cache, [2, 2]).device_prefix_len == 0
    assert cache.evict(EvictParams(num_tokens=2)).num_tokens_evicted == 2
    assert match(cache, [3, 3]).device_prefix_len == 0
    assert match(cache, [1, 1]).device_prefix_len == 2
    cache.check_invariants({"full": 0})


def test_inner_node_is_evicted_only_after_its_children():
    cache = make_cache()
    insert_fresh(cache, [1, 2, 3])
    insert_fresh(cache, [1, 2, 4])  # splits: [1,2] -> [3], [4]
    assert cache.evict(EvictParams(num_tokens=1)).num_tokens_evicted == 1
    assert cache.evict(EvictParams(num_tokens=1)).num_tokens_evicted == 1
    assert tree_shape(cache) == [(0, [1, 2], [1, 2])]
    assert cache.evict(EvictParams(num_tokens=5)).num_tokens_evicted == 2
    assert cache.total_size() == 0 and cache.pools.kv_allocator.available_size() == 64
    cache.check_invariants({"full": 0})


@pytest.mark.parametrize(("policy", "survivor"), [("lfu", [1, 1]), ("priority", [3, 3])])
def test_lfu_and_priority_policies(policy, survivor):
    cache = make_cache(eviction_policy=policy)
    for tokens, priority in (([1, 1], 0), ([2, 2], 0), ([3, 3], 5)):
        cache.insert(InsertParams(RadixKey(tokens), alloc(cache, 2), priority=priority))
    for _ in range(3):  # [1,1] is hit three more times by inserts of the same key
        cache.insert(
            InsertParams(
                RadixKey([1, 1]),
                cache.match_prefix(MatchPrefixParams(RadixKey([1, 1]))).device_indices.clone(),
                prev_prefix_len=2,
            )
        )
    cache.evict(EvictParams(num_tokens=4))
    assert cache.total_size() == 2
    assert match(cache, survivor).device_prefix_len == 2


def test_duplicates_freed_on_insert_but_never_below_prev_prefix_len():
    cache = make_cache()
    a = cache.pools.kv_allocator
    insert_fresh(cache, [1, 2])  # slots 1,2
    r = cache.insert(InsertParams(RadixKey([1, 2, 3, 4]), alloc(cache, 4)))  # slots 3..6
    assert r.prefix_len == 2
    assert a.available_size() == 64 - 4  # duplicates 3,4 freed
    tree_slots = match(cache, [1, 2, 3, 4]).device_indices
    assert tree_slots.tolist() == [1, 2, 5, 6]
    value = torch.cat([tree_slots, alloc(cache, 2)])
    r = cache.insert(InsertParams(RadixKey([1, 2, 3, 4, 5, 6]), value, prev_prefix_len=4))
    assert r.prefix_len == 4 and a.available_size() == 64 - 6
    cache.check_invariants({"full": 0})


@pytest.mark.parametrize("num_pages", [2, NATIVE_DEDUP_MAX_PAGES + 2])
@pytest.mark.parametrize("repeat", [False, True])
def test_paged_duplicates_are_freed_once_even_when_the_caller_repeats_a_page(repeat, num_pages):
    """Duplicates that are distinct pages skip the allocator's per-slot check (`node_value`);
    a repeated page must not: it is still freed once, as before that shortcut. Short spans
    (native module present) go to the allocator's checked free with no proof; long ones are
    proved distinct first: both paths."""
    cache = make_cache(full_tokens=4 * num_pages * 2, page_size=2)
    a = cache.pools.kv_allocator
    key = list(range(1, 2 * num_pages + 1))
    insert_fresh(cache, key)
    slots = alloc(cache, num_pages if repeat else 2 * num_pages)
    value = torch.cat([slots, slots]) if repeat else slots
    before = a.available_size()
    r = cache.insert(InsertParams(RadixKey(key), value))
    assert r.prefix_len == len(key) and a.available_size() == before + slots.shape[0]
    cache.check_invariants({"full": 0})


def test_a_split_refreshes_the_child_like_the_reference():
    cache = make_cache()
    insert_fresh(cache, [1, 2, 3, 4])  # oldest
    insert_fresh(cache, [9, 9])
    match(cache, [1, 2, 5])  # splits [1,2,3,4]: the child [3,4] becomes the most recent leaf
    assert cache.evict(EvictParams(num_tokens=2)).num_tokens_evicted == 2
    assert match(cache, [9, 9]).device_prefix_len == 0
    assert match(cache, [1, 2, 3, 4]).device_prefix_len == 4
    cache.check_invariants({"full": 0})


@pytest.mark.parametrize("page_size", [2, 16])
def test_paged_duplicates_skip_the_trees_own_pages_past_prev_prefix_len(page_size):
    """A caller may hand back the tree's own pages past `prev_prefix_len`; one slot per page
    tells them apart from duplicates (both sides are whole pages), and only duplicates go."""
    ps = page_size
    cache = make_cache(full_tokens=16 * ps, page_size=ps)
    a = cache.pools.kv_allocator
    key = list(range(1, 3 * ps + 1))
    _, tree_slots = insert_fresh(cache, key)
    fresh = alloc(cache, 2 * ps)
    # pages: the tree's own, a duplicate, the tree's own again (its third page), ...
    value = torch.cat([tree_slots[:ps], fresh[:ps], tree_slots[2 * ps :]])
    before = a.available_size()
    r = cache.insert(InsertParams(RadixKey(key), value))
    assert r.prefix_len == 3 * ps
    assert a.available_size() == before + ps  # only the one duplicate page
    assert match(cache, key).device_indices.tolist() == tree_slots.tolist()
    cache.pools.kv_allocator.free(fresh[ps:])
    cache.check_invariants({"full": 0})


def test_a_tree_value_that_is_not_whole_pages_breaks_the_invariants():
    cache = make_cache(full_tokens=64, page_size=4)
    insert_fresh(cache, list(range(8)))
    (node,) = cache.tree.root.children.values()
    node.data[0].value = node.data[0].value[[0, 1, 3, 2, 4, 5, 6, 7]]  # one page shuffled
    with pytest.raises(InvariantError, match="not whole pages"):
        cache.check_invariants({"full": 0})
