"""A stream's publish interval: within it a flush publishes nothing, the steps in between go
out coalesced with the next flush that publishes, a pause ends with a batch at once, a forced
flush and `close()` publish what is pending; the events are those of per-step publishing."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pytest

from tests.helpers import insert_fresh, make_cache
from uniradix import EvictParams
from uniradix.events import AllBlocksCleared, BlockRemoved, BlockStored, KVEventStream
from uniradix.events import stream as stream_module
from uniradix.events.types import KVEvent


class Capture:
    def __init__(self) -> None:
        self.batches: list[list[KVEvent]] = []
        self.published = 0
        self.dropped = 0
        self.closes = 0

    def publish(self, events: Sequence[KVEvent]) -> bool:
        self.batches.append(list(events))
        self.published += 1
        return True

    def close(self) -> None:
        self.closes += 1


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """The stream's monotonic clock, in ms, set by the test."""
    now = [0]
    monkeypatch.setattr(stream_module.time, "monotonic_ns", lambda: now[0] * 1_000_000)
    yield now


def play(interval_ms: float, clock: list[int]) -> tuple[Capture, list[int]]:
    """The same operations at the given clock readings; returns the batches and how many
    events each flush returned."""
    cache = make_cache(full_tokens=64, page_size=2)
    capture = Capture()
    stream = KVEventStream(cache, [capture], publish_interval_ms=interval_ms)
    returned = []

    def step(at_ms: int) -> None:
        clock[0] = at_ms
        returned.append(len(stream.flush()))

    step(0)  # start-up: AllBlocksCleared (a resync goes out whatever the interval)
    insert_fresh(cache, [10, 20, 30, 40])
    step(1)  # the interval's first batch goes out at once
    insert_fresh(cache, [10, 20, 30, 40, 50, 60])
    step(2)
    insert_fresh(cache, [10, 20, 1, 2])  # a branch off the first page
    step(3)
    step(1200)  # the interval has passed: both steps' stores in one batch
    step(5000)  # nothing happened: nothing to publish, and no interval starts
    cache.evict(EvictParams(num_tokens=64))
    step(5001)  # after a pause: at once
    insert_fresh(cache, [7, 8])
    step(5002)
    stream.close()  # publishes the pending store
    return capture, returned


def test_steps_within_the_interval_go_out_together(clock: list[int]) -> None:
    capture, returned = play(1000, clock)
    shapes = [[type(e).__name__ for e in batch] for batch in capture.batches]
    assert shapes == [
        ["AllBlocksCleared"],
        ["BlockStored"],
        ["BlockStored", "BlockStored"],  # the extension and the branch, one batch
        ["BlockRemoved"],
        ["BlockStored"],  # published by close()
    ]
    assert returned == [0, 1, 0, 0, 2, 0, 1, 0]
    per_step, _ = play(0, clock)
    assert [e for b in capture.batches for e in b] == [e for b in per_step.batches for e in b]
    assert len(per_step.batches) == 6  # the extension and the branch apart
    stored = [e for b in capture.batches for e in b if isinstance(e, BlockStored)]
    assert [e.token_ids for e in stored] == [[10, 20, 30, 40], [50, 60], [1, 2], [7, 8]]
    removed = capture.batches[3][0]
    assert isinstance(removed, BlockRemoved) and len(removed.block_hashes) == 4
    assert isinstance(capture.batches[0][0], AllBlocksCleared)


def test_forced_flush_publishes_at_once(clock: list[int]) -> None:
    cache = make_cache(full_tokens=64, page_size=2)
    capture = Capture()
    stream = KVEventStream(cache, [capture], publish_interval_ms=1000)
    stream.flush()
    insert_fresh(cache, [1, 2])
    stream.flush()
    insert_fresh(cache, [1, 2, 3, 4])
    assert len(stream.flush()) == 0 and len(capture.batches) == 2
    assert len(stream.flush(force=True)) == 1 and len(capture.batches) == 3
    stream.close()
    assert len(capture.batches) == 3  # nothing left to publish
    stream.close()  # a second close does nothing
    assert len(capture.batches) == 3 and capture.closes == 1


@pytest.mark.parametrize("bad", [-1.0, 1000.5, float("nan")])
def test_bad_interval_is_refused(bad: float) -> None:
    with pytest.raises(ValueError, match="publish_interval_ms"):
        KVEventStream(make_cache(full_tokens=8, page_size=2), [], publish_interval_ms=bad)
