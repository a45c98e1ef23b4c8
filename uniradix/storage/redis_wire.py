"""A batch of Redis commands packed by hand and pipelined on one connection.

redis-py's pipeline builds a command object per key and packs every command, value
included, into a new buffer; for a batch of `SET`s of large pages (one copy of each page)
and for the many small commands of a cluster batch (Python work per key) that is most of
the cost. Here the commands of a batch are packed into protocol chunks once (a page's
payload is sent as it is: a bulk string may arrive in any number of pieces), sent on one
connection, and the replies read back in order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

import redis
from redis._parsers import hiredis as _hiredis

from uniradix.storage.page_format import Payload
from uniradix.storage.redis_deadline import wait_s

Reply = object
"""A parsed reply: the value, or the `redis.exceptions.ResponseError` the server answered."""


def _bulk(arg: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(arg), arg)


def _each(head: bytes, args: Sequence[bytes]) -> bytes:
    """`head` then the bulk string of an arg, for each arg: one `join` when every arg is as
    long as the first (page names are), no Python work per arg."""
    if not args:
        return b""
    lengths = set(map(len, args))
    if len(lengths) == 1:
        first = head + b"$%d\r\n" % lengths.pop()
        return first + (b"\r\n" + first).join(args) + b"\r\n"
    return b"".join(head + _bulk(arg) for arg in args)


def encode_names(names: Sequence[str]) -> list[bytes]:
    """Page names (ASCII, no newline) as bytes, in one encode."""
    return "\n".join(names).encode().split(b"\n") if names else []


def set_commands(
    names: Sequence[bytes],
    headers: Sequence[bytes],
    payloads: Sequence[Payload],
    ttl_ms: int | None,
) -> list[bytes | memoryview]:
    """`SET name header+payload [PX ttl_ms]` for each page in the Redis protocol, as chunks
    to send in order: the small parts between two payloads are joined, each payload is sent
    as it is."""
    expire = b"" if ttl_ms is None else _bulk(b"PX") + _bulk(str(ttl_ms).encode())
    count = b"*5\r\n" if ttl_ms is not None else b"*3\r\n"
    chunks: list[bytes | memoryview] = []
    pending = b""
    for name, header, payload in zip(names, headers, payloads, strict=True):
        view = memoryview(payload).cast("B")
        head = count + _bulk(b"SET") + _bulk(name) + b"$%d\r\n" % (len(header) + view.nbytes)
        chunks.append(pending + head + header)
        chunks.append(view)
        pending = b"\r\n" + expire
    chunks.append(pending)
    return chunks


def key_commands(command: bytes, names: Sequence[bytes]) -> list[bytes | memoryview]:
    """`COMMAND name` for each name (`GET`, `EXISTS`, `UNLINK`), as one chunk."""
    return [_each(b"*2\r\n" + _bulk(command), names)]


def multi_key_command(command: bytes, names: Sequence[bytes]) -> list[bytes | memoryview]:
    """`COMMAND name...` as one command (`MGET`, `EXISTS`; on a cluster, of one slot)."""
    return [b"*%d\r\n" % (1 + len(names)) + _bulk(command) + _each(b"", names)]


T = TypeVar("T")


def pick(items: Sequence[T], positions: Sequence[int]) -> Sequence[T]:
    """The items at `positions` of one batch: the batch itself when they are all of it, a
    slice for a run (a `range`, as a chain's pages come), else a new list."""
    if len(positions) == len(items):
        return items
    if isinstance(positions, range):
        return items[positions.start : positions.stop]
    return [items[i] for i in positions]


class MultiKeyCommands:
    """`COMMAND name...` for a part of one batch of names (a cluster slot's `MGET` or
    `EXISTS`). When every name has one length, the names are packed once for the batch and
    a run of them (a `range` of positions, as a chain's pages come) is a slice of that block:
    no join per slot."""

    def __init__(self, command: bytes, names: Sequence[bytes]) -> None:
        self.command, self.names = command, names
        self._head = _bulk(command)
        self._width = 0
        self._block = memoryview(b"")
        lengths = set(map(len, names))
        if len(lengths) == 1:
            first = b"$%d\r\n" % lengths.pop()
            block = first + (b"\r\n" + first).join(names) + b"\r\n"
            self._width, self._block = len(block) // len(names), memoryview(block)

    def __call__(self, positions: Sequence[int]) -> list[bytes | memoryview]:
        if self._width and isinstance(positions, range):
            start, stop, width = positions.start, positions.stop, self._width
            count = b"*%d\r\n" % (1 + stop - start)
            return [count + self._head, self._block[start * width : stop * width]]
        return multi_key_command(self.command, pick(self.names, positions))


def script_command(script: bytes, args: Sequence[bytes]) -> list[bytes | memoryview]:
    """`EVAL script 0 arg...`: a script given no keys, only arguments."""
    head = b"*%d\r\n" % (3 + len(args)) + _bulk(b"EVAL") + _bulk(script) + _bulk(b"0")
    return [head + _each(b"", args)]


# What redis-py's hiredis reader answers when no whole reply is buffered (hiredis's own
# default, False, in redis-py versions that do not set one).
_NOT_ENOUGH_DATA = getattr(_hiredis, "NOT_ENOUGH_DATA", False)

Sent = tuple[redis.ConnectionPool, redis.connection.Connection]
"""A connection whose commands were sent and whose replies are still to read (`receive`)."""


def send(client: redis.Redis, chunks: Sequence[bytes | memoryview]) -> Sent:
    """Sends the packed commands on a connection of `client`, which `receive` then reads and
    gives back. A lost connection or a timeout raises (the connection is dropped)."""
    pool = client.connection_pool
    conn = pool.get_connection()
    try:
        conn.send_packed_command(chunks)  # type: ignore[no-untyped-call]
    except BaseException:
        conn.disconnect()  # type: ignore[no-untyped-call]
        pool.release(conn)
        raise
    return pool, conn


def receive(sent: Sent, count: int) -> list[Reply]:
    """The `count` replies of the commands `send` sent, in order, and the connection back to
    its pool. A command the server refused (a full server, a cluster redirection) gives its
    `ResponseError` as the reply, and every reply is read, so the connection stays in step;
    a lost connection or a timeout raises (the connection is dropped, never reused
    half-read)."""
    pool, conn = sent
    try:
        return _read_replies(conn, count)
    except BaseException:
        conn.disconnect()  # type: ignore[no-untyped-call]
        raise
    finally:
        pool.release(conn)


def pipelined(client: redis.Redis, chunks: Sequence[bytes | memoryview], count: int) -> list[Reply]:
    """`send` then `receive`: one round trip for the whole batch."""
    return receive(send(client, chunks), count)


def _read_replies(conn: redis.connection.Connection, count: int) -> list[Reply]:
    """`count` replies, read with hiredis's reader straight from the socket when redis-py
    uses it: redis-py's `read_response` costs ~2 us of Python per reply, most of a batch of
    small pages' wall. An error reply comes back as the exception redis-py maps it to."""
    parser = getattr(conn, "_parser", None)
    reader = getattr(parser, "_reader", None)
    replies: list[Reply] = []
    if not isinstance(parser, _hiredis._HiredisParser) or reader is None:
        for _ in range(count):
            try:
                replies.append(conn.read_response())
            except redis.exceptions.ResponseError as exc:
                replies.append(exc)
        return replies
    add, gets, timeout = replies.append, reader.gets, conn.socket_timeout
    while len(replies) < count:
        reply = gets()
        if reply is _NOT_ENOUGH_DATA:  # no whole reply buffered yet
            _fill(parser, reader, timeout)
        elif isinstance(reply, redis.exceptions.ConnectionError):
            raise reply
        else:
            add(reply)
    return replies


def _fill(parser: _hiredis._HiredisParser, reader: Any, socket_timeout: float | None) -> None:
    """Reads what the socket has into hiredis's reader, waiting at most the time left to the
    call (`redis_deadline.wait_s`; outside a call, the socket timeout). Raises redis-py's
    `TimeoutError` when nothing came, its `ConnectionError` when the server closed the
    connection."""
    wait = wait_s(None)
    if wait is None:  # no deadline: redis-py's own read, with the socket timeout
        parser.read_from_socket()  # type: ignore[no-untyped-call]
        return
    sock, buffer = parser._sock, parser._buffer
    if sock is None:
        raise redis.exceptions.ConnectionError("Connection closed.")
    sock.settimeout(wait)
    try:
        num_bytes = sock.recv_into(buffer)
    except TimeoutError as exc:  # `socket.timeout`
        raise redis.exceptions.TimeoutError("Timeout reading from socket") from exc
    except OSError as exc:
        raise redis.exceptions.ConnectionError(f"Error reading from socket: {exc}") from exc
    finally:
        sock.settimeout(socket_timeout)
    if num_bytes == 0:
        raise redis.exceptions.ConnectionError("Connection closed by server.")
    reader.feed(buffer, 0, num_bytes)
