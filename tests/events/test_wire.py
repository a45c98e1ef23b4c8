"""Golden bytes of each wire shape, typed decoding of each, the drop counter and the
clear + resync that follows a drop."""

from __future__ import annotations

import threading
import time
from typing import Any

import msgspec
import pytest

import uniradix.events.publisher as publisher_module
from tests.events.zmq_helpers import loopback_publisher, published
from tests.helpers import insert_fresh, make_cache
from uniradix.events import (
    WIRE_SHAPES,
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    KVEventBatch,
    KVEventsConfig,
    KVEventStream,
    decode_batch,
    encode_batch,
)
from uniradix.events.publisher import offset_endpoint_port
from uniradix.events.types import (
    ArrayAllBlocksCleared,
    ArrayBlockRemoved,
    ArrayBlockStored,
    ArrayKVEventBatch,
    KVEvent,
)

H = -3488128144981237669  # kv_events.md §c: [1, 2, 3, 4] in one page of 4
EVENTS: list[KVEvent] = [
    BlockStored(
        [H], None, [1, 2, 3, 4], 4, None, "GPU", None,
        cache_salt="s", group_idx=0, kv_cache_spec_kind="full_attention",
    ),
    BlockRemoved([H], "GPU", group_idx=0),
    AllBlocksCleared(),
]  # fmt: skip
BATCH = "93cb3ff800000000000093"  # [1.5, [3 events], ...]: fixarray 3, float64, fixarray 3
HASH = "91d3cf97adeedb59e05b"  # [H]: fixarray 1, int64
GOLDEN = {
    "map": BATCH
    + "8b" "a474797065" "ab426c6f636b53746f726564"  # {"type": "BlockStored", (11 keys)
    + "ac626c6f636b5f686173686573" + HASH  # "block_hashes": [H]
    + "b1706172656e745f626c6f636b5f68617368c0"  # "parent_block_hash": nil
    + "a9746f6b656e5f6964739401020304"  # "token_ids": [1, 2, 3, 4]
    + "aa626c6f636b5f73697a6504"  # "block_size": 4
    + "a76c6f72615f6964c0" "a66d656469756da3475055"  # "lora_id": nil, "medium": "GPU"
    + "a96c6f72615f6e616d65c0" "aa63616368655f73616c74a173"  # "lora_name": nil, "cache_salt"
    + "a967726f75705f69647800"  # "group_idx": 0
    + "b26b765f63616368655f737065635f6b696e64ae66756c6c5f617474656e74696f6e"  # kind
    + "84a474797065ac426c6f636b52656d6f766564"  # {"type": "BlockRemoved", (4 keys)
    + "ac626c6f636b5f686173686573" + HASH + "a66d656469756da3475055" + "a967726f75705f69647800"
    + "81a474797065b0416c6c426c6f636b73436c6561726564"  # {"type": "AllBlocksCleared"}
    + "00",  # dp_rank 0
    "vllm-array": BATCH
    + "97ab426c6f636b53746f726564" + HASH + "c0" + "9401020304" + "04" + "c0" + "a3475055"
    + "93ac426c6f636b52656d6f766564" + HASH + "a3475055"
    + "91b0416c6c426c6f636b73436c6561726564"
    + "00",
    "sglang-array": BATCH
    + "98ab426c6f636b53746f726564" + HASH + "c0" + "9401020304" + "04" + "c0" + "a3475055"
    + "81aa63616368655f73616c74a173"  # SGLang's 8th element on a salted store
    + "93ac426c6f636b52656d6f766564" + HASH + "a3475055"
    + "91b0416c6c426c6f636b73436c6561726564"
    + "00",
}  # fmt: skip


@pytest.mark.parametrize("wire", WIRE_SHAPES)
def test_golden_bytes_and_round_trip(wire: str) -> None:
    payload = encode_batch(EVENTS, 1.5, 0, wire)
    assert payload.hex() == GOLDEN[wire]
    back = decode_batch(payload)
    assert back.ts == 1.5 and back.data_parallel_rank == 0
    if wire == "map":
        assert back.events == EVENTS
    else:
        stored = back.events[0]
        assert isinstance(stored, BlockStored)
        assert (stored.block_hashes, stored.parent_block_hash, stored.token_ids) == (
            [H],
            None,
            [1, 2, 3, 4],
        )
        assert stored.cache_salt == ("s" if wire == "sglang-array" else None)
        assert back.events[1:] == [BlockRemoved([H], "GPU"), AllBlocksCleared()]
        typed = msgspec.msgpack.Decoder(ArrayKVEventBatch).decode(payload)
        assert [type(e) for e in typed.events] == [
            ArrayBlockStored,
            ArrayBlockRemoved,
            ArrayAllBlocksCleared,
        ]


