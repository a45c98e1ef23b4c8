"""The `greedy_dual` eviction order of SWA windows, with exact victims: deeper windows and
windows that served matches outlive newer shallow ones, and a window nobody touches ages out
as GreedyDual's inflation rises past its credit."""

import math

import numpy as np
import pytest

from benchmarks.studies.retired_orders import (
    GREEDY_DUAL,
    GREEDY_DUAL_PASSED_WORTH,
    GREEDY_DUAL_WINDOW,
    SWA_REUSE_AWARE,
)
from tests.driver import MiniScheduler
from tests.eviction.test_swa_reuse import evict_order, insert, live_windows, match, swa_cache
from uniradix import EvictParams, RadixKey
from uniradix.cache.controller import UnifiedRadixCache
from uniradix.components.swa import SWAComponent
from uniradix.eviction import swa_order
from uniradix.eviction.orders import register_swa_order
from uniradix.eviction.swa_credit import (
    COST_EXPONENT,
    PASSED_WORTH,
    REUSE_WEIGHT,
    SWACreditEviction,
)
from uniradix.eviction.swa_output import SWAOutputCreditEviction
from uniradix.memory.swa_allocator import SWASlotAllocator
from uniradix.types import ComponentType, InsertParams

# the default without its past windows' measured worth (`uniradix.eviction.swa_past`)
OUTPUT_WINDOWS = register_swa_order("study:output_windows", SWAOutputCreditEviction)


def order_of(cache: UnifiedRadixCache) -> SWACreditEviction:
    swa = cache.component(ComponentType.SWA)
    assert isinstance(swa, SWAComponent)
    order = swa._reuse
    assert isinstance(order, SWACreditEviction)
    return order


@pytest.mark.parametrize(
    ("policy", "order"),
    [
        ("lru", [1, 10, 14, 20]),
        (SWA_REUSE_AWARE, [1, 10, 14, 20]),
        (GREEDY_DUAL, [1, 10, 20, 14]),
        (GREEDY_DUAL_WINDOW, [1, 20, 14, 10]),
    ],
)
def test_a_deeper_window_outlives_a_newer_shallow_one(policy: str, order: list[int]) -> None:
    """Window 4, page 1. A = [1..4]; then an 8-token prompt [10..17], stored as a live parent
    [10..13] (depth 4) and the leaf [14..17] (depth 8); then C = [20..23]. The recency orders
    evict the leaf before C; `greedy_dual` keeps the leaf (a hit there is 8 tokens) past C;
    `greedy_dual_window` keeps the parent as long as the leaf (both hold the window ending at
    8), then drops the pair together, the leaf (stored first) first."""
    cache = swa_cache(policy)
    insert(cache, [1, 2, 3, 4])
    insert(cache, list(range(10, 18)))
    insert(cache, [20, 21, 22, 23])
    assert live_windows(cache) == {1, 10, 14, 20}
    assert evict_order(cache) == order


def test_credit_is_inflation_plus_worth() -> None:
    """The leaf at depth 8 is worth 8 ** 1.5; A, served once, (1 + 3) * 4 ** 1.5; evicting the
    least credited window (the parent at depth 4, worth 4 ** 1.5) raises the inflation to it,
    and a window stored after that starts from it."""
    cache = swa_cache(GREEDY_DUAL)
    insert(cache, [1, 2, 3, 4])
    assert match(cache, [1, 2, 3, 4]) == 4
    insert(cache, list(range(10, 18)))
    order = order_of(cache)
    by_first = {n.key[0]: n for n in order.component.lru}
    assert order.credit(by_first[14]) == pytest.approx(math.pow(8, COST_EXPONENT))
    assert order.credit(by_first[1]) == pytest.approx((1 + REUSE_WEIGHT) * math.pow(4, 1.5))
    cache.evict(EvictParams(swa_num_tokens=1))
    assert live_windows(cache) == {1, 14}
    assert order.inflation == pytest.approx(math.pow(4, 1.5))
    insert(cache, [20, 21, 22, 23])
    (new,) = (n for n in order.component.lru if n.key[0] == 20)
    assert order.credit(new) == pytest.approx(2 * math.pow(4, 1.5))


