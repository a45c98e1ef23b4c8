"""The branch-aware eviction order of SWA windows and Mamba states, with exact victims."""

import pytest
import torch

from benchmarks.studies.retired_orders import BRANCH_AWARE, GREEDY_DUAL
from uniradix import CacheConfig, EvictParams, InsertParams, RadixKey, build_cache
from uniradix.cache.controller import UnifiedRadixCache
from uniradix.eviction.aux_eviction import prefix_cost
from uniradix.memory.swa_allocator import SWASlotAllocator
from uniradix.types import ComponentType, FreeSlots


def mamba_cache(policy: str) -> UnifiedRadixCache:
    return build_cache(
        CacheConfig.of(
            full_tokens=128, mamba_slots=8, max_context_len=64, aux_eviction_policy=policy
        )
    )


def put(cache: UnifiedRadixCache, tokens: list[int], state: bool = True) -> None:
    value = cache.pools.kv_allocator.alloc(len(tokens))
    assert value is not None
    mamba_value = None
    if state:
        assert cache.pools.mamba is not None
        slot = cache.pools.mamba.allocator.alloc_one()
        assert slot is not None
        mamba_value = torch.tensor([slot], dtype=torch.int64)
    cache.insert(InsertParams(RadixKey(tokens), value, mamba_value=mamba_value))


def holders(cache: UnifiedRadixCache) -> list[int]:
    i = cache.component(ComponentType.MAMBA).index
    return sorted(
        cache.tree.prefix_len(n) for n in cache.tree.nodes() if n.data[i].value is not None
    )


@pytest.mark.parametrize(
    ("policy", "left"),
    [
        # LRU takes the oldest state, the fork at 4 where two branches resume.
        ("lru", [8, 12, 16]),
        # Branch-aware: the state at 8 is covered (one child, a deeper state at 12 on the
        # only path), so it goes first; the fork at 4 stays.
        (BRANCH_AWARE, [4, 12, 16]),
    ],
)
def test_covered_mamba_state_goes_before_a_fork(policy: str, left: list[int]) -> None:
    cache = mamba_cache(policy)
    put(cache, [1, 2, 3, 4])
    put(cache, [1, 2, 3, 4, 5, 6, 7, 8])
    put(cache, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12])
    put(cache, [1, 2, 3, 4, 50, 60, 70, 80, 90, 91, 92, 93, 94, 95, 96, 97])
    assert holders(cache) == [4, 8, 12, 16]
    assert cache.evict(EvictParams(mamba_num=1)).mamba_num_evicted == 1
    assert holders(cache) == left
    cache.check_invariants()


@pytest.mark.parametrize(("policy", "victim"), [("lru", 2), (BRANCH_AWARE, 8)])
def test_unusable_swa_remnant_goes_first(policy: str, victim: int) -> None:
    """Window 4, page 1. Tree: an old live window [9]*6 from the root (split 2 | 4 by the
    leaf's window cap); and
    tomb [0, 6) -> live P [6, 8) -> tombstoned [8, 12) -> live leaf [12, 16). P's 2 live
    tokens follow a tombstone and its only child is a tombstone: no match can end at or
    below P using them. `greedy_dual` (SWA under the `lru` aux policy) evicts the old window's
    shallower part (ending at 2);
    branch-aware evicts P (ending at 8)."""
    cache = build_cache(
        CacheConfig.of(
            full_tokens=128,
            swa_tokens=64,
            sliding_window=4,
            max_context_len=64,
            aux_eviction_policy=policy,
            # the retired `branch_aware` ordered SWA windows too; under "lru": `greedy_dual`
            swa_eviction_policy=policy if policy == BRANCH_AWARE else GREEDY_DUAL,
        )
    )
    a = cache.pools.kv_allocator
    assert isinstance(a, SWASlotAllocator)

    def insert(tokens: list[int], cursor: int = 0) -> None:
        value = a.alloc(len(tokens))
        assert value is not None
        if cursor:
            a.free_swa(value[:cursor])
        cache.insert(InsertParams(RadixKey(tokens), value, swa_evicted_seqlen=cursor))

    insert([9] * 6)
    insert(list(range(12)), cursor=6)
    insert(list(range(16)), cursor=12)
    swa = cache.component(ComponentType.SWA)
    mid = [n for n in cache.tree.nodes() if cache.tree.prefix_len(n) == 12 and n.num_tokens == 4]
    actions: list[FreeSlots] = []
    swa.evict_node(mid[0], actions)  # tombstone [8, 12)
    cache.apply(actions)
    live = {cache.tree.prefix_len(n) for n in cache.tree.nodes() if swa.has_value(n)}
    assert live == {2, 6, 8, 16}
    cache.evict(EvictParams(swa_num_tokens=1))
    after = {cache.tree.prefix_len(n) for n in cache.tree.nodes() if swa.has_value(n)}
    assert live - after == {victim}
    cache.check_invariants()


def test_deeper_prefixes_cost_more_to_recompute() -> None:
    assert prefix_cost(0) == 0
    assert prefix_cost(2000) > 2 * prefix_cost(1000)


def test_unknown_policy_is_rejected() -> None:
    with pytest.raises(ValueError, match="aux_eviction_policy 'nope'"):
        build_cache(CacheConfig.of(full_tokens=64, mamba_slots=4, aux_eviction_policy="nope"))
