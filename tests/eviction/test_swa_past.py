"""The default SWA order's past windows (`uniradix.eviction.swa_past`), with exact victims: a
finished request's checkpoint windows wholly above its last window are worth their measured
reuse, and nothing before any window has served a match."""

import math

import numpy as np
import pytest

from tests.eviction.test_swa_credit import insert_with_checkpoints, order_of
from tests.eviction.test_swa_reuse import evict_order, insert, match, swa_cache
from uniradix.cache.controller import UnifiedRadixCache
from uniradix.eviction.swa_credit import COST_EXPONENT
from uniradix.eviction.swa_past import SWAPastCreditEviction
from uniradix.tree.node import TreeNode


def by_first(cache: UnifiedRadixCache) -> dict[int, TreeNode]:
    return {int(np.frombuffer(n.key, dtype="<i8")[0]): n for n in order_of(cache).component.lru}


@pytest.mark.parametrize(
    ("prompt_served", "factor", "order"),
    [(False, 0.0, [200, 208, 6, 1, 108, 100]), (True, 1.0, [208, 200, 108, 100, 6, 1])],
)
def test_a_past_window_is_worth_nothing_until_a_window_has_served(
    prompt_served: bool, factor: float, order: list[int]
) -> None:
    """Window 4, page 1. A = an 8-token prompt [100..107] plus 4 outputs, checkpoints 4 and
    8: its last window is the outputs' [108..111], and the node [100..107] (holding the
    checkpoints' windows) lies wholly above it, a past window; A's is the first past insert,
    so sampled (full worth, 8 ** 1.5 ~ 22.6, counted). C = a fresh prompt [1..9]. B = [200..211]
    likewise; its past node is not sampled and is worth `factor * 8 ** 1.5`. With no window
    served yet the factor is 0 and B's past node goes first, before its own output window
    (the output factor's 0.5 * 12 ** 1.5 ~ 20.8). Once a match has served C's window (a prompt
    window) the factor is the past share over the prompt share, 1 while no past window's
    outcome is known: B's past node keeps its worth and goes after its output window; C,
    served, goes last."""
    cache = swa_cache("reuse_credit")
    order_obj = order_of(cache)
    assert isinstance(order_obj, SWAPastCreditEviction)
    insert_with_checkpoints(cache, list(range(100, 112)), (4, 8))
    insert(cache, list(range(1, 10)))
    if prompt_served:
        assert match(cache, list(range(1, 10))) == 9
    insert_with_checkpoints(cache, list(range(200, 212)), (4, 8))
    cache.check_invariants()
    nodes = by_first(cache)
    assert order_obj._past == {nodes[100], nodes[200]}
    assert order_obj._past_sampled == {nodes[100]}
    assert order_obj.past_factor() == pytest.approx(factor)
    assert order_obj.credit(nodes[200]) == pytest.approx(factor * math.pow(8, COST_EXPONENT))
    assert evict_order(cache) == order


def test_a_sampled_past_window_is_counted_once_its_outcome_is_known() -> None:
    """A's sampled past node [100..107] (8 tokens) counts only when its outcome is known: not
    while it waits, 8 served tokens of 8 once a match ends within one window below it (a
    request branching at A's checkpoint 8), and a node evicted unserved counts as resolved
    with nothing served. With C's prompt window served (prompt share 9 / (9 + 4)), a served
    past share lifts the factor to its cap of 1."""
    cache = swa_cache("reuse_credit")
    order_obj = order_of(cache)
    assert isinstance(order_obj, SWAPastCreditEviction)
    insert_with_checkpoints(cache, list(range(100, 112)), (4, 8))
    insert(cache, list(range(1, 10)))
    assert match(cache, list(range(1, 10))) == 9
    assert (order_obj.past_served, order_obj.past_resolved) == (0, 0)
    assert match(cache, [*range(100, 108), 50]) == 8
    assert (order_obj.past_served, order_obj.past_resolved) == (8, 8)
    assert order_obj.past_factor() == 1.0
    cache.check_invariants()


def test_an_unserved_sampled_past_window_evicted_lowers_the_factor() -> None:
    """A's sampled past node evicted unserved: 8 tokens resolved, none served, so the past
    share is the prior's alone, (4 * p) / (8 + 4) for prompt share p: a factor of 1/3."""
    cache = swa_cache("reuse_credit")
    order_obj = order_of(cache)
    assert isinstance(order_obj, SWAPastCreditEviction)
    insert_with_checkpoints(cache, list(range(100, 112)), (4, 8))
    insert(cache, list(range(1, 10)))
    assert match(cache, list(range(1, 10))) == 9
    past = by_first(cache)[100]
    order_obj.forget(past)  # as the component's eviction of its window does
    assert (order_obj.past_served, order_obj.past_resolved) == (0, 8)
    assert order_obj.past_factor() == pytest.approx(1 / 3)
