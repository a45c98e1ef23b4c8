"""Event publishers: where a step's events go. `ZmqEventPublisher` speaks the vLLM / SGLang
transport (docs/events.md): a PUB socket sending `[topic, seq, payload]`, `seq`
an 8-byte big-endian counter from 0 (+1 per batch), and an optional replay ROUTER over a
ring of the last `buffer_steps` batches.

`publish()` never blocks the scheduler. With `sender="thread"` (default, as vLLM and SGLang
do) it puts the batch on a bounded queue that a background thread encodes and sends; a full
queue drops the batch, counts it, and returns False (the caller then resyncs:
`uniradix.events.stream`). Woken by a batch, the thread first waits `sender_wait_ms` (20 by
default) and then sends everything queued, each batch with its own seq and publish time: a
busy scheduler then hands it the GIL once per interval instead of once per batch (even
behind a `KVEventStream` that publishes every 20 ms: a thread woken at once, at the step
boundary, cost a CPU-bound caller's next calls 3-7 points more); the batches' digests are
hashed in one native call (`wire.prepare_batches`) and the frames sent with the GIL held
(`frame_send`), so the thread takes the GIL back twice per interval. With `sender="inline"`
it encodes and sends in the caller's thread (a PUB send only hands the bytes to ZeroMQ's own
I/O thread, which needs no GIL); a replay socket is then served by a thread that sleeps in
ZeroMQ's poll. The thread sender keeps encoding off a scheduler that waits on the GPU with
the GIL released; the inline one suits a CPU-bound caller (`benchmarks/events_ops.py`). Both
count the CPU time they spend encoding and sending (`busy_ns`).
`NullEventPublisher` counts only.
"""

from __future__ import annotations

import queue
import re
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import zmq

from uniradix.events.endpoints import attach, auto_binds
from uniradix.events.frame_send import frame_sender
from uniradix.events.groups import publishes_groups
from uniradix.events.types import KVEvent
from uniradix.events.wire import check_wire, encode_batch, prepare_batches
from uniradix.hashing.events import block_hashing

END_SEQ = (-1).to_bytes(8, "big", signed=True)
SENDERS = ("thread", "inline")
MAX_SENDER_WAIT_MS = 1000.0  # a router would see the cache's changes this late
REPLAY_POLL_MS = 100  # how often an inline publisher's replay thread checks for close()


