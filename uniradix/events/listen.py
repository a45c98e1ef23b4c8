"""A live decoded view of a KV event stream (`uniradix events --listen`): subscribes to one
publisher and prints each batch as a JSON line `{"topic", "seq", "ts", "dp_rank",
"events"}`, whatever its wire shape, for debugging a deployment."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import msgspec
import zmq

from uniradix.events.wire import decode_batch


def listen(
    endpoint: str,
    topic: str = "",
    count: int | None = None,
    timeout_s: float | None = None,
    out: Callable[[str], None] = print,
    bind: bool = False,
) -> int:
    """Prints batches from `endpoint` until `count` were printed or `timeout_s` passed
    without one; returns how many were printed. Undecodable messages print an error line."""
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    sub.setsockopt(zmq.SUBSCRIBE, topic.encode())
    if bind:  # the central mode: publishers connect to us
        sub.bind(endpoint)
    else:
        sub.connect(endpoint)
    printed = 0
    try:
        last = time.monotonic()
        while count is None or printed < count:
            if not sub.poll(100):
                if timeout_s is not None and time.monotonic() - last > timeout_s:
                    break
                continue
            last = time.monotonic()
            frames = sub.recv_multipart()
            if len(frames) != 3:
                out(json.dumps({"error": f"expected 3 frames, got {len(frames)}"}))
                continue
            try:
                batch = decode_batch(frames[2])
            except ValueError as exc:
                out(json.dumps({"error": str(exc)}))
                continue
            line = {
                "topic": frames[0].decode(errors="replace"),
                "seq": int.from_bytes(frames[1], "big"),
                "ts": batch.ts,
                "dp_rank": batch.data_parallel_rank,
                "events": msgspec.to_builtins(batch.events),
            }
            out(json.dumps(line))
            printed += 1
    finally:
        sub.close()
        ctx.term()
    return printed
