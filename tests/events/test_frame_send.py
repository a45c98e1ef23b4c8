"""Frames sent with the GIL held (`uniradix.events.frame_send`) reach a subscriber exactly as
pyzmq's own sends do, a failed send raises, and a publisher without direct access to libzmq
sends through pyzmq."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import zmq

from tests.events.zmq_helpers import WAIT_MS
from uniradix.events import (
    AllBlocksCleared,
    BlockRemoved,
    KVEventsConfig,
    ZmqEventPublisher,
    frame_send,
    publisher,
)
from uniradix.events.frame_send import FrameSender, frame_sender
from uniradix.events.wire import decode_batch


def _subscribed(ctx: zmq.Context[zmq.Socket[bytes]], endpoint: str) -> zmq.Socket[bytes]:
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.connect(endpoint)
    return sub


def _receive(sub: zmq.Socket[bytes], send: object, probe: list[bytes]) -> list[bytes]:
    """Sends `probe` until the slow-joining subscriber gets one, then returns it."""
    deadline = time.monotonic() + WAIT_MS / 1000
    while time.monotonic() < deadline:
        send(probe)  # type: ignore[operator]
        if sub.poll(50):
            return sub.recv_multipart()
    raise AssertionError("the subscriber received nothing")


def test_frames_sent_with_the_gil_held_arrive_whole() -> None:
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    pub = ctx.socket(zmq.PUB)
    pub.setsockopt(zmq.LINGER, 0)
    pub.bind("tcp://127.0.0.1:*")
    sub = _subscribed(ctx, bytes(pub.getsockopt(zmq.LAST_ENDPOINT)).decode())
    try:
        sender = frame_sender(pub)
        assert sender is not None  # Linux with pyzmq's libzmq: the direct path is taken
        assert _receive(sub, sender.send, [b"probe"]) == [b"probe"]
        while sub.poll(100):  # probes sent before the subscriber had joined
            sub.recv_multipart()
        messages = [[b"topic", (7).to_bytes(8, "big"), bytes(range(256)) * 40], [b"", b"x"]]
        for frames in messages:
            sender.send(frames)
        for frames in messages:
            assert sub.poll(WAIT_MS)
            assert sub.recv_multipart() == frames
    finally:
        sub.close()
        pub.close()
        ctx.term()


def test_a_failed_send_raises_the_zmq_error() -> None:
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    req = ctx.socket(zmq.REQ)
    req.setsockopt(zmq.LINGER, 0)
    req.connect("tcp://127.0.0.1:1")  # nobody answers: a second request breaks REQ's order
    try:
        sender = frame_sender(req)
        assert sender is not None
        sender.send([b"first"])
        with pytest.raises(zmq.ZMQError) as error:
            sender.send([b"second"])
        assert error.value.errno == zmq.EFSM
    finally:
        req.close()
        ctx.term()


def test_without_a_mapped_libzmq_there_is_no_frame_sender(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    maps = tmp_path / "maps"
    maps.write_text("7f00-7f01 r-xp 00000000 00:00 0    /usr/lib/libc.so.6\n")
    monkeypatch.setattr(frame_send, "_MAPS", maps)
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    sock = ctx.socket(zmq.PUB)
    try:
        assert frame_sender(sock) is None
        with pytest.raises(OSError):
            FrameSender(sock, str(tmp_path / "libzmq-missing.so"))
    finally:
        sock.close()
        ctx.term()


@pytest.mark.parametrize("direct", [True, False])
def test_the_publisher_sends_the_same_frames_either_way(
    monkeypatch: pytest.MonkeyPatch, direct: bool
) -> None:
    if not direct:
        monkeypatch.setattr(publisher, "frame_sender", lambda sock: None)
    pub = ZmqEventPublisher(KVEventsConfig(endpoint="tcp://127.0.0.1:*", topic="kv"))
    assert (pub._frames is not None) is direct
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    sub = _subscribed(ctx, pub.endpoint)
    try:
        first = _receive(sub, pub.publish, [AllBlocksCleared()])
        assert first[0] == b"kv" and decode_batch(first[2]).events == [AllBlocksCleared()]
        seq = int.from_bytes(first[1], "big")
        removed = BlockRemoved([5, -9], "GPU")
        pub.publish([removed])
        while True:  # probes queued before the first one arrived, then the batch
            assert sub.poll(WAIT_MS)
            topic, seq_bytes, payload = sub.recv_multipart()
            assert topic == b"kv" and int.from_bytes(seq_bytes, "big") == seq + 1
            seq += 1
            events = decode_batch(payload).events
            if events != [AllBlocksCleared()]:
                break
        assert events == [removed]
    finally:
        sub.close()
        pub.close()
        ctx.term()


def test_a_library_that_does_not_own_the_socket_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    sock = ctx.socket(zmq.PUB)
    try:
        assert frame_sender(sock) is not None
        monkeypatch.setattr(frame_send, "_socket_type", lambda lib, handle: None)
        assert frame_sender(sock) is None  # ENOTSOCK from the library: pyzmq sends instead
    finally:
        sock.close()
        ctx.term()
