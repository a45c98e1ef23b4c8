"""A deadline per Redis call: no store call waits on a socket past its `timeout_s`.

A socket timeout alone bounds each wait, not the call: a batch whose replies trickle in
(a slow link, a server that stalls between replies) or a call that reconnects, or follows a
cluster redirection and refreshes the slot map, waits many times, each within the timeout.
Here `call_deadline(timeout_s)` starts a call's clock in the calling thread, and every socket
wait on a connection of `BoundedConnection` (connect, handshake, send, read: the backend's
own pipelines and redis-py's commands alike) waits at most the time left. A connection the
call opens (a first use, a reconnect) gets a budget of its own, the connect timeout, for its
connect and handshake, and the call's clock stops meanwhile: a call lasts at most its
timeout plus one connect timeout per connection it opens. Past the deadline the next wait
raises `DeadlinePassed` (a redis-py `TimeoutError`: the backend counts a store failure and
tells its breaker); a wait cut short by the deadline raises redis-py's own `TimeoutError`,
and the connection is dropped.

Large pages take time to move even on a healthy server (Redis copies a batch's values into
its output buffers before the first byte goes out), so a call's time grows with the bytes it
is known to move when it starts: a write's payloads, a read's expected page size times its
pages, at `BYTES_PER_S`. Outside a `call_deadline` the connections behave as redis-py's own.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import redis
from redis._parsers import _HiredisParser
from redis.connection import Connection, DefaultParser, SSLConnection
from redis.utils import SENTINEL

BYTES_PER_S = 20e6
"""The slowest transfer a call is allowed (its deadline grows by 1 s per 20 MB it moves): a
sixth or less of what one loopback Redis served 2 MiB pages at on 2 busy cores (0.12-0.23
GB/s read, `benchmarks/results/storage.md`), so only a stalled server meets it."""
_SEND_GROUP = 1 << 20  # bytes sent per socket wait (the wait is re-armed with the time left)

_local = threading.local()


class DeadlinePassed(redis.exceptions.TimeoutError):
    """A Redis call's deadline passed before a socket wait began."""


@contextmanager
def call_deadline(timeout_s: float, num_bytes: int = 0) -> Iterator[None]:
    """Bounds the socket waits of this thread's Redis calls inside the block by `timeout_s`
    from now, plus the time of `num_bytes` to move. A nested block keeps the outer deadline
    (one call, one clock)."""
    if getattr(_local, "at", None) is not None:
        yield
        return
    _local.at = time.monotonic() + timeout_s + num_bytes / BYTES_PER_S
    try:
        yield
    finally:
        _local.at = None


@contextmanager
def outside_deadline() -> Iterator[None]:
    """Suspends this thread's deadline inside the block (its socket waits have their own
    timeouts): for one-time set-up inside a call, such as building a Cluster client."""
    at = getattr(_local, "at", None)
    _local.at = None
    try:
        yield
    finally:
        _local.at = at


def wait_s(cap: float | None) -> float | None:
    """How long the next socket wait may last: the time left, at most `cap` (the socket
    timeout); None outside a deadline (the socket's own timeout). Raises `DeadlinePassed`
    once the time is up."""
    at: float | None = getattr(_local, "at", None)
    if at is None:
        return None
    left = at - time.monotonic()
    if left <= 0:
        raise DeadlinePassed(f"Redis call past its deadline by {-left:.3f} s")
    return left if cap is None else min(left, cap)


class _Bounded:
    """Mixed into redis-py's connection classes: every socket wait inside a `call_deadline`
    uses the time left. redis-py calls these methods for its own commands too (the
    handshake, `EXISTS`, the cluster's slot map), so they are bounded as well."""

    socket_timeout: float | None
    socket_connect_timeout: float | None
    _sock: Any

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if kwargs.get("parser_class", DefaultParser) is _HiredisParser:
            kwargs["parser_class"] = _BoundedHiredisParser
        super().__init__(*args, **kwargs)

    def connect(self) -> None:
        # A connection opened inside a call (a first use, a reconnect) has a budget of its own,
        # the connect timeout, for its connect and handshake; the call's clock stops meanwhile.
        at = getattr(_local, "at", None)
        budget = self.socket_connect_timeout or self.socket_timeout
        if at is None or self._sock is not None or not budget:
            super().connect()  # type: ignore[misc]
            return
        start = time.monotonic()
        _local.at = start + budget
        try:
            super().connect()  # type: ignore[misc]
        finally:
            _local.at = at + (time.monotonic() - start)

    def _connect(self) -> Any:
        wait = wait_s(self.socket_connect_timeout)
        if wait is None:
            return super()._connect()  # type: ignore[misc]
        configured = self.socket_connect_timeout
        self.socket_connect_timeout = wait
        try:
            return super()._connect()  # type: ignore[misc]
        finally:
            self.socket_connect_timeout = configured

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        if getattr(_local, "at", None) is None:
            super().send_packed_command(command, check_health)  # type: ignore[misc]
            return
        if self._sock is None:
            self.connect()  # its own budget (`connect`)
        chunks: Sequence[Any] = [command] if isinstance(command, (bytes, str)) else command
        # Sent in groups of about `_SEND_GROUP` bytes, each with the time then left: one
        # timeout for the whole of a large batch would let it run past the deadline.
        start, size = 0, 0
        for end, chunk in enumerate(chunks, 1):
            size += len(chunk)
            if size >= _SEND_GROUP or end == len(chunks):
                self._arm(wait_s(None))
                try:
                    super().send_packed_command(chunks[start:end], check_health)  # type: ignore[misc]
                finally:
                    self._arm(self.socket_timeout)
                start, size, check_health = end, 0, False

    def _arm(self, wait: float | None) -> None:
        if self._sock is not None:
            self._sock.settimeout(wait)


class _BoundedHiredisParser(_HiredisParser):
    """redis-py's hiredis parser whose blocking socket reads (redis-py's own commands: the
    handshake, `EXISTS`, the slot map) each wait at most the time left to the call: a reply
    that arrives in many pieces cannot outlast the deadline. (Without hiredis, redis-py's
    Python parser bounds each wait by the socket timeout instead.)"""

    def read_from_socket(self, timeout: Any = SENTINEL, raise_on_timeout: bool = True) -> Any:
        if timeout is SENTINEL:
            wait = wait_s(None)
            if wait is not None:
                timeout = wait
        return super().read_from_socket(timeout, raise_on_timeout)  # type: ignore[no-untyped-call]


class BoundedConnection(_Bounded, Connection):
    """A TCP connection whose waits keep to the calling thread's deadline."""


class BoundedSSLConnection(_Bounded, SSLConnection):
    """A TLS connection whose waits keep to the calling thread's deadline."""
