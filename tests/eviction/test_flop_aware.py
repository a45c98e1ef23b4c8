"""The flop-aware (GreedyDual over marginal compute) eviction order of Mamba states, with exact
victims."""

import pytest

from benchmarks.studies.retired_orders import FLOP_AWARE
from tests.eviction.test_aux_eviction import holders, mamba_cache, put
from uniradix import EvictParams, MatchPrefixParams, RadixKey
from uniradix.cache.controller import UnifiedRadixCache
from uniradix.components.mamba import MambaComponent
from uniradix.eviction.aux_eviction import prefix_cost
from uniradix.eviction.mamba_credit import MambaCreditOrder
from uniradix.tree.node import TreeNode
from uniradix.types import ComponentType


def order(cache_policy: str = FLOP_AWARE) -> tuple[object, MambaCreditOrder]:
    cache = mamba_cache(cache_policy)
    mamba = cache.component(ComponentType.MAMBA)
    assert isinstance(mamba, MambaComponent)
    assert isinstance(mamba._credits, MambaCreditOrder)
    return cache, mamba._credits


@pytest.mark.parametrize(
    ("policy", "left"),
    [
        # LRU takes the oldest state, at 4.
        ("lru", [12, 14]),
        # Flop-aware: the state at 14 saves 2 tokens over the one at 12 (the fallback), the
        # state at 12 saves 8 over the one at 4, the one at 4 saves 4: 14 goes, though newest.
        (FLOP_AWARE, [4, 12]),
    ],
)
def test_state_of_least_marginal_compute_goes_first(policy: str, left: list[int]) -> None:
    cache = mamba_cache(policy)
    put(cache, list(range(1, 5)))
    put(cache, list(range(1, 13)))
    put(cache, list(range(1, 15)))
    assert holders(cache) == [4, 12, 14]
    assert cache.evict(EvictParams(mamba_num=1)).mamba_num_evicted == 1
    assert holders(cache) == left
    cache.check_invariants()


def test_marginal_cost_counts_from_the_nearest_state_above() -> None:
    cache, credits = order()
    put(cache, list(range(1, 5)))
    put(cache, list(range(1, 11)), state=False)  # full KV only: no state at 10
    put(cache, list(range(1, 15)))
    tail = next(n for n in cache.tree.nodes() if cache.tree.prefix_len(n) == 14)
    assert credits.marginal_cost(tail) == prefix_cost(14) - prefix_cost(4)


def test_an_unused_costly_state_ages_out_behind_cheap_ones() -> None:
    """GreedyDual: each eviction raises L to the victim's credit, so cheap new states go
    first only until L passes the old costly state's credit (10 tokens' worth here)."""
    cache, credits = order()
    put(cache, list(range(1, 11)))  # credit c(10)
    evicted_cheap = 0
    for branch in range(20, 40):
        put(cache, [*range(1, 11), branch, branch])  # a state 2 tokens below the one at 10
        cache.evict(EvictParams(mamba_num=1))
        cache.check_invariants()
        if 10 not in holders(cache):
            break
        evicted_cheap += 1
    assert 10 not in holders(cache)
    # Each cheap state's credit is L + c(12) - c(10), about 2 tokens more than L.
    assert evicted_cheap == pytest.approx(
        prefix_cost(10) / (prefix_cost(12) - prefix_cost(10)), abs=1
    )
    assert credits.inflation >= prefix_cost(10)


def test_a_match_renews_the_credit_of_the_state_it_resumes_from() -> None:
    cache, credits = order()
    put(cache, list(range(1, 11)))
    node = next(n for n in cache.tree.nodes() if cache.tree.prefix_len(n) == 10)
    credits.inflation = 100.0
    cache.match_prefix(MatchPrefixParams(RadixKey(list(range(1, 12)))))
    assert credits.credit(node) == 100.0 + prefix_cost(10)


def credit_order_of(cache: UnifiedRadixCache) -> MambaCreditOrder:
    mamba = cache.component(ComponentType.MAMBA)
    assert isinstance(mamba, MambaComponent) and mamba._credits is not None
    return mamba._credits


def node_at(cache: UnifiedRadixCache, length: int) -> TreeNode:
    return next(n for n in cache.tree.nodes() if cache.tree.prefix_len(n) == length)


def conversation_and_one_off(policy: str) -> UnifiedRadixCache:
    """A conversation whose second turn resumed from its first (states at 8 and 12) and a
    one-off prompt of 6 tokens stored last (state at 6)."""
    cache = mamba_cache(policy)
    put(cache, list(range(1, 9)))
    cache.match_prefix(MatchPrefixParams(RadixKey([*range(1, 9), 20])))  # resumes at 8
    put(cache, [*range(1, 9), 20, 21, 22, 23])
    put(cache, list(range(50, 56)))
    assert holders(cache) == [6, 8, 12]
    return cache


@pytest.mark.parametrize(
    ("policy", "left"),
    [
        # Marginal compute only: the second turn's state saves 4 tokens over the first turn's,
        # the one-off state 6: the conversation's tail goes.
        (FLOP_AWARE, [6, 8]),
        # The tail's path was resumed from once: (1 + 3 * 1) * 4 ** 1.5 = 32 against the
        # one-off's 6 ** 1.5 = 14.7: the one-off goes, though it is the newest.
        ("reuse_credit", [8, 12]),
    ],
)
def test_a_resumed_conversation_keeps_its_tail_over_a_one_off_prompt(
    policy: str, left: list[int]
) -> None:
    cache = conversation_and_one_off(policy)
    assert cache.evict(EvictParams(mamba_num=1)).mamba_num_evicted == 1
    assert holders(cache) == left
    cache.check_invariants()


def test_reuse_evidence_counts_resumes_of_the_state_and_of_the_states_above_it() -> None:
    cache = conversation_and_one_off("reuse_credit")
    credits = credit_order_of(cache)
    first, tail, one_off = node_at(cache, 8), node_at(cache, 12), node_at(cache, 6)
    assert [credits.reuse_evidence(n) for n in (first, tail, one_off)] == [1, 1, 0]
    cache.match_prefix(MatchPrefixParams(RadixKey([*range(1, 9), 20, 21, 22, 23, 30])))
    assert [credits.reuse_evidence(n) for n in (first, tail, one_off)] == [1, 2, 0]
    assert credits.credit(tail) == pytest.approx(
        credits.inflation + (1 + 3 * 2) * (prefix_cost(12) - prefix_cost(8)) ** 1.5
    )


def test_an_evicted_state_loses_its_resume_count() -> None:
    """With the tail locked, eviction takes the one-off and the first turn's state: the count
    of the first goes with it, so the tail's evidence falls to 0 and no count is left over."""
    cache = conversation_and_one_off("reuse_credit")
    credits = credit_order_of(cache)
    tail = node_at(cache, 12)
    receipt = cache.inc_lock_ref(tail)
    assert cache.evict(EvictParams(mamba_num=2)).mamba_num_evicted == 2
    assert holders(cache) == [12]
    assert credits.reuse_evidence(tail) == 0
    assert list(credits._resumes) == []
    cache.dec_lock_ref(tail, receipt)
    cache.check_invariants()


def test_bad_weights_are_rejected() -> None:
    cache = mamba_cache("reuse_credit")
    mamba = cache.component(ComponentType.MAMBA)
    with pytest.raises(ValueError, match="reuse_weight=-1"):
        MambaCreditOrder(mamba, reuse_weight=-1)
    with pytest.raises(ValueError, match="cost_exponent=0"):
        MambaCreditOrder(mamba, cost_exponent=0)
