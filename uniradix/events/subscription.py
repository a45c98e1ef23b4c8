"""A KV event stream that survives drops, late joins and restarts.

A router that subscribes late, loses batches at the high-water mark, or sees a publisher
restart must not go on with stale or missing blocks. Two pieces:

- `SnapshotServer` (publisher side): a ROUTER socket that answers `[empty, b"snapshot"]`
  with `[empty, seq, payload]`, the `KVEventStream.snapshot()` batch (`AllBlocksCleared`
  and a store per block held, every medium and group) *as of* batch `seq` (-1: none
  published yet). The snapshot reads the cache, so `serve()` runs on the scheduler's
  thread: call it right after each `flush()`.
- `Subscription` (router side): feeds one instance of a `KVEventIndex`. On `start()` it
  subscribes to the live stream and asks for a snapshot; live batches are held until the
  snapshot lands, then those after its seq are applied, so no batch is missed or applied
  twice. A gap (seq skipped) is filled from the publisher's replay ring when it still holds
  the batches, otherwise by a fresh snapshot. A seq going back is a batch already covered
  (sent before the snapshot or replay that applied it: publish times tell) or a restarted
  publisher (stamped later), which also takes a snapshot. Until one lands the instance
  keeps its last content.

Gaps are fetched with `replay_client.fetch_replay`, as `KVEventIndex` does.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import zmq

from uniradix.events.endpoints import attach
from uniradix.events.replay_client import REPLAY_WAIT_MS, fetch_replay
from uniradix.events.wire import decode_batch, encode_batch

if TYPE_CHECKING:
    from uniradix.events.index import KVEventIndex
    from uniradix.events.stream import KVEventStream

SNAPSHOT_REQUEST = b"snapshot"


class SnapshotServer:
    """Serves `stream`'s snapshot on `endpoint` (bound), tagged with the seq of the last
    batch `publisher` (one of the stream's) was handed."""

    def __init__(self, stream: KVEventStream, endpoint: str, publisher: int = 0) -> None:
        self.stream = stream
        self.publisher = stream.publishers[publisher]
        self.served = 0
        self._ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        self._sock = self._ctx.socket(zmq.ROUTER)
        self._sock.setsockopt(zmq.LINGER, 0)
        try:
            self.endpoint = attach(self._sock, endpoint, True)
        except ValueError:
            self._ctx.destroy(linger=0)
            raise

    def serve(self) -> int:
        """Answers every pending request (without waiting); returns how many."""
        num = 0
        while self._sock.poll(0):
            frames = self._sock.recv_multipart()
            if len(frames) != 3 or frames[2] != SNAPSHOT_REQUEST:
                continue
            # Batches handed on so far got seqs 0.. in order (a dropped one got none).
            seq = getattr(self.publisher, "accepted", self.publisher.published) - 1
            payload = encode_batch(self.stream.snapshot(), time.time(), 0)
            tag = seq.to_bytes(8, "big", signed=True)
            self._sock.send_multipart((frames[0], b"", tag, payload))
            num += 1
        self.served += num
        return num

    def close(self) -> None:
        self._sock.close()
        self._ctx.term()


class Subscription:
    """Keeps `instance` of `index` equal to one publisher's content (module doc).
    `poll(timeout_ms)` receives and applies; `close()` stops."""

    def __init__(
        self,
        index: KVEventIndex,
        instance: str,
        endpoint: str,
        snapshot_endpoint: str,
        replay_endpoint: str | None = None,
        topic: bytes = b"",
    ) -> None:
        self.index = index
        self.instance = instance
        self.snapshot_endpoint = snapshot_endpoint
        self.replay_endpoint = replay_endpoint
        self.snapshots = self.replayed = self.gaps = self.restarts = 0
        self.next_seq: int | None = None  # None: waiting for a snapshot
        self._held: list[tuple[int, bytes]] = []  # live batches while waiting
        self._ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        self._sub = self._ctx.socket(zmq.SUB)
        self._sub.setsockopt(zmq.LINGER, 0)
        self._sub.setsockopt(zmq.SUBSCRIBE, topic)
        self._asking: zmq.Socket[bytes] | None = None
        self._deadline = 0.0
        self._last_ts = 0.0  # publish time of the newest batch (or snapshot) applied
        self._prev_ts: float | None = None  # that of batch `next_seq - 1`, if known
        try:
            attach(self._sub, endpoint, False)
        except ValueError:
            self._ctx.destroy(linger=0)
            raise
        index.add_instance(instance)
        self._ask_snapshot()

    def _ask_snapshot(self) -> None:
        if self._asking is not None:
            return  # one request at a time; its answer is as fresh as any
        self.next_seq = None
        self._deadline = time.monotonic() + REPLAY_WAIT_MS / 1000
        sock = self._ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(self.snapshot_endpoint)
        sock.send_multipart((b"", SNAPSHOT_REQUEST))
        self._asking = sock

    def poll(self, timeout_ms: int = 0) -> int:
        """Applies what arrived within `timeout_ms`; returns how many live batches came."""
        num = 0
        if self._sub.poll(timeout_ms):
            while self._sub.poll(0):
                frames = self._sub.recv_multipart()
                if len(frames) == 3:
                    self.receive(int.from_bytes(frames[1], "big"), frames[2])
                    num += 1
        if self._asking is not None and self._asking.poll(0):
            frames = self._asking.recv_multipart()
            self._asking.close()
            self._asking = None
            self._land(int.from_bytes(frames[-2], "big", signed=True), frames[-1])
        elif self._asking is not None and time.monotonic() > self._deadline:
            self._asking.close()  # lost with a publisher that went away: ask again
            self._asking = None
            self._ask_snapshot()
        return num

    def receive(self, seq: int, payload: bytes) -> None:
        """One live batch `seq`: applied in order, held while a snapshot is awaited."""
        if self.next_seq is None:
            self._held.append((seq, payload))
            return
        if seq < self.next_seq:
            # Sent before the snapshot or replay that covered it (stamped no later than
            # what was applied last), or the publisher restarted (stamped after).
            if decode_batch(payload).ts <= self._last_ts:
                return
            self.restarts += 1
            self._held = [(seq, payload)]
            self._ask_snapshot()
            return
        if seq > self.next_seq:
            self.gaps += 1
            if not self._replay(self.next_seq, seq):
                self._held.append((seq, payload))
                self._ask_snapshot()
                return
        self._apply(seq, payload)

    def _apply(self, seq: int, payload: bytes, snapshot: bool = False) -> None:
        batch = decode_batch(payload)
        self.index.apply(self.instance, batch)
        self._last_ts = max(self._last_ts, batch.ts)
        self._prev_ts = None if snapshot else batch.ts
        self.next_seq = seq + 1

    def _replay(self, start: int, stop: int) -> bool:
        """Applies `[start, stop)` from the replay ring. The batch before them is fetched
        too, when its publish time is known, and must be the one applied: a publisher that
        restarted (and whose batches up to `stop` were all missed) has another there."""
        if self.replay_endpoint is None:
            return False
        check = self._prev_ts is not None and start > 0
        got = fetch_replay(self._ctx, self.replay_endpoint, start - 1 if check else start, stop)
        if got is None:
            return False
        if check:
            if decode_batch(got[0]).ts != self._prev_ts:
                return False  # not the stream we followed
            got = got[1:]
        for offset, payload in enumerate(got):
            self._apply(start + offset, payload)
        self.replayed += len(got)
        return True

    def _land(self, seq: int, payload: bytes) -> None:
        """The snapshot as of `seq` arrived: it replaces the instance's content, then the
        held batches after it follow (a gap among them is handled as any other)."""
        self.snapshots += 1
        self._apply(seq, payload, snapshot=True)  # starts with AllBlocksCleared
        held, self._held = sorted(self._held), []
        for s, p in held:
            if self.next_seq is None or s >= self.next_seq:  # None: another snapshot asked
                self.receive(s, p)

    def close(self) -> None:
        if self._asking is not None:
            self._asking.close()
        self._sub.close()
        self._ctx.term()
