"""A stream that survives: a late subscriber gets a snapshot then the live stream without a
gap; a gap is filled from the replay ring or by a fresh snapshot; subscribers and
publishers killed and restarted mid-stream end with the index equal to the cache."""

from __future__ import annotations

import socket
import threading
import time

from tests.events.oracle import cached_hashes
from tests.events.zmq_helpers import WAIT_MS, loopback_publisher, replay
from tests.helpers import insert_fresh, make_cache
from uniradix import EvictParams, UnifiedRadixCache
from uniradix.cli import main
from uniradix.events import KVEventsConfig, KVEventStream, ZmqEventPublisher
from uniradix.events.index import KVEventIndex
from uniradix.events.subscription import SnapshotServer, Subscription

SNAPSHOT = "tcp://127.0.0.1:*"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


class Instance:
    """A cache publishing over loopback ZMQ, with a snapshot server."""

    def __init__(self, cache: UnifiedRadixCache, **config: object) -> None:
        self.cache = cache
        self.publisher = loopback_publisher(**config)
        self.stream = KVEventStream(cache, [self.publisher], publish_interval_ms=0)
        self.server = SnapshotServer(self.stream, SNAPSHOT)
        self.keys = 0

    def step(self, inserts: int = 1) -> None:
        for _ in range(inserts):
            self.keys += 1
            insert_fresh(self.cache, [1, 2, 3, 4, self.keys % 50, self.keys])
        if self.keys % 7 == 0:
            self.cache.evict(EvictParams(num_tokens=4))
        self.stream.flush()
        self.server.serve()

    def subscribe(self, index: KVEventIndex, replay: bool = True) -> Subscription:
        pub = self.publisher
        return Subscription(
            index,
            "a",
            pub.endpoint,
            self.server.endpoint,
            pub.replay_endpoint if replay else None,
        )

    def close(self) -> None:
        self.server.close()
        self.stream.close()


def converge(inst: Instance, sub: Subscription, index: KVEventIndex, steps: int = 0) -> None:
    """Steps the instance `steps` times, then polls until the index equals the cache."""
    for _ in range(steps):
        inst.step()
        sub.poll(5)
    deadline = time.monotonic() + WAIT_MS / 1000
    while time.monotonic() < deadline:
        inst.stream.flush()
        inst.server.serve()
        sub.poll(20)
        if sub.next_seq is not None and index.blocks("a") == cached_hashes(inst.cache):
            return
    raise AssertionError(f"index never caught up: {len(index.blocks('a'))} blocks")


def test_late_joiner_gets_a_snapshot_then_the_live_stream() -> None:
    inst = Instance(make_cache(full_tokens=512, page_size=2), buffer_steps=4)
    index = KVEventIndex(block_size=2)
    try:
        for _ in range(30):  # long before anyone listens; the ring keeps only 4
            inst.step()
        sub = inst.subscribe(index)
        converge(inst, sub, index, steps=20)
        assert sub.snapshots >= 1 and index.stats.resets == 0
        for _ in range(10):  # then live, step by step, every batch in order
            inst.step()
            converge(inst, sub, index)
        sub.close()
    finally:
        inst.close()


def test_snapshot_before_anything_was_published() -> None:
    inst = Instance(make_cache(full_tokens=512, page_size=2))
    index = KVEventIndex(block_size=2)
    try:
        sub = inst.subscribe(index)
        converge(inst, sub, index)
        assert index.blocks("a") == set() and sub.next_seq is not None
        converge(inst, sub, index, steps=5)
        assert index.blocks("a")
        sub.close()
    finally:
        inst.close()


def _skip_ahead(inst: Instance, sub: Subscription, skipped: int) -> None:
    """Publishes `skipped + 1` batches and hands the subscription only the last (the
    others were lost on the way, as at the high-water mark)."""
    assert sub.next_seq is not None
    start = sub.next_seq
    for _ in range(skipped + 1):
        inst.step()
    pub = inst.publisher
    deadline = time.monotonic() + WAIT_MS / 1000
    while pub.published < pub.accepted and time.monotonic() < deadline:
        time.sleep(0.01)
    batches = replay(pub.replay_endpoint or "", start + skipped)
    seq, payload = batches[0][1], batches[0][2]
    sub.receive(seq, payload)


def test_gap_is_filled_from_the_replay_ring() -> None:
    inst = Instance(make_cache(full_tokens=512, page_size=2))
    index = KVEventIndex(block_size=2)
    try:
        sub = inst.subscribe(index)
        converge(inst, sub, index, steps=3)
        before = (sub.gaps, sub.replayed, sub.snapshots)  # a slow join may have had a gap
        _skip_ahead(inst, sub, 3)
        assert (sub.gaps, sub.replayed, sub.snapshots) == (before[0] + 1, before[1] + 3, before[2])
        assert index.blocks("a") == cached_hashes(inst.cache)
        sub.close()
    finally:
        inst.close()


