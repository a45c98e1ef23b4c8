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

import redis

from uniradix.storage.page_format import Payload

Reply = object
"""A parsed reply: the value, or the `redis.exceptions.ResponseError` the server answered."""


def _bulk(arg: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(arg), arg)


def set_commands(
    names: Sequence[str], headers: Sequence[bytes], payloads: Sequence[Payload], ttl_ms: int | None
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
        head = (
            count + _bulk(b"SET") + _bulk(name.encode()) + b"$%d\r\n" % (len(header) + view.nbytes)
        )
        chunks.append(pending + head + header)
        chunks.append(view)
        pending = b"\r\n" + expire
    chunks.append(pending)
    return chunks


def key_commands(command: bytes, names: Sequence[str]) -> list[bytes | memoryview]:
    """`COMMAND name` for each name (`GET`, `EXISTS`, `UNLINK`), as one chunk."""
    head = b"*2\r\n" + _bulk(command)
    return [b"".join(head + _bulk(name.encode()) for name in names)]


def script_command(script: bytes, args: Sequence[str]) -> list[bytes | memoryview]:
    """`EVAL script 0 arg...`: a script given no keys, only arguments."""
    parts = [b"EVAL", script, b"0", *(a.encode() for a in args)]
    return [b"*%d\r\n" % len(parts) + b"".join(_bulk(p) for p in parts)]


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
        replies: list[Reply] = []
        for _ in range(count):
            try:
                replies.append(conn.read_response())
            except redis.exceptions.ResponseError as exc:
                replies.append(exc)
        return replies
    except BaseException:
        conn.disconnect()  # type: ignore[no-untyped-call]
        raise
    finally:
        pool.release(conn)


def pipelined(client: redis.Redis, chunks: Sequence[bytes | memoryview], count: int) -> list[Reply]:
    """`send` then `receive`: one round trip for the whole batch."""
    return receive(send(client, chunks), count)
