"""A live decoded view of a KV event stream (`uniradix events --listen`): subscribes to one
publisher and prints each batch as a JSON line `{"topic", "seq", "ts", "dp_rank",
"events"}`, whatever its wire shape, for debugging a deployment.

What the stream itself cannot say is reported on `warn` (stderr from the CLI), one line
each: a late join (the first batch seen is not seq 0: the publisher's earlier batches were
missed), a gap (seq skipped: batches lost, e.g. at the high-water mark), a publisher restart
(seq went back), and, at a timeout with nothing received, the likely bind / connect mix-up.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable

import msgspec
import zmq

from uniradix.events.endpoints import attach
from uniradix.events.wire import decode_batch


def _stderr(line: str) -> None:
    print(line, file=sys.stderr)


class SeqWatch:
    """Follows one publisher's sequence numbers; `see(seq)` returns the warning a batch
    with `seq` deserves, or None."""

    def __init__(self) -> None:
        self.next: int | None = None
        self.late_joins = self.gaps = self.restarts = 0

    def see(self, seq: int) -> str | None:
        expected, self.next = self.next, seq + 1
        if expected is None:
            if seq == 0:
                return None
            self.late_joins += 1
            return f"joined late: first batch is seq {seq}, batches 0..{seq - 1} were missed"
        if seq == expected:
            return None
        if seq > expected:
            self.gaps += 1
            return f"gap: seq {expected}..{seq - 1} missing ({seq - expected} batches lost)"
        self.restarts += 1
        return f"publisher restarted: seq went back from {expected - 1} to {seq}"


def listen(
    endpoint: str,
    topic: str = "",
    count: int | None = None,
    timeout_s: float | None = None,
    out: Callable[[str], None] = print,
    bind: bool = False,
    warn: Callable[[str], None] = _stderr,
) -> int:
    """Prints batches from `endpoint` until `count` were printed or `timeout_s` passed
    without one; returns how many were printed. Undecodable messages print an error line;
    late joins, gaps and restarts are told to `warn`. A bad or busy endpoint raises
    ValueError."""
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    sub.setsockopt(zmq.SUBSCRIBE, topic.encode())
    try:
        attach(sub, endpoint, bind)  # bind: the central mode, publishers connect to us
    except ValueError:
        ctx.destroy(linger=0)
        raise
    printed = 0
    watch = SeqWatch()
    try:
        last = time.monotonic()
        while count is None or printed < count:
            if not sub.poll(100):
                if timeout_s is not None and time.monotonic() - last > timeout_s:
                    if watch.next is None:
                        side = "connects to" if not bind else "binds"
                        warn(
                            f"no batch in {timeout_s:g} s: this listener {side} {endpoint}; "
                            "one side must bind (a publisher on tcp://*:PORT binds, on "
                            "tcp://HOST:PORT connects unless --kv-events-bind bind)"
                        )
                    break
                continue
            last = time.monotonic()
            frames = sub.recv_multipart()
            if len(frames) != 3:
                out(json.dumps({"error": f"expected 3 frames, got {len(frames)}"}))
                continue
            seq = int.from_bytes(frames[1], "big")
            note = watch.see(seq)
            if note is not None:
                warn(f"uniradix events: {note}")
            try:
                batch = decode_batch(frames[2])
            except ValueError as exc:
                out(json.dumps({"error": str(exc)}))
                continue
            line = {
                "topic": frames[0].decode(errors="replace"),
                "seq": seq,
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