def rounds(cache: UnifiedRadixCache, starts: tuple[int, ...]) -> list[int]:
    """Each round stores a fresh 4-token window and evicts one: the victims' first tokens."""
    victims = []
    for start in starts:
        insert(cache, [start, start + 1, start + 2, start + 3])
        before = live_windows(cache)
        cache.evict(EvictParams(swa_num_tokens=1))
        cache.check_invariants()
        (gone,) = before - live_windows(cache)
        victims.append(gone)
    return victims


@pytest.mark.parametrize(("scan", "victims"), [(1, [10, 20, 30, 1]), (2, [10, 20, 30, 40])])
def test_a_served_window_ages_out_as_inflation_rises(
    monkeypatch: pytest.MonkeyPatch, scan: int, victims: list[int]
) -> None:
    """A served one match (credit 4 * 8 = 32 with 4 ** 1.5 = 8). Each round stores a fresh
    window (credit L + 8) and evicts one. Looking at the least credited window only (plain
    GreedyDual), fresh ones go while L + 8 < 32, and A in the fourth round, tied with the fresh
    window (older first); looking at two, a never-served window is always there and goes."""
    monkeypatch.setattr(swa_order, "SCAN", scan)
    cache = swa_cache(GREEDY_DUAL)
    insert(cache, [1, 2, 3, 4])
    assert match(cache, [1, 2, 3, 4]) == 4
    assert rounds(cache, (10, 20, 30, 40)) == victims


def test_a_served_window_goes_once_the_scan_holds_only_served_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Scan 2: A and B (4 tokens each) served matches (credit 32 each); then a 16-token
    prompt leaves a live parent [20..31] (depth 12, credit 12 ** 1.5 ~ 41.6) and the leaf
    [32..35] (depth 16, 64). A and B are the two least credited, both served, so A (stored
    first) goes; after that a never-served window is always among the two least credited, so
    the parent and the leaf go before B."""
    monkeypatch.setattr(swa_order, "SCAN", 2)
    cache = swa_cache(GREEDY_DUAL)
    for start in (1, 10):
        insert(cache, [start, start + 1, start + 2, start + 3])
        assert match(cache, [start, start + 1, start + 2, start + 3]) == 4
    insert(cache, list(range(20, 36)))
    assert live_windows(cache) == {1, 10, 20, 32}
    assert evict_order(cache) == [1, 20, 32, 10]


def test_credits_follow_splits_and_go_with_the_window() -> None:
    """A split parent keeps its child's serve count; eviction drops credits and counts (the
    invariant check names any left behind, and any live window without a credit)."""
    cache = swa_cache(GREEDY_DUAL)
    insert(cache, [1, 2, 3, 4, 5, 6])
    assert match(cache, [1, 2, 3, 4, 5, 6]) == 6
    order = order_of(cache)
    # stored as a live parent [1, 2] and the leaf [3..6]
    (leaf,) = (n for n in order.component.lru if n.key[0] == 3)
    assert order.credit(leaf) == pytest.approx((1 + REUSE_WEIGHT) * math.pow(6, COST_EXPONENT))
    insert(cache, [1, 2, 3, 4, 9, 9])  # splits the leaf into [3, 4] and [5, 6]
    (upper,) = (n for n in order.component.lru if n.key[0] == 3)
    assert upper is not leaf and leaf.key[0] == 5 and order.was_served(upper)
    # the insert passed over the new parent: refreshed at its depth, 4, with the serve kept
    assert order.credit(upper) == pytest.approx((1 + REUSE_WEIGHT) * math.pow(4, COST_EXPONENT))
    cache.check_invariants()
    evict_order(cache)
    cache.check_invariants()
    assert not any(order.credit(n) is not None for n in cache.tree.nodes())


@pytest.mark.parametrize(("weight", "exponent"), [(-1.0, 1.5), (3.0, 0.0)])
def test_bad_weights_are_rejected(weight: float, exponent: float) -> None:
    cache = swa_cache(GREEDY_DUAL)
    with pytest.raises(ValueError, match=f"reuse_weight={weight}"):
        SWACreditEviction(order_of(cache).component, 4, weight, exponent)


@pytest.mark.parametrize(
    ("checkpoints", "order"),
    [
        ((16,), [104, 100, 1, 108, 112]),
        ((8, 16), [100, 1, 104, 108, 112]),
        ((), [100, 1, 104, 108, 112]),
    ],
)
def test_a_chunk_end_window_the_request_went_past_goes_first(
    checkpoints: tuple[int, ...], order: list[int]
) -> None:
    """Window 4, page 1: a 16-token prompt [100..115] prefilled in two chunks of 8. After the
    first chunk is published, the out-of-window step sees the chunk end (8) below the last
    checkpoint: its window [104..107] is worth a tenth (0.1 * 8 ** 1.5 ~ 2.3), so it goes
    before the live parent [100..103] (4 ** 1.5 = 8) and a 4-token prompt A = [1..4] stored
    later (8). Where a checkpoint's window covers it (checkpoint 8), or the request names no
    checkpoints, it keeps its depth's worth (~22.6) and goes after them."""
    cache = swa_cache(GREEDY_DUAL)
    sched = MiniScheduler(cache)
    req = sched.admit(list(range(100, 116)))
    assert req is not None
    req.checkpoint_seqlens = checkpoints
    assert sched.chunk(req, 8)
    cache.free_out_of_window_slots(req)
    cache.check_invariants()
    assert sched.chunk(req, 8)
    cache.free_out_of_window_slots(req)
    sched.finish(req)
    insert(cache, [1, 2, 3, 4])
    cache.check_invariants()
    assert live_windows(cache) == {100, 104, 108, 112, 1}
    passed = {int(np.frombuffer(n.key, dtype="<i8")[0]) for n in order_of(cache)._passed}
    assert passed == ({104} if order[0] == 104 else set())
    assert evict_order(cache) == order