@dataclass(frozen=True)
class KVEventsConfig:
    """Mirrors vLLM's / SGLang's `KVEventsConfig`. `topic` may use `{pod}` and `{model}`
    (llm-d needs `kv@{pod}@{model}`); `bind=None` binds when the endpoint has `*`, `::`,
    or is `ipc://` / `inproc://`, else connects (`uniradix.events.endpoints`: vLLM's and
    SGLang's rule; True / False force a side). Ports are offset by `dp_rank`.
    `hash_algo` / `hash_seed` pick the block hash (`uniradix.hashing.events`: SGLang's chain
    by default, or vLLM's `sha256_cbor` with its `PYTHONHASHSEED`); a `KVEventStream` and a
    `KVEventIndex` built from this config use them. `sender_wait_ms`: how long the sender
    thread lets batches gather before sending them (0: as each comes); events reach
    routers up to that much later. `components`: `auto` publishes a hybrid cache's SWA /
    Mamba groups beside the full one (`uniradix.events.groups`), `full` only the full group
    (SGLang's stream), `all` groups whatever the cache. `snapshot_endpoint`: where a
    `SnapshotServer` (`uniradix.events.subscription`) serves late subscribers, bound, port
    offset by `dp_rank` (the cluster replay starts one per instance)."""

    publisher: str = "zmq"
    endpoint: str = "tcp://*:5557"
    replay_endpoint: str | None = None
    buffer_steps: int = 10_000
    hwm: int = 100_000
    max_queue_size: int = 100_000
    topic: str = ""
    bind: bool | None = None
    wire: str = "map"
    dp_rank: int = 0
    pod: str = ""
    model: str = ""
    hash_algo: str = "sglang_sha256"
    hash_seed: str | None = None
    sender: str = "thread"
    sender_wait_ms: float = 20.0
    components: str = "auto"
    snapshot_endpoint: str | None = None

    def __post_init__(self) -> None:
        if self.sender not in SENDERS:
            raise ValueError(f"sender must be one of {SENDERS}, got {self.sender!r}")
        if self.publisher not in ("zmq", "null"):
            raise ValueError(f"publisher must be 'zmq' or 'null', got {self.publisher!r}")
        if not 0 <= self.sender_wait_ms <= MAX_SENDER_WAIT_MS:
            raise ValueError(
                f"sender_wait_ms must be in [0, {MAX_SENDER_WAIT_MS}], got {self.sender_wait_ms}"
            )
        check_wire(self.wire)
        publishes_groups(self.components, 0, self.wire)  # raises for a bad choice
        block_hashing(self.hash_algo, None, self.hash_seed)  # raises for a bad choice
        for name in ("buffer_steps", "hwm", "max_queue_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.dp_rank < 0:
            raise ValueError(f"dp_rank must be >= 0, got {self.dp_rank}")

    def topic_bytes(self) -> bytes:
        return self.topic.format(pod=self.pod, model=self.model).encode()

    def binds(self, endpoint: str) -> bool:
        if self.bind is not None:
            return self.bind
        return auto_binds(endpoint)


def offset_endpoint_port(endpoint: str, dp_rank: int) -> str:
    """`endpoint` for data-parallel rank `dp_rank`: the TCP port + rank, or a `_dp<rank>`
    suffix for `inproc` / `ipc` (rank 0 unchanged)."""
    if dp_rank == 0:
        return endpoint
    if endpoint.startswith(("inproc://", "ipc://")):
        return f"{endpoint}_dp{dp_rank}"
    match = re.fullmatch(r"(tcp://.*):(\d+)", endpoint)
    if match is None:
        raise ValueError(f"cannot offset the port of {endpoint!r} by dp_rank={dp_rank}")
    return f"{match.group(1)}:{int(match.group(2)) + dp_rank}"


class EventPublisher(Protocol):
    published: int  # batches handed on
    dropped: int  # batches lost before that

    def publish(self, events: Sequence[KVEvent]) -> bool: ...

    def close(self) -> None: ...


class NullEventPublisher:
    """Publishes nothing; counts what it was given."""

    def __init__(self) -> None:
        self.published = 0
        self.dropped = 0

    def publish(self, events: Sequence[KVEvent]) -> bool:
        self.published += 1
        return True

    def close(self) -> None:
        return


class ZmqEventPublisher:
    """PUB (+ optional replay ROUTER) publisher. Sockets are made and bound here, then the
    PUB is used only by the sender (the thread, or the caller when inline) and the ROUTER
    only by the thread. `endpoint` / `replay_endpoint` are the bound addresses (a `*` port
    resolved)."""

    def __init__(self, config: KVEventsConfig) -> None:
        self.config = config
        self.published = 0
        self.dropped = 0
        self.accepted = 0  # batches queued (published once the sender thread caught up)
        self.events_published = 0
        self.busy_ns = 0  # CPU time encoding and sending, on whichever thread does it
        self._topic = config.topic_bytes()
        self._ctx = zmq.Context()
        self._pub = self._ctx.socket(zmq.PUB)
        self._pub.setsockopt(zmq.SNDHWM, config.hwm)
        self._pub.setsockopt(zmq.LINGER, 1000)
        self._frames = frame_sender(self._pub)
        endpoint = offset_endpoint_port(config.endpoint, config.dp_rank)
        self.endpoint = self._attach_or_close(self._pub, endpoint, config.binds(endpoint))
        self._replay: zmq.Socket[bytes] | None = None
        self.replay_endpoint: str | None = None
        if config.replay_endpoint is not None:
            self._replay = self._ctx.socket(zmq.ROUTER)
            self._replay.setsockopt(zmq.LINGER, 0)
            replay = offset_endpoint_port(config.replay_endpoint, config.dp_rank)
            self.replay_endpoint = self._attach_or_close(self._replay, replay, True)
        # The last batches, for replay requests: without a replay socket none can come, and
        # keeping `buffer_steps` payloads (~45 KB each for a Mooncake request at page 16)
        # would only hold memory and move every new payload to fresh cache lines.
        ring_size = config.buffer_steps if self._replay is not None else 0
        self._ring: deque[tuple[int, bytes]] = deque(maxlen=ring_size)
        # A SimpleQueue (C, a put costs the scheduler a fraction of `queue.Queue`'s locks and
        # condition), bounded by its size at each put: only the scheduler's thread puts.
        self._queue: queue.SimpleQueue[tuple[float, Sequence[KVEvent]] | None] = queue.SimpleQueue()
        self._max_queued = config.max_queue_size
        self._seq = 0
        self._inline = config.sender == "inline"
        self._wait_s = config.sender_wait_ms / 1000
        self._closing = False
        target = self._run if not self._inline else self._serve_replays
        self._thread = threading.Thread(target=target, name="kv-events", daemon=True)
        if not self._inline or self._replay is not None:
            self._thread.start()

    def _attach_or_close(self, sock: zmq.Socket[bytes], endpoint: str, bind: bool) -> str:
        """`endpoints.attach`; a bad or busy endpoint closes what was opened first."""
        try:
            return attach(sock, endpoint, bind)
        except ValueError:
            self._ctx.destroy(linger=0)
            raise

    def publish(self, events: Sequence[KVEvent]) -> bool:
        """Queues one batch (stamped now), or sends it when inline; False when it was
        dropped (a full queue)."""
        if self._inline:
            self.accepted += 1
            self._encode_and_send(time.time(), events)
            return True
        if self._queue.qsize() >= self._max_queued:
            self.dropped += 1
            return False
        self._queue.put((time.time(), events))
        self.accepted += 1
        return True

    def close(self) -> None:
        """Sends everything queued, then closes the sockets."""
        if self._thread.is_alive():
            self._closing = True
            self._queue.put(None)  # the stop mark
            self._thread.join()
        self._pub.close()
        if self._replay is not None:
            self._replay.close()
        self._ctx.term()

    # ------------------------------------------------------------------ sender thread
    def _run(self) -> None:
        # Without a replay socket the thread sleeps until a batch comes: a periodic wake-up
        # would take the GIL from the scheduler 100 times a second for nothing.
        timeout = None if self._replay is None else 0.01
        while True:
            try:
                item = self._queue.get(timeout=timeout)
            except queue.Empty:
                pass  # idle: serve replay requests
            else:
                if not self._send_queued(item):
                    return
            while self._replay is not None and self._replay.poll(0):
                self._serve_replay(self._replay)

    def _send_queued(self, item: tuple[float, Sequence[KVEvent]] | None) -> bool:
        """Sends `item` and, after `sender_wait_ms`, every batch queued by then, in order;
        False once the stop mark came. Waiting lets a busy scheduler's steps gather so that
        the thread takes the GIL once for several of them: each hand-off stalls the
        scheduler's thread longer than encoding a batch takes. So the batches' digests are
        hashed together (one release of the GIL) and the frames sent with it held
        (`frame_send`)."""
        if item is not None and self._wait_s:
            time.sleep(self._wait_s)
        items: list[tuple[float, Sequence[KVEvent]]] = []
        while item is not None:
            items.append(item)
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
        start = time.thread_time_ns()
        prepare_batches([events for _, events in items])
        self.busy_ns += time.thread_time_ns() - start
        for ts, events in items:
            self._encode_and_send(ts, events)
        return item is not None

    def _encode_and_send(self, ts: float, events: Sequence[KVEvent]) -> None:
        start = time.thread_time_ns()  # CPU time: a wait for the GIL is not the sender's
        self._send(encode_batch(events, ts, self.config.dp_rank, self.config.wire))
        self.events_published += len(events)
        self.busy_ns += time.thread_time_ns() - start

    def _send(self, payload: bytes) -> None:
        frames = (self._topic, self._seq.to_bytes(8, "big"), payload)
        if self._frames is not None:
            self._frames.send(frames)
        else:
            self._pub.send_multipart(frames)
        self._ring.append((self._seq, payload))
        self._seq += 1
        self.published += 1

    def _serve_replays(self) -> None:
        """The inline publisher's thread: replay requests only (the GIL is free while it
        waits in ZeroMQ's poll)."""
        assert self._replay is not None
        while not self._closing:
            if self._replay.poll(REPLAY_POLL_MS):
                self._serve_replay(self._replay)

    def _serve_replay(self, sock: zmq.Socket[bytes]) -> None:
        frames = sock.recv_multipart()
        if len(frames) != 3 or len(frames[2]) != 8:
            return  # not `[identity, empty, start_seq]`: ignored, as vLLM and SGLang do
        identity, start = frames[0], int.from_bytes(frames[2], "big")
        for seq, payload in list(self._ring):
            if seq >= start:
                sock.send_multipart((identity, b"", self._topic, seq.to_bytes(8, "big"), payload))
        sock.send_multipart((identity, b"", b"", END_SEQ, b""))
