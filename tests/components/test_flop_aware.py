"""The flop-aware (GreedyDual over marginal compute) eviction order of Mamba states, with exact
victims."""

import pytest

from tests.components.test_aux_eviction import holders, mamba_cache, put
from uniradix import EvictParams, MatchPrefixParams, RadixKey
from uniradix.components.aux_eviction import prefix_cost
from uniradix.components.flop_aware import FlopAwareEviction
from uniradix.components.mamba import MambaComponent
from uniradix.types import ComponentType


def order(cache_policy: str = "flop_aware") -> tuple[object, FlopAwareEviction]:
    cache = mamba_cache(cache_policy)
    mamba = cache.component(ComponentType.MAMBA)
    assert isinstance(mamba, MambaComponent)
    assert isinstance(mamba._credits, FlopAwareEviction)
    return cache, mamba._credits


@pytest.mark.parametrize(
    ("policy", "left"),
    [
        # LRU takes the oldest state, at 4.
        ("lru", [12, 14]),
        # Flop-aware: the state at 14 saves 2 tokens over the one at 12 (the fallback), the
        # state at 12 saves 8 over the one at 4, the one at 4 saves 4: 14 goes, though newest.
        ("flop_aware", [4, 12]),
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
