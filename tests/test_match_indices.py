"""The slots tensor a CPU match returns: reused for a match ending on one node while that
node's value is the same array, and made anew whenever the value changed (split, eviction,
re-insert, SWA recovery), so a match never returns slots the node no longer holds."""

from tests.helpers import alloc, insert_fresh, make_cache
from uniradix import CacheConfig, EvictParams, InsertParams, MatchPrefixParams, RadixKey
from uniradix.cache.paths import SLOT_TENSORS_KEPT
from uniradix.factory import build_cache
from uniradix.memory.swa_allocator import SWASlotAllocator


def match(cache, tokens):
    return cache.match_prefix(MatchPrefixParams(RadixKey(tokens)))


def test_one_node_match_reuses_its_tensor_while_the_value_is_the_same():
    cache = make_cache()
    _, slots = insert_fresh(cache, [1, 2, 3, 4])
    first = match(cache, [1, 2, 3, 4, 9])
    again = match(cache, [1, 2, 3, 4])
    assert first.device_indices is again.device_indices
    assert again.device_indices.tolist() == slots.tolist()
    node = first.last_device_node
    kept = cache.tree.slot_tensors.get(node)
    assert kept is not None and kept[0] is node.data[0].value
    cache.check_invariants({"full": 0})


def test_split_node_gives_the_halves_their_own_slots():
    cache = make_cache()
    _, slots = insert_fresh(cache, [1, 2, 3, 4, 5, 6])
    whole = match(cache, [1, 2, 3, 4, 5, 6]).device_indices
    assert whole.tolist() == slots.tolist()
    head = match(cache, [1, 2, 3, 7])  # splits the node after 3 units
    assert head.device_indices.tolist() == slots[:3].tolist()
    tail = match(cache, [1, 2, 3, 4, 5, 6])  # two nodes now
    assert tail.device_indices.tolist() == slots.tolist()
    # the lower half is still the node matched first: its memo was the old, longer array
    lower = tail.last_device_node
    assert match(cache, [1, 2, 3]).device_indices.tolist() == slots[:3].tolist()
    assert lower.data[0].value.tolist() == slots[3:].tolist()
    cache.check_invariants({"full": 0})


def test_evicted_and_reinserted_key_returns_the_new_slots():
    cache = make_cache(full_tokens=8)
    insert_fresh(cache, [1, 2, 3, 4])
    node = match(cache, [1, 2, 3, 4]).last_device_node
    assert node in cache.tree.slot_tensors
    cache.evict(EvictParams(num_tokens=4))
    assert node not in cache.tree.slot_tensors  # nothing keeps the freed slots' array
    assert match(cache, [1, 2, 3, 4]).device_prefix_len == 0
    _, new = insert_fresh(cache, [1, 2, 3, 4])
    got = match(cache, [1, 2, 3, 4]).device_indices
    assert got.tolist() == new.tolist()
    cache.check_invariants({"full": 0})


def path_slots(node):
    values = []
    while node.parent is not None:
        values.append(node.data[0].value.tolist())
        node = node.parent
    return [slot for value in reversed(values) for slot in value]


def test_swa_recovery_matches_return_the_nodes_current_slots():
    cache = build_cache(
        CacheConfig.of(
            full_tokens=64,
            swa_tokens=32,
            sliding_window=4,
            page_size=1,
            max_context_len=128,
            max_running_requests=8,
        )
    )
    assert isinstance(cache.pools.kv_allocator, SWASlotAllocator)
    tokens = list(range(8))
    cache.insert(InsertParams(RadixKey(tokens), alloc(cache, 8)))
    before = match(cache, tokens)
    assert before.device_indices.tolist() == path_slots(before.last_device_node)
    cache.evict(EvictParams(swa_num_tokens=32))  # tombstones the SWA side, full stays
    assert match(cache, tokens).device_prefix_len == 0
    fresh = alloc(cache, 8)
    cache.insert(InsertParams(RadixKey(tokens), fresh))  # recovers the tombstones
    after = match(cache, tokens)
    assert after.device_prefix_len == 8
    assert after.device_indices.tolist() == path_slots(after.last_device_node)
    assert set(after.device_indices.tolist()) & set(fresh.tolist())  # adopted slots show
    for node in cache.tree.nodes():
        kept = cache.tree.slot_tensors.get(node)
        assert kept is None or kept[0] is node.data[0].value or kept[1] is not after.device_indices
    cache.check_invariants({"full": 0, "swa": 0})


def test_kept_tensors_are_bounded_and_matches_stay_right():
    cache = make_cache(full_tokens=4 * (SLOT_TENSORS_KEPT + 8))
    inserted = {}
    for first in range(SLOT_TENSORS_KEPT + 8):  # one node each: they start with different units
        tokens = [1000 + first, 1, 2, 3]
        inserted[first] = (tokens, insert_fresh(cache, tokens)[1])
        assert match(cache, tokens).device_indices.tolist() == inserted[first][1].tolist()
        assert len(cache.tree.slot_tensors) <= SLOT_TENSORS_KEPT
    assert len(cache.tree.slot_tensors) == SLOT_TENSORS_KEPT
    # the oldest left first; matching one again gives its slots and keeps its tensor again
    tokens, slots = inserted[0]
    node = match(cache, tokens).last_device_node
    assert node in cache.tree.slot_tensors
    assert match(cache, tokens).device_indices.tolist() == slots.tolist()
    for node, (value, tensor) in cache.tree.slot_tensors.items():
        assert value is node.data[0].value and tensor.tolist() == value.tolist()
    cache.check_invariants({"full": 0})
