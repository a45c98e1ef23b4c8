"""`slru` (segmented LRU): a node hit twice outlives any probationary node, whatever the
recency; `lru` on the same history evicts by recency alone."""

import pytest

from tests.helpers import alloc, make_cache
from uniradix import EvictParams, InsertParams, MatchPrefixParams, RadixKey
from uniradix.tree.policy import SLRU_PROTECTED_HITS, eviction_policy


def hit(cache, tokens):
    """One more hit on `tokens`: re-inserting a matched key past `prev_prefix_len` counts."""
    value = cache.match_prefix(MatchPrefixParams(RadixKey(tokens))).device_indices.clone()
    cache.insert(InsertParams(RadixKey(tokens), value))


@pytest.mark.parametrize(("policy", "survivor"), [("slru", [1, 1]), ("lru", [2, 2])])
def test_slru_keeps_the_twice_hit_node_that_lru_evicts(policy, survivor):
    cache = make_cache(eviction_policy=policy)
    for tokens in ([1, 1], [2, 2]):
        cache.insert(InsertParams(RadixKey(tokens), alloc(cache, 2)))
    for _ in range(SLRU_PROTECTED_HITS):
        hit(cache, [1, 1])
    hit(cache, [2, 2])  # [2, 2] is now the most recent, but hit once only
    cache.evict(EvictParams(num_tokens=2))
    assert cache.total_size() == 2
    assert cache.match_prefix(MatchPrefixParams(RadixKey(survivor))).device_prefix_len == 2
    cache.check_invariants({"full": 0})


def test_slru_is_listed_and_unknown_names_are_refused():
    assert eviction_policy("slru") is not eviction_policy("lru")
    with pytest.raises(ValueError, match="'slru2'"):
        eviction_policy("slru2")
