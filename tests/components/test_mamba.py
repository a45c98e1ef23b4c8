"""MambaComponent in a full+Mamba tree, driven through `cache.insert` with explicit slots."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from uniradix import CacheConfig, EvictParams, InsertParams, MatchPrefixParams, build_cache
from uniradix.cache.controller import UnifiedRadixCache
from uniradix.components.base import TreeComponent
from uniradix.components.mamba import MambaComponent
from uniradix.tree.node import TreeNode
from uniradix.types import CacheSettings, ComponentType, FreeSlots, InsertResult, Req


def make(page_size: int = 1, **kw: object) -> UnifiedRadixCache:
    extra = page_size > 1
    sizes: dict[str, object] = {"full_tokens": 256, "max_context_len": 256, "mamba_slots": 16}
    sizes.update(kw)
    config = CacheConfig.of(page_size=page_size, mamba_extra_buffer=extra, **sizes)  # type: ignore[arg-type]
    return build_cache(config)


def mamba(cache: UnifiedRadixCache) -> MambaComponent:
    component = cache.component(ComponentType.MAMBA)
    assert isinstance(component, MambaComponent)
    return component


def insert(cache: UnifiedRadixCache, tokens: list[int], with_state: bool = True) -> InsertResult:
    """Inserts `tokens` with fresh KV slots (the cache frees those it already holds) and,
    optionally, a fresh state slot (freed when the node has a state already)."""
    kv = cache.pools.kv_allocator.alloc(len(tokens))
    states = cache.pools.mamba
    assert kv is not None and states is not None
    state = states.allocator.alloc(1) if with_state else None
    result = cache.insert(InsertParams(cache.make_key(tokens), kv, mamba_value=state))
    if state is not None and result.mamba_exist:
        states.allocator.free(state)
    cache.check_invariants({"full": 0, "mamba": 0})
    return result


def slot(cache: UnifiedRadixCache, node: TreeNode) -> int | None:
    return mamba(cache).slot(node)


def test_match_ends_at_deepest_state_and_split_parent_gets_none() -> None:
    cache = make()
    a = insert(cache, [1, 2, 3])
    b = insert(cache, [1, 2, 3, 4, 5, 6, 7])
    assert (slot(cache, a.last_device_node), slot(cache, b.last_device_node)) == (1, 2)
    r = cache.match_prefix(MatchPrefixParams(cache.make_key([1, 2, 3, 4, 5, 9])))
    # the walk split [4..7] at [4, 5]: that new parent holds no state, so the match stops at 3
    assert (r.device_prefix_len, r.full_kv_hit_length) == (3, 5)
    assert r.last_device_node is a.last_device_node
    assert r.mamba_branching_seqlen == 5
    split_parent = b.last_device_node.parent
    assert split_parent is not None and split_parent.num_tokens == 2
    assert slot(cache, split_parent) is None
    r = cache.match_prefix(MatchPrefixParams(cache.make_key([1, 2])))
    assert (r.device_prefix_len, r.last_device_node) == (0, cache.tree.root)
    cache.check_invariants({"full": 0, "mamba": 0})


def test_insert_onto_existing_state_reports_mamba_exist() -> None:
    cache = make()
    insert(cache, [1, 2, 3])
    state = cache.pools.mamba.allocator.alloc(1)  # type: ignore[union-attr]
    assert state is not None and state.tolist() == [2]
    kv = cache.pools.kv_allocator.alloc(3)
    result = cache.insert(InsertParams(cache.make_key([1, 2, 3]), kv, mamba_value=state))
    assert result.mamba_exist and slot(cache, result.last_device_node) == 1
    empty = cache.insert(InsertParams(cache.make_key([]), mamba_value=state))
    assert empty.mamba_exist and empty.last_device_node is cache.tree.root
    cache.pools.mamba.allocator.free(state)  # type: ignore[union-attr]
    cache.check_invariants({"full": 0, "mamba": 0})


def test_bad_mamba_value_raises() -> None:
    cache = make()
    with pytest.raises(TypeError, match="mamba_value"):
        cache.insert(InsertParams(cache.make_key([1, 2]), mamba_value=torch.tensor([1, 2])))


def test_mamba_eviction_tombstones_internal_then_breaks_match() -> None:
    cache = make()
    short = insert(cache, [1, 2])
    long = insert(cache, [1, 2, 3, 4])
    assert cache.evictable_size(ComponentType.MAMBA) == 2
    result = cache.evict(EvictParams(mamba_num=1))
    # the LRU state is the internal node's: a tombstone, its full KV stays
    assert (result.num_tokens_evicted, result.mamba_num_evicted) == (0, 1)
    assert slot(cache, short.last_device_node) is None
    assert short.last_device_node.data[0].value is not None
    assert cache.pools.mamba.allocator.available_size() == 15  # type: ignore[union-attr]
    r = cache.match_prefix(MatchPrefixParams(cache.make_key([1, 2, 7])))
    assert (r.device_prefix_len, r.full_kv_hit_length) == (0, 2)
    result = cache.evict(EvictParams(mamba_num=10))
    # the leaf goes whole: its state and its full KV
    assert (result.num_tokens_evicted, result.mamba_num_evicted) == (2, 1)
    assert long.last_device_node.parent is None
    assert (
        cache.match_prefix(MatchPrefixParams(cache.make_key([1, 2, 3, 4]))).device_prefix_len == 0
    )
    cache.check_invariants({"full": 0, "mamba": 0})


def test_full_leaf_eviction_cascades_to_mamba() -> None:
    cache = make()
    insert(cache, [1, 2])
    result = cache.evict(EvictParams(num_tokens=2))
    assert (result.num_tokens_evicted, result.mamba_num_evicted) == (2, 1)
    assert cache.pools.available() == cache.pools.capacities()
    cache.check_invariants({"full": 0, "mamba": 0, "req": 0})


def test_lock_protects_only_the_anchor_state() -> None:
    cache = make()
    a = insert(cache, [1, 2])
    b = insert(cache, [1, 2, 3, 4])
    receipt = cache.inc_lock_ref(b.last_device_node)
    assert (cache.protected_size(ComponentType.MAMBA), cache.protected_size()) == (1, 4)
    result = cache.evict(EvictParams(num_tokens=100, mamba_num=100))
    # the anchor's state and the whole full path survive; the parent's state does not
    assert (result.num_tokens_evicted, result.mamba_num_evicted) == (0, 1)
    assert slot(cache, a.last_device_node) is None and slot(cache, b.last_device_node) == 2
    cache.dec_lock_ref(b.last_device_node, receipt)
    assert cache.evictable_size(ComponentType.MAMBA) == 1
    cache.check_invariants({"full": 0, "mamba": 0})


def test_match_refreshes_only_the_used_state() -> None:
    cache = make()
    a1 = insert(cache, [1, 2])
    b1 = insert(cache, [1, 2, 3])
    a2 = insert(cache, [5, 6])
    b2 = insert(cache, [5, 6, 7])
    cache.match_prefix(MatchPrefixParams(cache.make_key([1, 2, 3])))
    nodes = [r.last_device_node for r in (b1, b2, a2, a1)]
    # b1 moved to the front; its ancestor a1 was not refreshed and stays the oldest
    assert list(mamba(cache).lru) == nodes


def test_split_keeps_the_suffix_lru_position() -> None:
    cache = make()
    cold = insert(cache, [1, 2, 3, 4])
    hot = insert(cache, [5, 6, 7, 8])
    cache.match_prefix(MatchPrefixParams(cache.make_key([1, 2])))
    assert list(mamba(cache).lru) == [hot.last_device_node, cold.last_device_node]
    cache.check_invariants()


@pytest.mark.parametrize(
    ("page_size", "chunk", "hit", "expected"),
    [(32, 64, 160, 128), (96, 64, 288, 192), (1, 4, 7, 4), (1, 1, 7, 7), (4, 1, 7, 4)],
)
def test_branching_seqlen_on_checkpoint_grid(
    page_size: int, chunk: int, hit: int, expected: int
) -> None:
    cache = make(page_size, mamba_cache_chunk_size=chunk, full_tokens=1024)
    tokens = list(range(1, hit // page_size * page_size + page_size + 1))
    insert(cache, tokens, with_state=False)
    query = tokens[:hit] + [999] * page_size
    r = cache.match_prefix(MatchPrefixParams(cache.make_key(query)))
    assert (r.device_prefix_len, r.full_kv_hit_length // page_size * page_size) == (
        0,
        hit // page_size * page_size,
    )
    assert r.mamba_branching_seqlen == expected


def test_branching_none_when_the_state_covers_the_hit() -> None:
    cache = make(mamba_cache_chunk_size=4)
    insert(cache, list(range(1, 9)))
    r = cache.match_prefix(MatchPrefixParams(cache.make_key([*range(1, 9), 50])))
    assert (r.device_prefix_len, r.mamba_branching_seqlen) == (8, None)
    r = cache.match_prefix(MatchPrefixParams(cache.make_key([*range(1, 7), 50])))
    # the split at 6 holds no state: nothing usable, and the hit floors to 4 on the grid
    assert (r.device_prefix_len, r.mamba_branching_seqlen) == (0, 4)


def test_path_cap_evicts_shallowest_unlocked_single_child_state() -> None:
    cache = make(mamba_max_states_per_path=2)
    n2 = insert(cache, [1, 2]).last_device_node
    fork = insert(cache, [1, 2, 9]).last_device_node  # n2 now has two children
    n4 = insert(cache, [1, 2, 3, 4]).last_device_node
    assert [slot(cache, n) for n in (n2, fork, n4)] == [1, 2, 3]
    receipt = cache.inc_lock_ref(n4)
    n6 = insert(cache, [1, 2, 3, 4, 5, 6]).last_device_node
    # path n2, n4, n6 holds 3 > 2: n2 is a fork and n4 locked, so nothing goes
    assert [slot(cache, n) for n in (n2, n4, n6)] == [1, 3, 4]
    cache.dec_lock_ref(n4, receipt)
    n8 = insert(cache, [1, 2, 3, 4, 5, 6, 7, 8]).last_device_node
    # path n2, n4, n6, n8 holds 4: the shallowest unlocked single-child holders go (n4, n6)
    assert [slot(cache, n) for n in (n2, n4, n6, n8)] == [1, None, None, 5]
    assert cache.pools.mamba.allocator.alloc(2).tolist() == [4, 3]  # type: ignore[union-attr]


def test_settings_are_validated() -> None:
    with pytest.raises(ValueError, match="extra buffer"):
        build_cache(CacheConfig.of(full_tokens=64, page_size=4, mamba_slots=4))
    with pytest.raises(ValueError, match="mamba_max_states_per_path"):
        make(mamba_max_states_per_path=0)
    with pytest.raises(ValueError, match="mamba_cache_chunk_size"):
        make(mamba_cache_chunk_size=0)
    with pytest.raises(ValueError, match="EAGLE"):
        make(is_eagle=True)


class StatelessAux(TreeComponent):
    """Stands in for SWA at index 1 (priority 1, holds nothing) to show the Mamba component
    works unchanged as the third component of a full+SWA+Mamba tree."""

    component_type = ComponentType.SWA

    def redistribute_on_split(self, parent: TreeNode, child: TreeNode, split_len: int) -> None:
        return

    def eviction_priority(self, is_leaf: bool) -> int:
        return 0 if is_leaf else 1

    def eviction_candidates(self) -> Iterator[TreeNode]:
        return iter(())

    def evict_node(self, node: TreeNode, actions: list[FreeSlots]) -> int:
        return 0

    def lock(self, node: TreeNode) -> tuple[int, int | None]:
        return 0, None

    def unlock(self, node: TreeNode, marker: int | None) -> None:
        return


def test_mamba_as_third_component() -> None:
    config = CacheConfig.of(full_tokens=64, max_context_len=64, mamba_slots=8, num_mamba_layers=1)
    pools = build_cache(config).pools
    cache = UnifiedRadixCache(
        pools,
        CacheSettings(mamba_cache_chunk_size=2),
        (ComponentType.FULL, ComponentType.SWA, ComponentType.MAMBA),
        {ComponentType.SWA: StatelessAux},
    )
    assert mamba(cache).index == 2
    a = insert(cache, [1, 2, 3, 4])
    req = Req([1, 2, 3, 4, 5])
    r = cache.match_prefix(MatchPrefixParams(cache.make_key(req.token_ids), req=req))
    assert (r.device_prefix_len, r.last_device_node, req.mamba_pool_idx) == (
        4,
        a.last_device_node,
        2,
    )
    r = cache.match_prefix(MatchPrefixParams(cache.make_key([1, 2, 3, 9])))
    assert (r.device_prefix_len, r.mamba_branching_seqlen) == (0, 2)
    cache.check_invariants({"full": 0, "mamba": 1})
    cache.release_req_slots(req)
    result = cache.evict(EvictParams(mamba_num=1))
    # the match split [1..4] at 3: the state sits on the leaf [4], which goes whole
    assert (result.num_tokens_evicted, result.mamba_num_evicted) == (1, 1)
    assert cache.evict(EvictParams(num_tokens=3)).num_tokens_evicted == 3
    cache.check_invariants({"full": 0, "mamba": 0, "req": 0})
    assert cache.pools.available() == cache.pools.capacities()
