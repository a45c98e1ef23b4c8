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

import numpy as np
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


class NameBlock:
    """A batch's page names (ASCII, no line breaks), encoded once as the protocol's bulk
    strings (`$len\r\nname\r\n` each) in one `join` and one `encode`: encoding them one
    by one and packing each into a command was ~100 us of a 1,024-page lookup, a third of
    its wall on loopback. When every name has one length (a chain's storage keys do) the
    block is a grid: a run of names (a `range` of positions, as a chain's pages come) is a
    slice of it. Names of other lengths are packed one by one."""

    def __init__(self, text: Sequence[str]) -> None:
        self.text = text
        count, width = len(text), len(text[0]) if text else 0
        head = f"${width}\r\n"
        block = (head + ("\r\n" + head).join(text) + "\r\n").encode() if text else b""
        row = len(head) + width + 2
        self._names: list[bytes] | None = None
        self.grid: np.ndarray | None = None
        """The names as a (count, width) array of bytes, when they all have one length."""
        # Uniform: the line feeds that end each row's head and name where they would be
        # were every name as long as the first (no name holds a line break, so a longer or
        # shorter one would move them).
        if count and len(block) == row * count:
            rows = np.frombuffer(block, dtype=np.uint8).reshape(count, row)
            if (rows[:, len(head) - 1] == _LF).all() and (rows[:, row - 1] == _LF).all():
                self.grid = rows[:, len(head) : len(head) + width]
        uniform = self.grid is not None
        self._block: memoryview | None = memoryview(block) if uniform else None
        self._row = row if uniform else 0

    def __len__(self) -> int:
        return len(self.text)

    @property
    def names(self) -> list[bytes]:
        """Each name as bytes (encoded on first use)."""
        if self._names is None:
            self._names = encode_names(self.text)
        return self._names

    def subset(self, positions: Sequence[int]) -> NameBlock:
        return NameBlock([self.text[i] for i in positions])

    def bulk(self, positions: Sequence[int] | None = None) -> bytes | memoryview:
        """The bulk strings of the names at `positions` (None: all), in that order."""
        block, row = self._block, self._row
        if positions is None or len(positions) == len(self.text):
            if block is not None:
                return block
            positions = range(len(self.text))
        if block is not None and isinstance(positions, range):
            return block[positions.start * row : positions.stop * row]
        return _each(b"", pick(self.names, positions))

    def command(
        self, command: bytes, positions: Sequence[int] | None = None
    ) -> list[bytes | memoryview]:
        """`COMMAND name...` of the names at `positions` (None: all), as one command."""
        count = len(self.text) if positions is None else len(positions)
        return [b"*%d\r\n" % (1 + count) + _bulk(command), self.bulk(positions)]

    def commands(self, command: bytes, groups: Sequence[Sequence[int]]) -> list[bytes]:
        """`COMMAND name...` of each group's names (positions), one after another, as one
        chunk: a cluster master's multi-key commands, one per slot."""
        name = _bulk(command)
        parts: list[bytes | memoryview] = []
        for positions in groups:
            parts += (b"*%d\r\n%s" % (1 + len(positions), name), self.bulk(positions))
        return [b"".join(parts)]

    def key_commands(
        self, command: bytes, positions: Sequence[int] | None = None
    ) -> list[bytes | memoryview]:
        """`COMMAND name` for each name at `positions` (None: all): for the whole batch one
        `join` of the names, with no bytes of its own per name."""
        text = self.text
        if positions is not None and len(positions) != len(text):
            return key_commands(command, pick(self.names, positions))
        if self.grid is None or not text:
            return key_commands(command, self.names)
        head = f"*2\r\n${len(command)}\r\n{command.decode()}\r\n${len(text[0])}\r\n"
        return [(head + ("\r\n" + head).join(text) + "\r\n").encode()]


_LF = ord("\n")


def script_command(script: bytes, args: NameBlock) -> list[bytes | memoryview]:
    """`EVAL script 0 arg...`: a script given no keys, only arguments."""
    head = b"*%d\r\n" % (3 + len(args)) + _bulk(b"EVAL") + _bulk(script) + _bulk(b"0")
    return [head, args.bulk()]


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
