"""Write-through of auxiliary data that comes back to a node already backed up.

A node's full KV may have its host copy while its SWA window or Mamba state has none: the
window was a tombstone when the node was backed up (or its host copy was evicted since), or
the state was published on the node later (an insert ending inside a backed-up node splits
it and puts a state on the upper fragment). When an insert brings that window or state back
to the device, write-through must back it up too, or its next device tombstone is a loss.
"""

import torch

from tests.helpers import alloc
from tests.tiers.builders import ack_all, hybrid_host_cache, values
from uniradix import EvictParams, InsertParams, MatchPrefixParams, RadixKey

FULL, AUX = 0, 1  # the SWA or the Mamba component, alone beside the full KV


def tombstoned_top(policy: str):
    """[1..4] (an SWA tombstone: the request's cursor was 4) -> [5..8], W=4, page 1,
    backed up (full KV of both, window of the leaf only) and acked."""
    cache, tier, engine = hybrid_host_cache(
        32, 64, write_policy=policy, sliding_window=4, swa_tokens=16
    )
    first = alloc(cache, 8)
    cache.pools.kv_allocator.free_swa(first[:4])
    leaf = cache.insert(
        InsertParams(RadixKey(list(range(1, 9))), first, swa_evicted_seqlen=4)
    ).last_device_node
    return cache, tier, engine, leaf.parent, leaf


def test_a_revived_swa_window_on_a_backed_up_node_is_backed_up_by_write_through():
    cache, tier, engine, top, _leaf = tombstoned_top("write_through")
    assert engine.ops(1) == [
        ("full", "d2h", [1, 2, 3, 4, 5, 6, 7, 8], [1, 2, 3, 4, 5, 6, 7, 8]),
        ("swa", "d2h", [5, 6, 7, 8], [1, 2, 3, 4]),
    ]
    ack_all(tier, engine)
    assert values(top, FULL) == ([1, 2, 3, 4], [1, 2, 3, 4]) and values(top, AUX) == (None, None)
    # A second request recomputed [1..8] with its window live from position 0: the insert
    # revives top's window with that request's slots 9..12 (full 1..4 are freed).
    cache.insert(InsertParams(RadixKey(list(range(1, 9))), alloc(cache, 8)))
    assert values(top, FULL)[0] == [9, 10, 11, 12]
    assert values(top, AUX)[0] == [1, 2, 3, 4]  # SWA slots 1..4, freed by the first request
    assert engine.ops(2) == [("swa", "d2h", [1, 2, 3, 4], [5, 6, 7, 8])]  # the window only
    assert values(top, AUX) == ([1, 2, 3, 4], [5, 6, 7, 8])
    assert tier.stats.aux_written["swa"] == 8 and tier.stats.written_tokens == 8
    cache.check_invariants({"full": 0, "swa": 0})
    ack_all(tier, engine)
    assert cache.evict(EvictParams(swa_num_tokens=4)).swa_num_tokens_evicted == 4
    assert values(top, AUX) == (None, [5, 6, 7, 8])  # a device tombstone, not a loss
    assert cache.evict(EvictParams(num_tokens=8)).num_tokens_evicted == 8  # both demoted
    m = cache.match_prefix(MatchPrefixParams(RadixKey([1, 2, 3, 4, 99])))
    assert (m.host_hit_length, m.swa_host_hit_length) == (4, 4) and m.last_host_node is top
    cache.check_invariants({"full": 0, "swa": 0})


def test_the_revived_window_rides_in_the_batch_of_the_new_nodes_backup():
    cache, tier, engine, top, leaf = tombstoned_top("write_through")
    ack_all(tier, engine)
    r = cache.insert(InsertParams(RadixKey(list(range(1, 13))), alloc(cache, 12)))
    assert r.last_device_node.parent is leaf
    assert engine.ops(2) == [
        ("full", "d2h", [17, 18, 19, 20], [9, 10, 11, 12]),
        ("swa", "d2h", [1, 2, 3, 4, 13, 14, 15, 16], [5, 6, 7, 8, 9, 10, 11, 12]),
    ]
    assert values(top, AUX) == ([1, 2, 3, 4], [5, 6, 7, 8])
    assert r.last_device_node.data[FULL].metadata == {"write": 2}
    assert top.data[FULL].metadata is None  # its full KV is not in flight
    cache.check_invariants({"full": 0, "swa": 0})
    ack_all(tier, engine)
    cache.check_invariants({"full": 0, "swa": 0})


def test_a_revived_window_stays_on_the_device_while_its_backup_is_in_flight():
    cache, tier, engine, top, _leaf = tombstoned_top("write_through")
    ack_all(tier, engine)
    r = cache.insert(InsertParams(RadixKey(list(range(1, 13))), alloc(cache, 12)))
    assert engine.ops(2)[1] == (
        "swa",
        "d2h",
        [1, 2, 3, 4, 13, 14, 15, 16],
        [5, 6, 7, 8, 9, 10, 11, 12],
    )
    # The anchor's lock holds only the window near it: top, 8 tokens up with W=4, is
    # locked by the batch itself, so eviction cannot free slots 1..4 before the copy read them.
    cache.evict(EvictParams(swa_num_tokens=16))
    assert values(top, AUX) == ([1, 2, 3, 4], [5, 6, 7, 8])
    assert values(r.last_device_node, AUX)[0] == [13, 14, 15, 16]
    cache.check_invariants({"full": 0, "swa": 0})
    ack_all(tier, engine)
    assert cache.evict(EvictParams(swa_num_tokens=16)).swa_num_tokens_evicted >= 4
    assert values(top, AUX) == (None, [5, 6, 7, 8])  # now a device tombstone, not a loss
    cache.check_invariants({"full": 0, "swa": 0})


