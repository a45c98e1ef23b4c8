"""The ghost list of the default Mamba order: a state that showed reuse and left the tree with
its full KV returns, stored again, spared probation and covers; one tombstoned under its full
KV leaves no ghost; the list holds at most as many ghosts as live states."""

from tests.eviction.test_aux_eviction import holders, mamba_cache, put
from tests.eviction.test_flop_aware import node_at
from tests.eviction.test_mamba_probation import probation_of
from uniradix import EvictParams, MatchPrefixParams, RadixKey
from uniradix.eviction.mamba_ghosts import prefix_digest


def test_a_resumed_state_gone_with_its_full_kv_returns_off_probation_and_uncovered() -> None:
    """The state at 4 is resumed from, then evicted with its leaf (full KV and all). Stored
    again together with a deeper state at 8 that covers it, it stays off probation; a fresh
    one-off state goes on probation, and is the victim."""
    cache = mamba_cache("reuse_credit")
    put(cache, [1, 2, 3, 4])
    cache.match_prefix(MatchPrefixParams(RadixKey([1, 2, 3, 4, 5])))
    order = probation_of(cache)
    assert cache.evict(EvictParams(num_tokens=4)).num_tokens_evicted == 4
    assert cache.tree.root.children == {} and len(order.ghosts) == 1
    put(cache, [1, 2, 3, 4])
    put(cache, [1, 2, 3, 4, 5, 6, 7, 8])  # covers the state at 4 (single-child chain)
    put(cache, [20, 21, 22, 23, 24, 25])
    returned, one_off = node_at(cache, 4), node_at(cache, 6)
    assert returned in order.ghosts.returned and len(order.ghosts) == 0
    assert not order.on_probation(returned) and order.on_probation(one_off)
    cache.check_invariants()
    assert cache.evict(EvictParams(mamba_num=1)).mamba_num_evicted == 1
    assert holders(cache) == [4, 8]


def test_a_never_resumed_state_leaves_no_ghost() -> None:
    cache = mamba_cache("reuse_credit")
    put(cache, [1, 2, 3, 4])
    assert cache.evict(EvictParams(num_tokens=4)).num_tokens_evicted == 4
    put(cache, [1, 2, 3, 4])
    assert probation_of(cache).on_probation(node_at(cache, 4))


def test_a_state_tombstoned_under_its_full_kv_leaves_no_ghost() -> None:
    """The node stays (its child is locked), so the tree itself still holds the evidence."""
    cache = mamba_cache("reuse_credit")
    put(cache, [1, 2, 3, 4])
    put(cache, [1, 2, 3, 4, 5, 6])
    lock = cache.inc_lock_ref(node_at(cache, 6))
    cache.match_prefix(MatchPrefixParams(RadixKey([1, 2, 3, 4, 9])))
    assert cache.evict(EvictParams(mamba_num=1)).mamba_num_evicted == 1
    assert node_at(cache, 4).parent is not None and holders(cache) == [6]
    assert len(probation_of(cache).ghosts) == 0
    cache.dec_lock_ref(node_at(cache, 6), lock)
    cache.check_invariants()


def test_ghosts_are_at_most_the_live_states_oldest_dropped_first() -> None:
    """Three resumed one-state prompts leave the tree one by one while one other state lives:
    one ghost is kept, the last one's."""
    cache = mamba_cache("reuse_credit")
    put(cache, [90, 91])
    order = probation_of(cache)
    lock = cache.inc_lock_ref(node_at(cache, 2))
    digests = []
    for first in (10, 20, 30):
        put(cache, [first, first + 1, first + 2, first + 3])
        cache.match_prefix(MatchPrefixParams(RadixKey([first, first + 1, first + 2, first + 3, 0])))
        digests.append(prefix_digest(cache.tree, node_at(cache, 4)))
        assert cache.evict(EvictParams(num_tokens=4)).num_tokens_evicted == 4
    assert len(order.ghosts) == 1 and digests[-1] in order.ghosts._ghosts
    cache.dec_lock_ref(node_at(cache, 2), lock)
    cache.check_invariants()
