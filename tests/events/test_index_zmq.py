"""KVEventIndex subscribed over loopback ZMQ to two publishers: batches sent before the
subscription took effect come back by replay, the index equals each cache's content, and
prefix lengths per instance follow; sequence gaps without replay and restarts clear."""

from __future__ import annotations

import time

import pytest

from tests.events.oracle import cached_hashes
from tests.events.zmq_helpers import WAIT_MS, loopback_publisher, published
from tests.helpers import insert_fresh, make_cache
from uniradix import EvictParams
from uniradix.events import AllBlocksCleared, BlockStored, KVEventBatch, encode_batch
from uniradix.events.index import KVEventIndex
from uniradix.events.stream import KVEventStream


def test_two_publishers_replay_and_prefix_lengths() -> None:
    caches = [make_cache(full_tokens=4096, page_size=2) for _ in range(2)]
    wires = ["map", "sglang-array"]
    streams = [
        KVEventStream(c, [loopback_publisher(wire=w)], publish_interval_ms=0)
        for c, w in zip(caches, wires, strict=True)
    ]
    index = KVEventIndex(block_size=2)
    try:
        for s in streams:
            s.flush()  # seq 0, before anyone subscribed: only replay can bring it
            published(s.publishers[0])  # type: ignore[arg-type]  # (waits until it is sent)
        for name, s in zip("ab", streams, strict=True):
            pub = s.publishers[0]
            index.subscribe(name, pub.endpoint, pub.replay_endpoint)  # type: ignore[attr-defined]
        insert_fresh(caches[0], [1, 2, 3, 4, 5, 6])
        insert_fresh(caches[1], [1, 2, 3, 4])
        insert_fresh(caches[1], [1, 2, 3, 4, 9, 9])
        insert_fresh(caches[1], [7, 7])
        caches[1].evict(EvictParams(num_tokens=2))  # the least recent leaf: [9, 9]
        deadline = time.monotonic() + WAIT_MS / 1000
        filler = 0
        while time.monotonic() < deadline:
            for name, s in zip("ab", streams, strict=True):
                if index.stats.batches == 0 or index._instances[name].next_seq == 0:
                    # PUB drops what precedes the subscription: step until one batch lands.
                    filler += 1
                    insert_fresh(s.cache, [100, filler])
                s.flush()
            want = {"a": cached_hashes(caches[0]), "b": cached_hashes(caches[1])}
            index.poll(20)
            if all(index.blocks(n) == want[n] for n in "ab"):
                break
        assert {n: index.blocks(n) for n in "ab"} == want
        assert index.stats.gaps >= 2 and index.stats.replayed >= 2
        assert index.prefix_lengths([1, 2, 3, 4, 5, 6, 8]) == {"a": 6, "b": 4}
        assert index.prefix_lengths([7, 7, 1]) == {"a": 0, "b": 2}
    finally:
        index.close()
        for s in streams:
            s.close()


def test_gap_without_replay_and_restart_clear_the_instance() -> None:
    index = KVEventIndex(block_size=2)
    h = index.page_hashes([1, 2, 3, 4])
    store = encode_batch([BlockStored(h, None, [1, 2, 3, 4], 2, None, "GPU", None)], 0.0, 0)
    index.apply("a", store, seq=0)
    assert index.prefix_lengths([1, 2, 3, 4]) == {"a": 4}
    index.apply("a", KVEventBatch(0.0, [], 0), seq=5)  # batches 1-4 lost, no replay socket
    assert index.stats.gaps == 1 and index.stats.resets == 1
    assert index.prefix_lengths([1, 2, 3, 4]) == {"a": 0}
    index.apply("a", store, seq=6)
    index.apply("a", KVEventBatch(0.0, [AllBlocksCleared()], 0), seq=0)  # restarted
    assert index.stats.resets == 2 and index.blocks("a") == set()
    orphan = BlockStored(h[1:], h[0], [3, 4], 2, None, "GPU", None)
    index.apply("a", KVEventBatch(0.0, [orphan], 0))
    assert index.stats.orphan_stores == 1 and index.blocks("a") == set()
    with pytest.raises(ValueError, match="unknown instance"):
        index.blocks("z")