def test_bad_config_and_payload() -> None:
    with pytest.raises(ValueError, match="wire"):
        KVEventsConfig(wire="json")
    with pytest.raises(ValueError, match="hwm"):
        KVEventsConfig(hwm=0)
    with pytest.raises(ValueError):
        decode_batch(b"\x92\x01\x02")
    assert offset_endpoint_port("tcp://*:5557", 2) == "tcp://*:5559"
    assert offset_endpoint_port("inproc://ev", 1) == "inproc://ev_dp1"
    with pytest.raises(ValueError, match="dp_rank"):
        offset_endpoint_port("tcp://host", 1)


def test_full_queue_drops_counts_and_resyncs(monkeypatch: pytest.MonkeyPatch) -> None:
    """The sender thread is held inside the first batch, so the 1-slot queue fills and the
    next batch is dropped; the batch after that is AllBlocksCleared + the whole content."""
    release, entered = threading.Event(), threading.Event()
    real = publisher_module.encode_batch

    def held(events: list[KVEvent], ts: float, rank: int, wire: str) -> bytes:
        entered.set()
        assert release.wait(5)
        return real(events, ts, rank, wire)

    monkeypatch.setattr(publisher_module, "encode_batch", held)
    cache = make_cache(full_tokens=64, page_size=2)
    stream = KVEventStream(cache, [loopback_publisher(max_queue_size=1)], publish_interval_ms=0)
    try:
        stream.flush()  # the sender takes it and waits
        assert entered.wait(5)
        insert_fresh(cache, [1, 2])
        stream.flush()  # queued
        insert_fresh(cache, [3, 4])
        stream.flush()  # dropped
        assert stream.events_dropped == 1
        release.set()
        insert_fresh(cache, [5, 6])
        batches = published(stream.publishers[0])  # type: ignore[arg-type]
        assert len(batches) == 2
        stream.flush()  # resync
        batches = published(stream.publishers[0])  # type: ignore[arg-type]
    finally:
        release.set()
        stream.close()
    decoder = msgspec.msgpack.Decoder(KVEventBatch)
    last = decoder.decode(batches[-1][2]).events
    assert isinstance(last[0], AllBlocksCleared)
    assert sorted(e.token_ids for e in last[1:]) == [[1, 2], [3, 4], [5, 6]]  # type: ignore[union-attr]
    assert stream.resyncs == 2


def test_sender_thread_sends_the_batches_gathered_while_it_waited(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Woken by a batch, the sender thread waits `sender_wait_ms` once, then sends every batch
    queued by then, in order, each with its own seq and payload."""
    waiting, go = threading.Event(), threading.Event()
    waits: list[float] = []

    class HeldWait:  # the publisher module's `time`, with a wait that ends when the test says
        def __getattr__(self, name: str) -> Any:
            return getattr(time, name)

        def sleep(self, seconds: float) -> None:
            waits.append(seconds)
            waiting.set()
            assert go.wait(5)

    monkeypatch.setattr(publisher_module, "time", HeldWait())
    publisher = loopback_publisher(sender_wait_ms=20)
    batches: list[list[KVEvent]] = [
        [BlockStored([i], None, [i] * 4, 4, None, "GPU", None)] for i in range(3)
    ]
    try:
        publisher.publish(batches[0])
        assert waiting.wait(5)
        publisher.publish(batches[1])
        publisher.publish(batches[2])
        go.set()
        got = published(publisher)
    finally:
        go.set()
        publisher.close()
    assert waits == [0.02]
    assert [seq for _, seq, _ in got] == [0, 1, 2]
    assert [decode_batch(payload).events for _, _, payload in got] == batches
    assert publisher.busy_ns > 0
    with pytest.raises(ValueError, match="sender_wait_ms"):
        KVEventsConfig(sender_wait_ms=-1)


def test_wide_pages_hash_their_tagged_int64_bytes() -> None:
    """Pages with a unit beyond uint32 (the Mooncake stream's output ids) hash `0xff` and
    the units as int64 LE; the narrow pages around them keep the uint32 encoding."""
    import hashlib

    from uniradix import RadixKey
    from uniradix.hashing.page import page_digests

    big = (1 << 32) + 5
    got = page_digests(RadixKey([1, 2, big, 3, 4, 5]).units, 2)
    d0 = hashlib.sha256(b"\x01\x00\x00\x00\x02\x00\x00\x00").digest()
    wide = b"\xff" + big.to_bytes(8, "little") + (3).to_bytes(8, "little")
    d1 = hashlib.sha256(d0 + wide).digest()
    d2 = hashlib.sha256(d1 + b"\x04\x00\x00\x00\x05\x00\x00\x00").digest()
    assert got == [d0, d1, d2]
