"""What one step's records become: a store and a remove of the same pages in one step are
both sent (in order, with the exact hashes), pages never announced are never removed, and
a split between a store and the flush changes no hash and hashes nothing twice."""

from __future__ import annotations

from tests.events.test_scenarios import GOLDEN, chain
from tests.helpers import insert_fresh, make_cache
from uniradix import EvictParams
from uniradix.events import BlockRemoved, BlockStored
from uniradix.events.recorder import EventRecorder

TOKENS = [10, 20, 30, 40, 50, 60, 70, 80]


def stored(hashes: list[int], parent: int | None, tokens: list[int]) -> BlockStored:
    return BlockStored(
        hashes, parent, tokens, 2, None, "GPU", None, group_idx=0,
        kv_cache_spec_kind="full_attention",
    )  # fmt: skip


def attached():  # type: ignore[no-untyped-def]
    cache = make_cache(full_tokens=64, page_size=2)
    recorder = EventRecorder(cache)
    cache.set_event_sink(recorder)
    return cache, recorder


def test_store_and_remove_in_one_step_are_both_sent() -> None:
    cache, recorder = attached()
    insert_fresh(cache, TOKENS)
    cache.evict(EvictParams(num_tokens=64))
    assert recorder.take_events() == [
        stored(GOLDEN, None, TOKENS),
        BlockRemoved(GOLDEN[::-1], "GPU", group_idx=0),
    ]
    assert len(recorder.digests) == 0  # the gone node's digests were dropped


def test_pages_cached_before_the_recorder_are_never_removed() -> None:
    cache = make_cache(full_tokens=64, page_size=2)
    insert_fresh(cache, TOKENS)
    recorder = EventRecorder(cache)
    cache.set_event_sink(recorder)
    cache.evict(EvictParams(num_tokens=64))
    assert recorder.take_events() == []


def test_split_before_the_flush_hashes_each_page_once() -> None:
    cache, recorder = attached()
    insert_fresh(cache, TOKENS)
    insert_fresh(cache, [10, 20, 30, 40, 1, 2])  # splits the pending leaf after 4 tokens
    assert recorder.take_events() == [
        stored(GOLDEN, None, TOKENS),
        stored(chain([10, 20, 30, 40, 1, 2])[2:], GOLDEN[1], [1, 2]),
    ]
    assert recorder.digests.pages_hashed == 5
    cache.evict(EvictParams(num_tokens=64))
    recorder.take_events()
    assert recorder.digests.pages_hashed == 5  # removes read the digests back
