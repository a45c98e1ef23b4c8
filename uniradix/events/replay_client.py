"""The replay client (`reference/kv_events.md` §b): a DEALER asks a publisher's replay
ROUTER for the batches from `start_seq` (`[empty, start_seq]`); each reply is `[empty,
(topic,) seq, payload]` and the last has seq -1. Used by `KVEventIndex` and
`events.subscription` to fill sequence gaps."""

from __future__ import annotations

import zmq

REPLAY_WAIT_MS = 2000


def fetch_replay(
    ctx: zmq.Context[zmq.Socket[bytes]], endpoint: str, start: int, stop: int
) -> list[bytes] | None:
    """Payloads of batches `[start, stop)` from a replay socket, or None when it cannot
    give all of them (the ring moved on, or no answer within `REPLAY_WAIT_MS`)."""
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    try:
        sock.send_multipart((b"", start.to_bytes(8, "big")))
        got: list[bytes] = []
        while sock.poll(REPLAY_WAIT_MS):
            frames = sock.recv_multipart()
            seq_frame, payload = frames[-2], frames[-1]  # with or without the topic frame
            seq = int.from_bytes(seq_frame, "big", signed=True)
            if seq == -1:
                return got if len(got) == stop - start else None
            if seq == start + len(got) and seq < stop:
                got.append(payload)
        return None
    finally:
        sock.close()