def test_write_through_selective_backs_up_a_revived_window_on_a_hot_node():
    cache, tier, engine, top, leaf = tombstoned_top("write_through_selective")
    for _ in range(2):  # two more requests with the same cursor: the chain becomes hot
        again = alloc(cache, 8)
        cache.pools.kv_allocator.free_swa(again[:4])
        cache.insert(InsertParams(RadixKey(list(range(1, 9))), again, swa_evicted_seqlen=4))
    assert list(engine.batches) == [1] and values(top, AUX) == (None, None)
    assert engine.ops(1)[1] == ("swa", "d2h", [5, 6, 7, 8], [1, 2, 3, 4])
    ack_all(tier, engine)
    cache.insert(InsertParams(RadixKey(list(range(1, 9))), alloc(cache, 8)))  # revives top
    assert engine.ops(2) == [("swa", "d2h", [1, 2, 3, 4], [5, 6, 7, 8])]
    ack_all(tier, engine)
    cache.evict(EvictParams(swa_num_tokens=8))
    assert values(top, AUX) == (None, [5, 6, 7, 8]) and values(leaf, AUX) == (None, [1, 2, 3, 4])
    cache.check_invariants({"full": 0, "swa": 0})


def test_a_failed_batch_drops_the_revived_windows_host_copy():
    cache, tier, engine, top, _leaf = tombstoned_top("write_through")
    ack_all(tier, engine)
    cache.insert(InsertParams(RadixKey(list(range(1, 9))), alloc(cache, 8)))
    assert engine.ops(2) == [("swa", "d2h", [1, 2, 3, 4], [5, 6, 7, 8])]
    engine.failing.add(2)
    ack_all(tier, engine)
    assert values(top, AUX) == ([1, 2, 3, 4], None)  # garbage on the host: dropped
    assert values(top, FULL)[1] == [1, 2, 3, 4]  # the full host copy was not in that batch
    assert tier.host_pools.aux["swa"].available_size() == 60
    cache.check_invariants({"full": 0, "swa": 0})


def test_a_state_published_on_a_backed_up_fragment_is_backed_up_by_write_through():
    cache, tier, engine = hybrid_host_cache(32, 64, mamba_slots=8, host_mamba_slots=4)
    states = cache.pools.mamba.allocator
    s1 = states.alloc_one()
    leaf = cache.insert(
        InsertParams(RadixKey(list(range(1, 9))), alloc(cache, 8), mamba_value=torch.tensor([s1]))
    ).last_device_node
    ack_all(tier, engine)
    s2 = states.alloc_one()
    # A request that stopped at [1..4] publishes its state there: the leaf splits, and the
    # upper fragment (full host copy [1..4] already) gets a state with no host copy.
    top = cache.insert(
        InsertParams(
            RadixKey(list(range(1, 5))),
            torch.from_numpy(leaf.data[FULL].value[:4].copy()),
            4,
            mamba_value=torch.tensor([s2]),
        )
    ).last_device_node
    assert top is leaf.parent and values(top, FULL) == ([1, 2, 3, 4], [1, 2, 3, 4])
    assert engine.ops(2) == [("mamba", "d2h", [s2], [2])]
    assert values(top, AUX) == ([s2], [2])
    ack_all(tier, engine)
    receipt = cache.inc_lock_ref(leaf)  # whatever the Mamba order, the victim is top's state
    assert cache.evict(EvictParams(mamba_num=1)).mamba_num_evicted == 1  # top: internal
    assert values(top, AUX) == (None, [2])  # a device tombstone, not a loss
    cache.dec_lock_ref(leaf, receipt)
    cache.evict(EvictParams(num_tokens=8))
    m = cache.match_prefix(MatchPrefixParams(RadixKey([1, 2, 3, 4, 99])))
    assert (m.host_hit_length, m.mamba_host_hit_length) == (4, 1) and m.last_host_node is top
    cache.check_invariants({"full": 0, "mamba": 0})


def test_write_back_backs_up_a_revived_window_when_its_backed_up_leaf_is_demoted():
    cache, _tier, engine, top, _leaf = tombstoned_top("write_back")
    assert cache.evict(EvictParams(num_tokens=8)).num_tokens_evicted == 8  # both demoted
    assert values(top, AUX) == (None, None) and values(top, FULL)[0] is None
    cache.insert(InsertParams(RadixKey(list(range(1, 9))), alloc(cache, 8)))  # revives both
    assert values(top, AUX)[0] is not None and values(top, AUX)[1] is None
    before = len(engine.batches)
    assert cache.evict(EvictParams(num_tokens=8)).num_tokens_evicted == 8
    swa_ops = [op for t in list(engine.batches)[before:] for op in engine.ops(t) if op[0] == "swa"]
    assert [len(op[2]) for op in swa_ops] == [4]  # top's revived window, before its demotion
    assert values(top, AUX)[0] is None and values(top, AUX)[1] is not None
    m = cache.match_prefix(MatchPrefixParams(RadixKey([1, 2, 3, 4, 99])))
    assert (m.host_hit_length, m.swa_host_hit_length) == (4, 4)
    cache.check_invariants({"full": 0, "swa": 0})
