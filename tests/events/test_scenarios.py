"""Scenario tests: the cache's operations, published over a real ZMQ socket on loopback,
decoded by a subscriber with msgspec typed structs, give exactly the expected events."""

from __future__ import annotations

import msgspec
import zmq

from tests.events.zmq_helpers import WAIT_MS, loopback_publisher, published
from tests.helpers import insert_fresh, make_cache
from uniradix import EvictParams, RadixKey
from uniradix.events import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    KVEventBatch,
    KVEventStream,
)
from uniradix.hashing.page import digest_to_int64, page_digests, salt_seed

DECODER = msgspec.msgpack.Decoder(KVEventBatch)
# kv_events.md §c golden vector: [10, 20, ..., 80] in pages of 2.
GOLDEN = [978178666101069530, -895308556211281782, -8033692805846017938, 835415944263129316]


def chain(tokens: list[int], page_size: int = 2, salt: str | None = None) -> list[int]:
    """Hashes of every page of `tokens`, hashed from the root in one go."""
    units = RadixKey(tokens).units
    return [digest_to_int64(d) for d in page_digests(units, page_size, salt_seed(salt))]


def stored(hashes: list[int], parent: int | None, tokens: list[int], **kw: object) -> BlockStored:
    return BlockStored(
        hashes, parent, tokens, 2, None, "GPU", None, group_idx=0,
        kv_cache_spec_kind="full_attention", **kw,  # type: ignore[arg-type]
    )  # fmt: skip


def decoded(stream: KVEventStream) -> list[list[object]]:
    publisher = stream.publishers[0]
    batches = published(publisher)  # type: ignore[arg-type]
    assert [seq for _, seq, _ in batches] == list(range(len(batches)))
    out = []
    for topic, _, payload in batches:
        assert topic == b""
        batch = DECODER.decode(payload)
        assert batch.data_parallel_rank == 0 and isinstance(batch.ts, float)
        out.append(list(batch.events))
    return out


def test_store_extend_split_evict_reset() -> None:
    cache = make_cache(full_tokens=64, page_size=2)
    stream = KVEventStream(cache, [loopback_publisher()], publish_interval_ms=0)
    try:
        stream.flush()  # start-up: AllBlocksCleared (empty cache)
        insert_fresh(cache, [10, 20, 30, 40, 50, 60, 70, 80])
        stream.flush()
        insert_fresh(cache, [10, 20, 30, 40, 50, 60, 70, 80, 90, 100])  # extends the leaf
        stream.flush()
        insert_fresh(cache, [10, 20, 30, 40, 1, 2])  # splits after 4 tokens: no event for it
        insert_fresh(cache, [10, 20, 30, 40])  # already cached: nothing
        stream.flush()
        stream.flush()  # nothing happened: no batch
        cache.evict(EvictParams(num_tokens=64))
        stream.flush()
        cache.reset()
        insert_fresh(cache, [10, 20])
        stream.flush()
        events = decoded(stream)
    finally:
        stream.close()
    tail = chain([10, 20, 30, 40, 50, 60, 70, 80, 90, 100])[-1]
    branch = chain([10, 20, 30, 40, 1, 2])[-1]
    assert chain([10, 20, 30, 40, 50, 60, 70, 80]) == GOLDEN
    assert events == [
        [AllBlocksCleared()],
        [stored(GOLDEN, None, [10, 20, 30, 40, 50, 60, 70, 80])],
        [stored([tail], GOLDEN[3], [90, 100])],
        [stored([branch], GOLDEN[1], [1, 2])],
        # Leaves first (LRU: the [90, 100] leaf, then [50..80], then the branch), each
        # deepest page first; the split-off [10..40] goes last, after its children.
        [
            BlockRemoved(
                [tail, GOLDEN[3], GOLDEN[2], branch, GOLDEN[1], GOLDEN[0]], "GPU", group_idx=0
            )
        ],
        [AllBlocksCleared(), stored(chain([10, 20]), None, [10, 20])],
    ]