def test_whole_window_credit_keeps_both_nodes_of_a_deep_prompt_past_a_shallow_one() -> None:
    """Window 4, page 1: A, an 8-token prompt, is stored as a live parent [10..13] and the
    leaf [14..17]; then B, 6 tokens, as [30, 31] and [32..35]. `greedy_dual` credits each node
    by its own end: B's parent (depth 2), A's parent (4), B's leaf (6), A's leaf (8) - the two
    parents go first and leave no whole 4-token window ending past depth 4 in A. With the
    window's end as every node's depth, A's nodes are both worth 8 ** 1.5 and B's 6 ** 1.5, so
    B goes whole before A is touched."""
    victims = {}
    for policy in (GREEDY_DUAL, GREEDY_DUAL_WINDOW):
        cache = swa_cache(policy)
        insert(cache, list(range(10, 18)))
        insert(cache, list(range(30, 36)))
        assert live_windows(cache) == {10, 14, 30, 32}
        if policy == GREEDY_DUAL_WINDOW:
            order = order_of(cache)
            by_first = {n.key[0]: n for n in order.component.lru}
            assert order.credit(by_first[10]) == order.credit(by_first[14])
            assert order.credit(by_first[10]) == pytest.approx(math.pow(8, COST_EXPONENT))
            assert order.credit(by_first[30]) == pytest.approx(math.pow(6, COST_EXPONENT))
        victims[policy] = evict_order(cache)
    assert victims == {GREEDY_DUAL: [30, 10, 32, 14], GREEDY_DUAL_WINDOW: [32, 30, 14, 10]}


