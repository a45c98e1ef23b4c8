"""Loopback ZMQ helpers for the event tests: a publisher on free ports and a replay client
with bounded waits."""

from __future__ import annotations

import time

import zmq

from uniradix.events import KVEventsConfig, ZmqEventPublisher

WAIT_MS = 5000


def loopback_publisher(**kwargs: object) -> ZmqEventPublisher:
    config = KVEventsConfig(
        endpoint="tcp://127.0.0.1:*",
        replay_endpoint="tcp://127.0.0.1:*",
        **kwargs,  # type: ignore[arg-type]
    )
    return ZmqEventPublisher(config)


def replay(endpoint: str, start_seq: int = 0) -> list[tuple[bytes, int, bytes]]:
    """(topic, seq, payload) of every batch the publisher's ring holds from `start_seq`,
    asked over a DEALER as routers do; fails after WAIT_MS without the end marker."""
    ctx = zmq.Context.instance()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    try:
        sock.send_multipart((b"", start_seq.to_bytes(8, "big")))
        out = []
        while True:
            assert sock.poll(WAIT_MS), "no replay reply"
            frames = sock.recv_multipart()
            assert len(frames) == 4 and frames[0] == b"", frames
            seq = int.from_bytes(frames[2], "big", signed=True)
            if seq == -1:
                assert frames[1] == b"" and frames[3] == b""
                return out
            out.append((frames[1], seq, frames[3]))
    finally:
        sock.close()


def published(publisher: ZmqEventPublisher) -> list[tuple[bytes, int, bytes]]:
    """Every batch the publisher sent, once its queue is drained."""
    deadline = time.monotonic() + WAIT_MS / 1000
    while publisher.published < publisher.accepted and time.monotonic() < deadline:
        time.sleep(0.005)
    assert publisher.replay_endpoint is not None
    return replay(publisher.replay_endpoint)
