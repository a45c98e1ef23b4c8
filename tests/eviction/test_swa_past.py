"""The default SWA order's past windows (`uniradix.eviction.swa_past`), with exact victims: a
finished request's checkpoint windows wholly above its last window are worth nothing until a
prompt window has served a match, then as much as any window."""

import numpy as np
import pytest

from tests.eviction.test_swa_credit import OUTPUT_WINDOWS, insert_with_checkpoints, order_of
from tests.eviction.test_swa_reuse import evict_order, insert, match, swa_cache
from uniradix.cache.controller import UnifiedRadixCache
from uniradix.eviction.swa_past import SWAPastCreditEviction
from uniradix.tree.node import TreeNode


def by_first(cache: UnifiedRadixCache) -> dict[int, TreeNode]:
    return {int(np.frombuffer(n.key, dtype="<i8")[0]): n for n in order_of(cache).component.lru}


def play(policy: str, prompt_served: bool) -> UnifiedRadixCache:
    """Window 4, page 1. A = an 8-token prompt [100..107] plus 4 outputs, checkpoints 4 and 8:
    its last window is the outputs' [108..111], and the node [100..107] (holding the
    checkpoints' windows) lies wholly above it, a past window. C = a fresh prompt [1..9],
    matched once if `prompt_served`. B = [200..211] likewise."""
    cache = swa_cache(policy)
    insert_with_checkpoints(cache, list(range(100, 112)), (4, 8))
    insert(cache, list(range(1, 10)))
    if prompt_served:
        assert match(cache, list(range(1, 10))) == 9
    insert_with_checkpoints(cache, list(range(200, 212)), (4, 8))
    cache.check_invariants()
    return cache


@pytest.mark.parametrize(
    ("prompt_served", "past", "order"),
    [
        (False, [100, 200], [100, 200, 208, 6, 1, 108]),
        (True, [100], [100, 208, 108, 200, 6, 1]),
    ],
)
def test_past_windows_go_first_until_a_prompt_window_has_served(
    prompt_served: bool, past: list[int], order: list[int]
) -> None:
    """With no window served, A's and B's past nodes are credited at `L` alone (0) and go
    first; the rest go as under the output-window order (B's output window at half its worth,
    C, A's output window). Once C's window has served, B's past node is no longer marked and
    keeps its depth's worth (12 ** 1.5, its insert's end) as under the output-window order;
    A's, marked before, keeps its credit of 0."""
    cache = play("reuse_credit", prompt_served)
    order_obj = order_of(cache)
    assert isinstance(order_obj, SWAPastCreditEviction)
    nodes = by_first(cache)
    assert order_obj._past == {nodes[p] for p in past}
    assert all(order_obj.credit(nodes[p]) == 0.0 for p in past)
    assert order_obj.cold() is not prompt_served
    assert evict_order(cache) == order


@pytest.mark.parametrize(
    ("prompt_served", "order"),
    [(False, [208, 6, 1, 108, 100, 200]), (True, [208, 108, 100, 200, 6, 1])],
)
def test_the_output_window_order_keeps_past_windows_at_their_depth(
    prompt_served: bool, order: list[int]
) -> None:
    """The same requests under the output-window order alone (the former default): the past
    nodes keep their insert's end's worth and go with their windows."""
    assert evict_order(play(OUTPUT_WINDOWS, prompt_served)) == order