@pytest.mark.parametrize(
    ("policy", "worth", "order"),
    [
        (GREEDY_DUAL, GREEDY_DUAL_PASSED_WORTH, [7, 104, 100, 108, 112]),
        (GREEDY_DUAL_WINDOW, PASSED_WORTH, [104, 7, 100, 112, 108]),
    ],
)
def test_greedy_dual_window_drops_a_passed_chunk_end_window_sooner(
    policy: str, worth: float, order: list[int]
) -> None:
    """Window 4, page 1: a 16-token prompt [100..115] in two chunks of 8 with its checkpoint
    at 16, then a 1-token prompt [7] (worth 1 ** 1.5 = 1). The passed chunk-end window
    [104..107] is worth `passed_worth * 8 ** 1.5`: a tenth under `greedy_dual` (~2.26), so the
    shallow fresh window goes first; a fiftieth under `greedy_dual_window` (~0.45), so the
    passed one does (on the Mooncake trace passed windows held a tenth of the pool at W=4096,
    and 1% of their tokens were used again). The rest go by credit: `greedy_dual` by each
    node's own end (depths 4, 12, 16); `greedy_dual_window` the parent [100..103] at its
    window's end 8, then the two nodes of the window ending at 16 together, the leaf first."""
    cache = swa_cache(policy)
    sched = MiniScheduler(cache)
    req = sched.prefill_in_chunks(list(range(100, 116)), 8, checkpoints=(16,))
    cache.free_out_of_window_slots(req)
    sched.finish(req)
    insert(cache, [7])
    cache.check_invariants()
    order_obj = order_of(cache)
    by_first = {int(np.frombuffer(n.key, dtype="<i8")[0]): n for n in order_obj.component.lru}
    assert order_obj._passed == {by_first[104]}
    assert order_obj.credit(by_first[104]) == pytest.approx(worth * math.pow(8, COST_EXPONENT))
    assert evict_order(cache) == order


def insert_with_checkpoints(
    cache: UnifiedRadixCache, tokens: list[int], checkpoints: tuple[int, ...]
) -> None:
    a = cache.pools.kv_allocator
    assert isinstance(a, SWASlotAllocator)
    value = a.alloc(len(tokens))
    assert value is not None
    cache.insert(InsertParams(RadixKey(tokens), value, checkpoint_seqlens=checkpoints))


@pytest.mark.parametrize(
    ("output_matched", "factor", "order"),
    [(False, 0.5, [208, 6, 1, 108, 100, 200]), (True, 1.0, [6, 1, 208, 200, 108, 100])],
)
def test_an_output_window_is_worth_its_measured_reuse(
    output_matched: bool, factor: float, order: list[int]
) -> None:
    """Window 4, page 1, the default's output windows alone. A = a prompt of 8 tokens plus 4 outputs
    [100..111] (last checkpoint 8): its leaf [108..111] lies past the checkpoint, an output
    window, the first of its kind, so sampled (full worth, counted). B = [200..211] likewise;
    its output window [208..211] is not sampled and is worth `factor * 12 ** 1.5`, where
    `factor` compares the served share of sampled output tokens with that of prompt tokens
    (each with a prior of one window at the prompt share). Nobody matched A's output: prompt
    share (0 + 4) / (16 + 4) = 0.2, output share (0 + 4 * 0.2) / (4 + 4) = 0.1, factor 0.5,
    so B's output (~20.8) goes before C = [1..9] (9 ** 1.5 = 27), a fresh prompt shallower
    than the rest (12 ** 1.5 ~ 41.6). A match through A's output makes it 1: (8 + 4) / 20 =
    0.6 against (4 + 4 * 0.6) / 8 = 0.8, so B's output keeps its depth's worth and C goes
    first; A, served, goes last (tied nodes go together, the leaf first)."""
    cache = swa_cache(OUTPUT_WINDOWS)
    order_obj = order_of(cache)
    assert isinstance(order_obj, SWAOutputCreditEviction)
    insert_with_checkpoints(cache, list(range(100, 112)), (8,))
    if output_matched:
        assert match(cache, list(range(100, 112))) == 12
    insert_with_checkpoints(cache, list(range(200, 212)), (8,))
    insert(cache, list(range(1, 10)))
    cache.check_invariants()
    by_first = {int(np.frombuffer(n.key, dtype="<i8")[0]): n for n in order_obj.component.lru}
    assert order_obj._outputs == {by_first[108], by_first[208]}
    assert order_obj._sampled == {by_first[108]}
    assert order_obj.output_factor() == pytest.approx(factor)
    assert order_obj.credit(by_first[208]) == pytest.approx(factor * math.pow(12, COST_EXPONENT))
    assert evict_order(cache) == order