def test_chained_stores_in_one_step_coalesce_and_salt_seeds() -> None:
    cache = make_cache(full_tokens=64, page_size=2)
    stream = KVEventStream(cache, [loopback_publisher()], cache_salt="s1", publish_interval_ms=0)
    try:
        insert_fresh(cache, [1, 2, 3, 4])
        stream.flush()  # first batch: clear + the snapshot of what is cached
        insert_fresh(cache, [1, 2, 3, 4, 5, 6])
        insert_fresh(cache, [1, 2, 3, 4, 5, 6, 7, 8])
        insert_fresh(cache, [9, 9])  # a new root chain: its own event
        stream.flush()
        events = decoded(stream)
    finally:
        stream.close()
    h = chain([1, 2, 3, 4, 5, 6, 7, 8], salt="s1")
    assert h != chain([1, 2, 3, 4, 5, 6, 7, 8])
    assert events == [
        [AllBlocksCleared(), stored(h[:2], None, [1, 2, 3, 4], cache_salt="s1")],
        [
            stored(h[2:], h[1], [5, 6, 7, 8], cache_salt="s1"),
            stored(chain([9, 9], salt="s1"), None, [9, 9], cache_salt="s1"),
        ],
    ]


def test_store_then_split_in_the_same_step_keeps_hashes() -> None:
    """A leaf split before its (deferred) hashing still publishes the stored edge's hashes,
    and a later store under the split point chains from the right page."""
    cache = make_cache(full_tokens=64, page_size=2)
    stream = KVEventStream(cache, [loopback_publisher()], publish_interval_ms=0)
    try:
        stream.flush()
        insert_fresh(cache, [1, 2, 3, 4, 5, 6])
        insert_fresh(cache, [1, 2, 7, 8])
        stream.flush()
        events = decoded(stream)
        assert stream.recorder.hashes(cache.tree.root.children[RadixKey([1, 2]).units]) == (
            chain([1, 2])
        )
    finally:
        stream.close()
    h = chain([1, 2, 3, 4, 5, 6])
    assert events[1] == [
        stored(h, None, [1, 2, 3, 4, 5, 6]),
        stored(chain([1, 2, 7, 8])[1:], h[0], [7, 8]),
    ]


def test_swa_tombstone_is_silent() -> None:
    cache = make_cache(full_tokens=64, page_size=2, sliding_window=2, swa_tokens=64)
    stream = KVEventStream(cache, [loopback_publisher()], publish_interval_ms=0)
    try:
        stream.flush()
        insert_fresh(cache, [1, 2, 3, 4])
        insert_fresh(cache, [1, 2, 3, 4, 5, 6])
        stream.flush()
        inner = cache.tree.root.children[RadixKey([1, 2]).units]
        cache.evict(EvictParams(swa_num_tokens=2))  # the older, internal node: a tombstone
        assert inner.data[1].value is None and inner.data[0].value is not None
        assert stream.flush() == []
        cache.check_invariants()
        events = decoded(stream)
    finally:
        stream.close()
    h = chain([1, 2, 3, 4, 5, 6])
    assert events == [
        [AllBlocksCleared()],
        [stored(h, None, [1, 2, 3, 4, 5, 6])],  # the SWA split of the leaf: coalesced
    ]


def test_topic_template_and_live_subscriber() -> None:
    cache = make_cache(full_tokens=64, page_size=2)
    publisher = loopback_publisher(topic="kv@{pod}@{model}", pod="10.0.0.7:8000", model="m")
    sub = zmq.Context.instance().socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    sub.setsockopt(zmq.SUBSCRIBE, b"kv@")
    sub.connect(publisher.endpoint)
    stream = KVEventStream(cache, [publisher], publish_interval_ms=0)
    try:
        # PUB drops what it sends before the subscription arrives: publish until one lands.
        frames = None
        for i in range(WAIT_MS // 50):
            insert_fresh(cache, [i, i])
            stream.flush()
            if sub.poll(50):
                frames = sub.recv_multipart()
                break
        assert frames is not None, "no live batch"
        topic, seq, payload = frames
        assert topic == b"kv@10.0.0.7:8000@m" and len(seq) == 8
        batch = DECODER.decode(payload)
        assert any(isinstance(e, BlockStored) for e in batch.events)
    finally:
        sub.close()
        stream.close()
