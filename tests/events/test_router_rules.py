"""Cache-aware routing on hybrid instances: what the router predicts from prompts in flight
(only up to a prompt's own end, where its window and state survive), the `replicated`
option (a prefix several instances hold gives no preference), and router factories."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from uniradix.events import BlockStored, KVEventBatch, KVEventsConfig
from uniradix.events.index import KVEventIndex
from uniradix.sim.cluster import Cluster
from uniradix.sim.replay import ReplayOptions
from uniradix.sim.router import CacheAware, LeastLoaded, make_router

MAMBA = {"group_idx": 1, "kv_cache_spec_kind": "mamba"}


def _store(hashes: list[int], parent: int | None, **group: object) -> BlockStored:
    return BlockStored(hashes, parent, [0] * 4 * len(hashes), 4, None, "GPU", None, **group)  # type: ignore[arg-type]


def _index(hybrid: bool) -> tuple[KVEventIndex, list[int]]:
    """Instance "a" holds the first page of a 12-page prompt (with a Mamba state there when
    `hybrid`), "b" nothing."""
    index = KVEventIndex(block_size=4)
    tokens = list(range(48))
    h = index.page_hashes(tokens)
    events = [_store(h[:1], None)] + ([_store(h[:1], None, **MAMBA)] if hybrid else [])
    index.apply("a", KVEventBatch(0.0, events, 0))
    index.apply("b", KVEventBatch(0.0, [], 0))
    return index, tokens


@pytest.mark.parametrize("hybrid", [False, True])
def test_prompts_in_flight_predict_only_their_own_end_on_hybrid_instances(hybrid: bool) -> None:
    index, tokens = _index(hybrid)
    router = CacheAware(index, ["a", "b"], recent=8)
    assert router.choose(np.asarray(tokens[:32]), [0, 0]) == 0  # 8 pages, in flight on a
    assert router.expected_pages == [1, 0]
    # The whole in-flight prompt is a prefix of this one: its end is a boundary either way.
    router.choose(np.asarray(tokens[:40]), [0, 0])
    assert router.expected_pages == [8, 0]
    # This one passes through the in-flight pages but branches before their end: a full
    # instance resumes at the branch, a hybrid one only where the index has a state.
    branch = tokens[:20] + [999] * 28
    assert router.choose(np.asarray(branch), [0, 0]) == 0  # still scored on in-flight pages
    assert router.expected_pages == [1 if hybrid else 5, 0]


def test_replicated_prefix_gives_no_preference() -> None:
    """Two instances hold a 4-page system prompt, one holds a conversation past it: with
    `replicated="discount"` a new conversation on that prompt goes to the least loaded
    instance, the conversation's next turn still to the instance holding it."""
    index = KVEventIndex(block_size=4)
    system, conv = list(range(16)), list(range(100, 116))
    h = index.page_hashes(system + conv)
    index.apply("x", KVEventBatch(0.0, [_store(h, None)], 0))
    index.apply("y", KVEventBatch(0.0, [_store(h[:4], None)], 0))
    index.apply("z", KVEventBatch(0.0, [], 0))
    new = np.asarray(system + list(range(500, 516)))
    loads = [3, 2, 1]
    assert CacheAware(index, ["x", "y", "z"], recent=0).choose(new, loads) == 1  # "attract"
    discount = CacheAware(index, ["x", "y", "z"], recent=0, replicated="discount")
    assert discount.choose(new, loads) == 2
    assert discount.choose(np.asarray(system + conv + [7] * 8), loads) == 0
    with pytest.raises(ValueError, match="replicated='spread'"):
        CacheAware(index, ["x"], replicated="spread")


def test_cluster_takes_a_router_factory_and_splits_the_over_prediction() -> None:
    options = ReplayOptions.of(
        workload="multi_turn",
        config="hybrid",
        page_size=4,
        full_tokens=8192,
        swa_tokens=1024,
        sliding_window=64,
        mamba_slots=24,
        max_requests=40,
    )
    events = KVEventsConfig(publisher="null")
    built: list[int] = []

    def factory(index: KVEventIndex, names: object, recent: int) -> LeastLoaded:
        built.append(recent)
        return LeastLoaded()

    summary = Cluster(options, 2, factory, events).run()
    assert summary["router"] == "LeastLoaded" and built == [2 * options.scheduler.max_running]
    variant = Cluster(
        replace(options, config="swa"),
        2,
        lambda index, names, recent: make_router(
            "cache-aware", index, names, recent, replicated="discount"
        ),
        events,
    ).run()
    for s in (summary, variant):
        for inst in s["instances"]:
            over = inst["predicted_hit_tokens"] - inst["at_match_hit_tokens"]
            split = inst["predicted_unprefilled_tokens"] + inst["predicted_unresumable_tokens"]
            assert split >= over


def test_a_conversations_next_turn_gets_the_continuation_slack() -> None:
    """A prompt holding the whole of the prompt last routed to an instance stays there at
    a load `slack` would refuse; a prompt on pages it merely holds does not."""
    index = KVEventIndex(block_size=4)
    for name in ("a", "b"):
        index.apply(name, KVEventBatch(0.0, [], 0))
    turn, more = list(range(32)), list(range(50, 66))
    branch = turn[:16] + list(range(80, 96))  # half the pages, not the whole prompt
    for continuation_slack, next_turn_stays in ((10, True), (None, False)):
        router = CacheAware(
            index, ["a", "b"], slack=2, recent=8, continuation_slack=continuation_slack
        )
        first = router.choose(np.asarray(turn), [0, 0])
        loads = [8, 0] if first == 0 else [0, 8]
        stays = router.choose(np.asarray(turn + more), loads) == first
        assert stays == next_turn_stays
        assert router.choose(np.asarray(branch), loads) == 1 - first
    with pytest.raises(ValueError, match="continuation_slack=-1"):
        CacheAware(index, ["a"], continuation_slack=-1)