def test_output_windows_are_marked_only_past_the_last_checkpoint() -> None:
    """Without checkpoints (an engine that names none), or with the last one at the insert's
    end, no window is an output window and the order is `greedy_dual_window`'s: the same
    victims, every node at its window's end."""
    victims = {}
    for policy in (GREEDY_DUAL_WINDOW, "reuse_credit"):
        cache = swa_cache(policy)
        insert_with_checkpoints(cache, list(range(100, 112)), ())
        insert_with_checkpoints(cache, list(range(200, 212)), (12,))
        insert_with_checkpoints(cache, list(range(1, 10)), ())
        order_obj = order_of(cache)
        if isinstance(order_obj, SWAOutputCreditEviction):
            assert order_obj._outputs == set()
            assert order_obj.output_factor() == 1.0
        victims[policy] = evict_order(cache)
    assert victims["reuse_credit"] == victims[GREEDY_DUAL_WINDOW]
    assert victims[GREEDY_DUAL_WINDOW] == [6, 1, 108, 100, 208, 200]


@pytest.mark.parametrize(
    ("policy", "credit", "order"),
    [
        (GREEDY_DUAL_WINDOW, 10**1.5, [305, 300, 106, 100, 206, 200]),
        (OUTPUT_WINDOWS, 8 + 10**1.5, [305, 300, 100, 106, 206, 200]),
    ],
)
def test_an_insert_refreshes_its_checkpoints_windows_beyond_its_last_window(
    policy: str, credit: float, order: list[int]
) -> None:
    """Window 4, page 1. P = [100..109] is stored as [100..105] and [106..109], both credited
    at depth 10 (~31.6); Q = [1..4] (8) is evicted, so L = 8. Then P's next turn, 20 tokens
    through P, with its checkpoint at 10: its insert refreshes the nodes within one window
    and a page of its end ([200..205], [206..209], output nodes, sampled: full worth), not
    [106..109], the window at its checkpoint. Then R = [300..308] at L + 9 ** 1.5 = 35.
    `greedy_dual_window` leaves the checkpoint's window at its old credit, below R's, and
    would evict it first; `greedy_dual_output` credits it at L + 10 ** 1.5 with the insert (a
    window's nodes worth the hit at its end, as the insert's own window is). R, a one-off on
    no shared path, is on probation and goes first under both; then `greedy_dual_window`
    takes the checkpoint's window [106..109] first, `greedy_dual_output` only after
    [100..105].
    On the synthetic continuation-0.5 traces at W=4096 such a window (a previous turn's grid
    window whose top node ends more than a window below the next turn's end) was where the
    next turn resumed."""
    cache = swa_cache(policy)
    insert(cache, list(range(100, 110)))
    insert(cache, [1, 2, 3, 4])
    cache.evict(EvictParams(swa_num_tokens=1))
    order_obj = order_of(cache)
    assert order_obj.inflation == pytest.approx(8.0)
    insert_with_checkpoints(cache, list(range(100, 110)) + list(range(200, 210)), (10,))
    insert(cache, list(range(300, 309)))
    cache.check_invariants()
    by_first = {int(np.frombuffer(n.key, dtype="<i8")[0]): n for n in order_obj.component.lru}
    assert order_obj.credit(by_first[106]) == pytest.approx(credit)
    assert order_obj.credit(by_first[100]) == pytest.approx(10**1.5)  # not in the window at 10
    assert evict_order(cache) == order


@pytest.mark.parametrize("policy", [GREEDY_DUAL, GREEDY_DUAL_WINDOW, "reuse_credit"])
def test_a_one_off_window_goes_before_a_continued_conversations(policy: str) -> None:
    """Window 4, page 1. A conversation's turn [100..107] and its next turn, which passes
    over it ([100..107, 200..207]), then a one-off prompt [300..323], deeper so more credited.
    No window served a match; the conversation's are on a shared path, the one-off's on none
    (on probation): the one-off goes first, then the credit order."""
    cache = swa_cache(policy)
    insert(cache, list(range(100, 108)))
    insert(cache, [*range(100, 108), *range(200, 208)])
    insert(cache, list(range(300, 324)))
    order_obj = order_of(cache)
    by_first = {int(np.frombuffer(n.key, dtype="<i8")[0]): n for n in order_obj.component.lru}
    one_off, turn = order_obj.credit(by_first[300]), order_obj.credit(by_first[200])
    assert one_off is not None and turn is not None and one_off > turn
    order = evict_order(cache)
    one_off_nodes = [first for first in order if first >= 300]
    assert one_off_nodes and order[: len(one_off_nodes)] == one_off_nodes
