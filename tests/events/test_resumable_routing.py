"""Resumable prefix: the index answers, per instance and medium, the deepest page boundary
where the full pages are held and every group can resume; cache-aware routing scores it
with the medium's cost; the cluster replay reports predicted / indexed / at-match /
full-only hit tokens next to the actual ones."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from uniradix.events import BlockStored, KVEventBatch, KVEventsConfig
from uniradix.events.index import KVEventIndex
from uniradix.events.resumable import GroupPages, resumable_pages
from uniradix.sim.cluster import Cluster
from uniradix.sim.replay import ReplayOptions
from uniradix.sim.router import CacheAware


def test_resumable_pages_follow_window_and_state_rules() -> None:
    hashes = list(range(10, 20))  # 10 pages of 4 tokens
    full = [set(hashes[:8])]
    assert resumable_pages(hashes, full, [], 4) == 8  # no groups: the full prefix
    swa = GroupPages("sliding_window", 8, [{15, 16}])  # live window: pages 5 and 6
    assert resumable_pages(hashes, full, [swa], 4) == 7  # the 2 pages before boundary 7
    assert resumable_pages(hashes, full, [GroupPages("sliding_window", 9, [{15, 16}])], 4) == 0
    mamba = GroupPages("mamba", None, [{12, 16, 19}])  # states after pages 2, 6 and 9
    assert resumable_pages(hashes, full, [mamba], 4) == 7
    assert resumable_pages(hashes, full, [swa, mamba], 4) == 7
    assert resumable_pages(hashes, full, [GroupPages("mamba", None, [{12}])], 4) == 3
    near_start = GroupPages("sliding_window", 64, [{10, 11}])  # whole path live
    assert resumable_pages(hashes, full, [near_start], 4) == 2


def _store(hashes: list[int], parent: int | None, medium: str, **group: object) -> BlockStored:
    return BlockStored(hashes, parent, [0] * 4 * len(hashes), 4, None, medium, None, **group)  # type: ignore[arg-type]


def test_index_resumable_lengths_per_instance_and_medium() -> None:
    index = KVEventIndex(block_size=4)
    tokens = list(range(32))  # 8 pages
    h = index.page_hashes(tokens)
    swa = {
        "group_idx": 1,
        "kv_cache_spec_kind": "sliding_window",
        "kv_cache_spec_sliding_window": 8,
    }
    mamba = {"group_idx": 2, "kv_cache_spec_kind": "mamba"}
    events_a = [
        _store(h[:6], None, "GPU"),
        _store(h[2:4], h[1], "GPU", **swa),
        _store([h[3]], h[2], "GPU", **mamba),
        _store([h[5]], h[4], "GPU", **mamba),  # a state at 6 but no window there
        _store(h[4:6], h[3], "CPU_PINNED", **swa),  # the window lives on the host
    ]
    index.apply("a", KVEventBatch(0.0, list(events_a), 0))
    index.apply("b", KVEventBatch(0.0, [_store(h[:8], None, "GPU")], 0))  # full-only stream
    assert index.prefix_lengths(tokens) == {"a": 24, "b": 32}
    assert index.resumable_lengths(tokens) == {"a": 16, "b": 32}
    assert index.resumable_lengths(tokens, ("GPU", "CPU_PINNED")) == {"a": 24, "b": 32}
    assert index.resumable_lengths(tokens, groups=False) == {"a": 24, "b": 32}
    scores = index.weighted_prefix(h, {"GPU": 1.0, "CPU_PINNED": 0.8})
    assert scores["a"] == (4 * 1.0 + 2 * 0.8, 6) and scores["b"] == (8.0, 8)


OPTIONS = ReplayOptions.of(
    workload="multi_turn",
    page_size=4,
    full_tokens=8192,
    swa_tokens=1024,
    sliding_window=64,
    mamba_slots=24,
    max_requests=60,
)


def test_cluster_reports_predictions_per_instance_and_groups_match_actual_hits() -> None:
    for config in ("swa", "mamba", "hybrid"):
        summaries = {}
        for components in ("auto", "full"):
            events = KVEventsConfig(publisher="null", components=components)
            summaries[components] = Cluster(
                replace(OPTIONS, config=config), 2, "cache-aware", events
            ).run()
        groups, full = summaries["auto"], summaries["full"]
        for inst in groups["instances"]:
            assert inst["at_match_hit_tokens"] == inst["hit_tokens"]
            assert inst["full_only_hit_tokens"] >= inst["hit_tokens"]
        assert groups["predicted_hit_tokens"] >= groups["indexed_hit_tokens"] > 0
        # A full-only stream promises, at the same moment, pages nothing can resume from.
        assert full["at_match_hit_tokens"] > full["hit_tokens"]
        assert full["at_match_hit_tokens"] == full["full_only_hit_tokens"]


def test_router_prefers_the_instance_that_can_resume() -> None:
    """Two instances hold the same full pages; only one holds the Mamba state at the end:
    cache-aware routing goes there, and counts a host page at 0.8."""
    index = KVEventIndex(block_size=4)
    tokens = list(range(16))
    h = index.page_hashes(tokens)
    mamba = {"group_idx": 1, "kv_cache_spec_kind": "mamba"}
    for name, end in (("x", 0), ("y", 3)):
        state = _store([h[end]], h[end - 1] if end else None, "GPU", **mamba)
        index.apply(name, KVEventBatch(0.0, [_store(h, None, "GPU"), state], 0))
    router = CacheAware(index, ["x", "y"], recent=0)
    assert router.choose(np.asarray(tokens), [0, 0]) == 1
    assert router.expected_pages == [1, 4]


def test_vllm_cpu_medium_counts_as_the_host_tier() -> None:
    index = KVEventIndex(block_size=4)
    tokens = list(range(16))
    h = index.page_hashes(tokens)
    index.apply("v", KVEventBatch(0.0, [_store(h[:2], None, "GPU"), _store(h, None, "CPU")], 0))
    assert index.blocks("v", "CPU_PINNED") == set(h)
    assert index.resumable_lengths(tokens, ("GPU", "CPU_PINNED")) == {"v": 16}
    assert index.weighted_prefix(h, {"GPU": 1.0, "CPU_PINNED": 0.8})["v"] == (2 + 2 * 0.8, 4)
