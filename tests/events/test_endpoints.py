"""Endpoints: bind vs connect is explicit (`--kv-events-bind`, the `auto` rule documented), the
listener reports late joins, gaps and publisher restarts, and a bad, busy or malformed
endpoint ends in one line with exit status 2."""

from __future__ import annotations

import re
import socket
import threading

import pytest
import zmq

from tests.events.zmq_helpers import WAIT_MS
from uniradix.cli import main
from uniradix.events import AllBlocksCleared, KVEventsConfig, ZmqEventPublisher, encode_batch
from uniradix.events.endpoints import attach, auto_binds, bind_flag, check_endpoint
from uniradix.events.listen import SeqWatch, listen


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def _payload() -> bytes:
    return encode_batch([AllBlocksCleared()], 1.0, 0)


@pytest.mark.parametrize(
    ("endpoint", "binds"),
    [
        ("tcp://*:5557", True),
        ("tcp://[::]:5557", True),
        ("ipc:///tmp/kv", True),
        ("inproc://kv", True),
        ("tcp://127.0.0.1:5557", False),
        ("tcp://router.local:5557", False),
    ],
)
def test_auto_rule_binds_wildcards_and_local_transports(endpoint: str, binds: bool) -> None:
    assert auto_binds(endpoint) is binds
    assert KVEventsConfig(endpoint=endpoint).binds(endpoint) is binds
    assert KVEventsConfig(endpoint=endpoint, bind=bind_flag("connect")).binds(endpoint) is False


@pytest.mark.parametrize(
    ("endpoint", "bind", "message"),
    [
        ("127.0.0.1:5557", True, "must start with one of"),
        ("tcp://127.0.0.1", False, "is not tcp://HOST:PORT"),
        ("tcp://127.0.0.1:*", False, "a port '*' can only be bound"),
        ("tcp://*:5557", False, "host '*' can only be bound"),
        ("tcp://127.0.0.1:70000", True, "port 70000 outside 1..65535"),
        ("ipc://", True, "names no address"),
    ],
)
def test_malformed_endpoints_are_refused_naming_them(
    endpoint: str, bind: bool, message: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(message)) as info:
        check_endpoint(endpoint, bind)
    assert repr(endpoint) in str(info.value)


def test_unknown_bind_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown bind mode 'both'"):
        bind_flag("both")


def test_explicit_bind_on_a_plain_host_delivers_to_a_connecting_listener() -> None:
    """`tcp://127.0.0.1:P` on both sides delivers nothing under `auto` (both connect);
    `bind=True` on the publisher makes it work."""
    endpoint = f"tcp://127.0.0.1:{_free_port()}"
    publisher = ZmqEventPublisher(KVEventsConfig(endpoint=endpoint, bind=True, sender="inline"))
    lines: list[str] = []
    warnings: list[str] = []
    listener = threading.Thread(
        target=listen,
        args=(endpoint,),
        kwargs={"count": 1, "timeout_s": WAIT_MS / 1000, "out": lines.append,
                "warn": warnings.append},
    )  # fmt: skip
    listener.start()
    try:
        while listener.is_alive() and not lines:
            publisher.publish([AllBlocksCleared()])  # PUB drops until the SUB is connected
            listener.join(0.05)
    finally:
        listener.join(WAIT_MS / 1000)
        publisher.close()
    assert len(lines) == 1 and '"AllBlocksCleared"' in lines[0]
    assert any("joined late" in w for w in warnings) or '"seq": 0' in lines[0]


def test_busy_endpoint_raises_one_line_value_error() -> None:
    ctx = zmq.Context()
    holder = ctx.socket(zmq.PUB)
    port = holder.bind_to_random_port("tcp://127.0.0.1")
    try:
        with pytest.raises(ValueError, match=r"cannot bind .*another process holds it") as info:
            ZmqEventPublisher(KVEventsConfig(endpoint=f"tcp://127.0.0.1:{port}", bind=True))
        assert "\n" not in str(info.value)
        sock = ctx.socket(zmq.SUB)
        with pytest.raises(ValueError, match="cannot bind"):
            attach(sock, f"tcp://127.0.0.1:{port}", True)
        sock.close()
    finally:
        holder.close()
        ctx.term()


def test_seq_watch_reports_late_join_gap_and_restart() -> None:
    watch = SeqWatch()
    notes = [watch.see(s) for s in (5, 6, 9, 10, 0, 1)]
    assert notes[0] is not None and "joined late" in notes[0] and "0..4" in notes[0]
    assert notes[1] is None and notes[3] is None and notes[5] is None
    assert notes[2] is not None and "seq 7..8 missing (2 batches lost)" in notes[2]
    assert notes[4] is not None and "restarted" in notes[4]
    assert (watch.late_joins, watch.gaps, watch.restarts) == (1, 1, 1)


def test_listener_warns_on_gaps_and_restarts_from_a_live_publisher() -> None:
    ctx = zmq.Context()
    pub = ctx.socket(zmq.PUB)
    port = pub.bind_to_random_port("tcp://127.0.0.1")
    lines: list[str] = []
    warnings: list[str] = []
    listener = threading.Thread(
        target=listen,
        args=(f"tcp://127.0.0.1:{port}",),
        kwargs={"timeout_s": 1.0, "out": lines.append, "warn": warnings.append},
    )  # fmt: skip
    listener.start()
    try:
        probe = 100
        while listener.is_alive() and not lines:  # seq 100+: a late join once one lands
            pub.send_multipart((b"", probe.to_bytes(8, "big"), _payload()))
            probe += 1
            listener.join(0.05)
        for seq in (probe + 3, 0, 1):  # a gap, then a restart
            pub.send_multipart((b"", seq.to_bytes(8, "big"), _payload()))
        listener.join(WAIT_MS / 1000)  # ends 1 s after the last batch
    finally:
        pub.close()
        ctx.term()
    assert len(lines) >= 4
    kinds = [w.split(": ")[1] for w in warnings]
    assert len(kinds) == 3 and kinds[0].startswith("joined late")
    assert kinds[1].startswith("gap") and kinds[2].startswith("publisher restarted")


def test_listener_timeout_without_batches_names_the_bind_rule() -> None:
    warnings: list[str] = []
    endpoint = f"tcp://127.0.0.1:{_free_port()}"
    assert listen(endpoint, timeout_s=0.2, out=lambda _: None, warn=warnings.append) == 0
    assert len(warnings) == 1 and "one side must bind" in warnings[0]


def test_cli_bad_endpoints_exit_2_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["replay", "--max-requests", "5", "--config", "full", "--no-progress"]
    assert main([*argv, "--kv-events", "localhost:5557"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "must start with one of" in err
    assert main(["events", "--listen", "tcp://127.0.0.1:*", "--timeout", "0.1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "a port '*' can only be bound" in err
    with pytest.raises(SystemExit) as info:
        main([*argv, "--kv-events", "tcp://*:1", "--kv-events-bind", "maybe"])
    assert info.value.code == 2
    assert "invalid choice: 'maybe'" in capsys.readouterr().err


def test_cli_busy_endpoint_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    ctx = zmq.Context()
    holder = ctx.socket(zmq.PUB)
    port = holder.bind_to_random_port("tcp://127.0.0.1")
    try:
        argv = ["replay", "--max-requests", "5", "--config", "full", "--no-progress"]
        busy = ["--kv-events", f"tcp://127.0.0.1:{port}", "--kv-events-bind", "bind"]
        assert main([*argv, *busy]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "cannot bind" in err
    finally:
        holder.close()
        ctx.term()
