"""Misuse raises ValueError/TypeError naming the value, and leaves the cache unchanged."""

import pytest
import torch

from tests.helpers import alloc, insert_fresh, make_cache, tree_shape
from uniradix import EvictParams, InsertParams, MatchPrefixParams, RadixKey


@pytest.fixture
def cache():
    c = make_cache(full_tokens=64, page_size=2)
    insert_fresh(c, [1, 2, 3, 4])
    return c


def snapshot(cache):
    return (
        tree_shape(cache),
        cache.pools.kv_allocator.available_size(),
        cache.evictable_size(),
        cache.protected_size(),
    )


def unchanged(cache, before):
    assert snapshot(cache) == before
    cache.check_invariants({"full": 0})


def test_value_length_mismatch(cache):
    before = snapshot(cache)
    with pytest.raises(ValueError, match="3 slots for a key of 4"):
        cache.insert(InsertParams(RadixKey([1, 2, 5, 6]), torch.tensor([9, 10, 11])))
    unchanged(cache, before)


def test_value_of_wrong_type(cache):
    before = snapshot(cache)
    with pytest.raises(TypeError, match="int64"):
        cache.insert(InsertParams(RadixKey([5, 6]), torch.tensor([10.0, 11.0])))
    unchanged(cache, before)


def test_misaligned_value_pages(cache):
    before = snapshot(cache)
    with pytest.raises(ValueError, match="whole pages"):
        cache.insert(InsertParams(RadixKey([7, 8]), torch.tensor([11, 12])))
    with pytest.raises(ValueError, match="whole pages"):
        cache.insert(InsertParams(RadixKey([7, 8]), torch.tensor([10, 12])))
    unchanged(cache, before)


def test_prev_prefix_len_out_of_range(cache):
    before = snapshot(cache)
    with pytest.raises(ValueError, match="prev_prefix_len=9"):
        cache.insert(InsertParams(RadixKey([1, 2]), torch.tensor([2, 3]), prev_prefix_len=9))
    unchanged(cache, before)


def test_receipt_released_twice(cache):
    node = cache.match_prefix(MatchPrefixParams(RadixKey([1, 2, 3, 4]))).last_device_node
    receipt = cache.inc_lock_ref(node)
    cache.dec_lock_ref(node, receipt)
    before = snapshot(cache)
    with pytest.raises(ValueError, match=f"receipt {receipt.receipt_id} is not outstanding"):
        cache.dec_lock_ref(node, receipt)
    with pytest.raises(ValueError, match="no outstanding lock"):
        cache.dec_lock_ref(node)
    unchanged(cache, before)


def test_receipt_released_on_another_node(cache):
    insert_fresh(cache, [1, 2, 7, 8])
    a = cache.match_prefix(MatchPrefixParams(RadixKey([1, 2, 3, 4]))).last_device_node
    b = cache.match_prefix(MatchPrefixParams(RadixKey([1, 2, 7, 8]))).last_device_node
    receipt = cache.inc_lock_ref(a)
    before = snapshot(cache)
    with pytest.raises(ValueError, match="anchored on"):
        cache.dec_lock_ref(b, receipt)
    unchanged(cache, before)
    cache.dec_lock_ref(a, receipt)


def test_node_not_in_tree(cache):
    node = cache.match_prefix(MatchPrefixParams(RadixKey([1, 2, 3, 4]))).last_device_node
    cache.evict(EvictParams(num_tokens=64))
    other = make_cache()
    insert_fresh(other, [1, 2])
    foreign = other.match_prefix(MatchPrefixParams(RadixKey([1, 2]))).last_device_node
    before = snapshot(cache)
    for bad in (node, foreign, "node"):
        with pytest.raises(ValueError, match="not a node of this cache"):
            cache.inc_lock_ref(bad)
    unchanged(cache, before)


@pytest.mark.parametrize(
    "params",
    [EvictParams(num_tokens=-1), EvictParams(swa_num_tokens=-5), EvictParams(num_tokens=1.5)],
)
def test_negative_or_fractional_eviction_sizes(cache, params):
    before = snapshot(cache)
    with pytest.raises(ValueError, match="non-negative int"):
        cache.evict(params)
    unchanged(cache, before)


def test_key_of_the_wrong_kind(cache):
    before = snapshot(cache)
    with pytest.raises(TypeError, match="RadixKey"):
        cache.match_prefix(MatchPrefixParams([1, 2]))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="is_bigram"):
        cache.insert(InsertParams(RadixKey([1, 2, 3], is_bigram=True), alloc(cache, 2)))
    cache.pools.kv_allocator.free(torch.tensor([6, 7]))
    unchanged(cache, before)


def test_unknown_policy_and_bad_page_size():
    with pytest.raises(ValueError, match="unknown eviction policy 'lrux'"):
        make_cache(eviction_policy="lrux")
    with pytest.raises(ValueError, match="page_size"):
        make_cache(page_size=0)
