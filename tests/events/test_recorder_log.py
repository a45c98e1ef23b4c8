"""The recorder's log: a cache call only appends to it (nothing is derived until the flush,
nothing hashed until the events are read), and a node stored in the step is read before it
leaves the tree, its split-off parts too, with the exact events a router needs."""

from __future__ import annotations

from tests.events.oracle import StrictStream, cached_hashes
from tests.events.test_recorder_steps import TOKENS, attached, stored
from tests.events.test_scenarios import GOLDEN, chain
from tests.helpers import insert_fresh
from uniradix import EvictParams
from uniradix.events import BlockRemoved


def test_calls_hash_nothing_until_the_events_are_read() -> None:
    cache, recorder = attached()
    insert_fresh(cache, TOKENS)
    step = recorder.take_step()  # the flush: names the step's digests, hashes none
    assert recorder.digests.pages_hashed == 0
    assert step == [stored(GOLDEN, None, TOKENS)]  # whoever reads the step hashes it
    assert recorder.digests.pages_hashed == 4
    insert_fresh(cache, [1, 2, 3, 4])  # a new leaf: logged, not hashed
    cache.evict(EvictParams(num_tokens=8))  # the older leaf, announced in the last step
    assert recorder.digests.pages_hashed == 4  # its digests were read back, nothing derived
    assert recorder.take_events() == [
        stored(chain([1, 2, 3, 4]), None, [1, 2, 3, 4]),
        BlockRemoved(GOLDEN[::-1], "GPU", group_idx=0),
    ]
    assert recorder.digests.pages_hashed == 6


def test_split_parts_stored_and_removed_in_one_step() -> None:
    cache, recorder = attached()
    strict = StrictStream(cache.page_size)
    insert_fresh(cache, TOKENS)
    insert_fresh(cache, [10, 20, 30, 40, 1, 2])  # splits the logged leaf after 4 tokens
    branch = chain([10, 20, 30, 40, 1, 2])[2]
    cache.evict(EvictParams(num_tokens=64))  # both leaves, then the split-off parent
    events = recorder.take_events()
    assert events == [
        stored(GOLDEN, None, TOKENS),
        stored([branch], GOLDEN[1], [1, 2]),
        BlockRemoved([GOLDEN[3], GOLDEN[2], branch, GOLDEN[1], GOLDEN[0]], "GPU", group_idx=0),
    ]
    strict.apply(events)
    assert set(strict.parent) == cached_hashes(cache) == set()
    assert len(recorder.digests) == 0  # every gone node's digests were dropped
    assert recorder.digests.pages_hashed == 5