def test_gap_beyond_the_ring_takes_a_fresh_snapshot() -> None:
    inst = Instance(make_cache(full_tokens=512, page_size=2), buffer_steps=2)
    index = KVEventIndex(block_size=2)
    try:
        sub = inst.subscribe(index)
        converge(inst, sub, index, steps=3)
        before = (sub.gaps, sub.replayed, sub.snapshots)
        _skip_ahead(inst, sub, 5)  # the ring holds 2: replay cannot fill 5
        assert (sub.gaps, sub.replayed) == (before[0] + 1, before[1]) and sub.next_seq is None
        converge(inst, sub, index)
        assert sub.snapshots == before[2] + 1 and index.stats.resets == 0
        sub.close()
    finally:
        inst.close()


def test_gap_without_replay_takes_a_fresh_snapshot() -> None:
    inst = Instance(make_cache(full_tokens=512, page_size=2))
    index = KVEventIndex(block_size=2)
    try:
        sub = inst.subscribe(index, replay=False)
        converge(inst, sub, index, steps=3)
        before = (sub.gaps, sub.snapshots)
        _skip_ahead(inst, sub, 1)
        converge(inst, sub, index, steps=3)
        assert sub.gaps > before[0] and sub.snapshots > before[1]
        sub.close()
    finally:
        inst.close()


def test_subscriber_killed_and_restarted_mid_stream() -> None:
    inst = Instance(make_cache(full_tokens=512, page_size=2))
    index = KVEventIndex(block_size=2)
    try:
        sub = inst.subscribe(index)
        converge(inst, sub, index, steps=5)
        sub.close()  # killed: the stream goes on without it
        for _ in range(10):
            inst.step()
        assert index.blocks("a") != cached_hashes(inst.cache)
        sub = inst.subscribe(index)
        converge(inst, sub, index, steps=5)
        sub.close()
    finally:
        inst.close()


def test_publisher_killed_and_restarted_on_the_same_endpoints() -> None:
    cache = make_cache(full_tokens=512, page_size=2)
    inst = Instance(cache)
    index = KVEventIndex(block_size=2)
    sub = inst.subscribe(index)
    try:
        converge(inst, sub, index, steps=5)
        endpoints = (inst.publisher.endpoint, inst.publisher.replay_endpoint)
        snapshot_endpoint = inst.server.endpoint
        inst.close()  # killed; the cache changes while nobody publishes
        for k in range(5):
            insert_fresh(cache, [9, 9, k, k])
        config = KVEventsConfig(endpoint=endpoints[0], replay_endpoint=endpoints[1], bind=True)
        inst.publisher = ZmqEventPublisher(config)
        inst.stream = KVEventStream(cache, [inst.publisher], publish_interval_ms=0)
        inst.server = SnapshotServer(inst.stream, snapshot_endpoint)
        for _ in range(20):  # the SUB reconnects on its own; what it sees goes back
            inst.step()
            sub.poll(50)
        converge(inst, sub, index)  # to seq 0, stamped later: a fresh snapshot
        assert sub.snapshots >= 2 and sub.restarts + sub.gaps >= 1
    finally:
        sub.close()
        inst.close()


def test_cli_replay_serves_snapshots_to_a_subscription() -> None:
    """`uniradix replay --kv-events-snapshot`: a subscription that asks before the replay
    starts gets the snapshot at the first step and follows the stream to the end."""
    endpoints = [f"tcp://127.0.0.1:{_free_port()}" for _ in range(3)]
    index = KVEventIndex(block_size=4)
    sub = Subscription(index, "instance-0", endpoints[0], endpoints[2], endpoints[1])
    argv = ["replay", "--max-requests", "120", "--config", "hybrid", "--page-size", "4"]
    argv += ["--no-progress", "--kv-events", endpoints[0], "--kv-events-bind", "bind"]
    argv += ["--kv-events-replay", endpoints[1], "--kv-events-snapshot", endpoints[2]]
    done: list[int] = []
    replay = threading.Thread(target=lambda: done.append(main(argv)))
    replay.start()
    try:
        while replay.is_alive():
            sub.poll(10)
        deadline = time.monotonic() + 1
        while time.monotonic() < deadline:  # the last batches, sent on close
            sub.poll(10)
        assert done == [0] and sub.snapshots >= 1
        assert index.blocks("instance-0") and index.blocks("instance-0", group=1)
        assert index.stats.resets == 0
    finally:
        replay.join()
        sub.close()
