"""`redis://host:port/db`, `rediss://` (TLS) and `redis+cluster://host:port`: L3 shared
across instances. A password goes in the URL (`redis://:password@host:6379/0`, or
`redis://user:password@host` with Redis ACLs).

One Redis key per page (its `PageKey.name`) holding one string, the 72-byte header followed
by the payload, written by one `SET`: a page is written and replaced atomically, and a reader
(`GET`) gets a whole page or nothing (joining header and payload costs less than a two-field
`HSET`: `python -m benchmarks.storage`). Batches are one
non-transactional pipeline, parsed by hiredis (redis-py picks it when installed). A key
holding anything else (another type, a short value) is a rejected page, not a store
failure. Options:

- `ttl_s`: expire each page after this many seconds (`SET ... PX`, so `volatile-*` eviction
  policies can reclaim pages); without it pages live until evicted or deleted;
- `timeout_s` (default 0.5): socket connect and read timeout. redis-py's own retries are
  off, so a dead server costs one bounded timeout per call until the breaker opens;
- `breaker_failures`, `breaker_cooldown_s`: the circuit breaker.

A server with `maxmemory` and an `allkeys-*` / `volatile-*` policy may drop any page: that
page is then a plain miss. Under `noeviction` a full server refuses writes: the batch's
stored prefix ends there, and backups pause for a while (`StorageBackend.writable`). Keys
are spread over Redis Cluster slots by their full name, so a cluster balances pages across
shards; `clear()` removes only `ur1.*` keys.
"""

from __future__ import annotations

import threading
from urllib.parse import unquote, urlsplit

import redis
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.retry import Retry

from uniradix.hashing.storage_keys import KEY_PREFIX
from uniradix.storage.backend import (
    BREAKER_OPTIONS,
    StorageBackend,
    StoredPage,
    breaker_from_options,
    register_backend,
    url_options,
)
from uniradix.storage.breaker import CircuitBreaker
from uniradix.storage.page_format import Payload

_CLEAR_CHUNK = 1000
_FOREIGN = b""  # a key that is not a page: rejected as SHORT by the page format

Client = redis.Redis | RedisCluster


class RedisBackend(StorageBackend):
    """Pages in a Redis server or cluster. `connect` builds the client on first use (a
    cluster client contacts the cluster when built: a cluster that is down then is a
    counted failure, not an exception at construction)."""

    transient_errors = (
        redis.exceptions.RedisError,
        redis.exceptions.RedisClusterException,
        OSError,
    )

    def __init__(
        self,
        connect: type[Client] | None = None,
        *,
        client_kwargs: dict[str, object] | None = None,
        client: Client | None = None,
        ttl_s: float | None = None,
        breaker: CircuitBreaker | None = None,
    ) -> None:
        super().__init__(breaker)
        if ttl_s is not None and ttl_s <= 0:
            raise ValueError(f"ttl_s must be > 0 or None, got {ttl_s}")
        if (client is None) == (connect is None):
            raise TypeError("RedisBackend takes either a client or a client class to connect")
        self.ttl_ms = None if ttl_s is None else max(1, int(ttl_s * 1000))
        self._client_obj = client
        self._connect = connect
        self._client_kwargs = client_kwargs or {}
        self._connect_lock = threading.Lock()

    @property
    def client(self) -> Client:
        if self._client_obj is None:
            with self._connect_lock:
                if self._client_obj is None:
                    assert self._connect is not None
                    self._client_obj = self._connect(**self._client_kwargs)  # type: ignore[arg-type]
        return self._client_obj

    def _store_exists_prefix(self, names: list[str]) -> int:
        # One multi-key EXISTS answers "is the whole run stored?" (the usual case); otherwise
        # bisect on the count: log2(n) round trips, no per-key command objects (a pipelined
        # EXISTS per key spent most of its time building commands in Python).
        client = self.client
        if client.exists(*names) == len(names):
            return len(names)
        lo, hi = 0, len(names) - 1  # the stored prefix is in [lo, hi]
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if client.exists(*names[lo:mid]) == mid - lo:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def _store_get(self, names: list[str]) -> list[StoredPage | None]:
        pipe = self.client.pipeline(transaction=False)
        for name in names:
            pipe.get(name)
        out: list[StoredPage | None] = []
        # Per-command errors (WRONGTYPE: a key that is not ours) come back as values; a lost
        # connection still raises from `execute`.
        for reply in pipe.execute(raise_on_error=False):
            out.append(_FOREIGN if isinstance(reply, Exception) else reply)
        return out

    def _store_set(self, names: list[str], headers: list[bytes], payloads: list[Payload]) -> int:
        client = self.client
        if isinstance(client, redis.Redis):
            return self._send_sets(client, names, headers, payloads)
        pipe = client.pipeline(transaction=False)  # type: ignore[no-untyped-call]  # per shard
        for name, header, payload in zip(names, headers, payloads, strict=True):
            pipe.set(name, b"".join((header, payload)), px=self.ttl_ms)
        # A refused write (a full server under `noeviction`) ends the stored prefix without
        # counting as a store failure: the server is up, the breaker stays closed. A lost
        # connection raises from `execute` instead.
        for i, result in enumerate(pipe.execute(raise_on_error=False)):
            if isinstance(result, Exception):
                self._note_refusal(str(result).splitlines()[0])
                return i
        return len(names)

    def _send_sets(
        self, client: redis.Redis, names: list[str], headers: list[bytes], payloads: list[Payload]
    ) -> int:
        """The batch's `SET`s, pipelined on one connection, each value sent as header then
        payload (`set_commands`): no joined copy of the payload is made."""
        pool = client.connection_pool
        conn = pool.get_connection()
        try:
            commands = set_commands(names, headers, payloads, self.ttl_ms)
            conn.send_packed_command(commands)  # type: ignore[no-untyped-call]
            stored, refusal = len(names), ""
            for i in range(len(names)):  # read every reply: the connection stays in step
                try:
                    conn.read_response()
                except redis.exceptions.ResponseError as exc:  # refused (a full server)
                    stored, refusal = min(stored, i), refusal or str(exc).splitlines()[0]
            if refusal:
                self._note_refusal(refusal)
            return stored
        except BaseException:
            conn.disconnect()  # type: ignore[no-untyped-call]  # not half-read next time
            raise
        finally:
            pool.release(conn)

    def _store_delete(self, names: list[str]) -> int:
        pipe = self.client.pipeline(transaction=False)
        for name in names:
            pipe.unlink(name)
        return sum(int(n) for n in pipe.execute())

    def _store_clear(self) -> None:
        client = self.client
        batch: list[str] = []
        for name in client.scan_iter(match=f"{KEY_PREFIX}.*", count=_CLEAR_CHUNK):
            batch.append(name)
            if len(batch) == _CLEAR_CHUNK:
                self._store_delete(batch)
                batch = []
        if batch:
            self._store_delete(batch)

    def _store_close(self) -> None:
        if self._client_obj is not None:
            self._client_obj.close()


def _bulk(arg: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(arg), arg)


def set_commands(
    names: list[str], headers: list[bytes], payloads: list[Payload], ttl_ms: int | None
) -> list[bytes | memoryview]:
    """`SET name header+payload [PX ttl_ms]` for each page in the Redis protocol, as chunks
    to send in order: the small parts between two payloads are joined, each payload is sent
    as it is (a bulk string may arrive in any number of pieces)."""
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


def _client_kwargs(url: str, options: dict[str, str], cluster: bool) -> dict[str, object]:
    parts = urlsplit(url)
    timeout_s = float(options.get("timeout_s", "0.5"))
    kwargs: dict[str, object] = {
        "host": parts.hostname or "127.0.0.1",
        "port": parts.port or 6379,
        "socket_timeout": timeout_s,
        "socket_connect_timeout": timeout_s,
        "retry": Retry(NoBackoff(), 0),
    }
    if parts.username:
        kwargs["username"] = unquote(parts.username)
    if parts.password:
        kwargs["password"] = unquote(parts.password)
    if parts.scheme.lower() == "rediss":
        kwargs["ssl"] = True
    db = parts.path.strip("/")
    if db and cluster:
        raise ValueError(f"Redis Cluster has only database 0; remove /{db} from {url!r}")
    if db:
        if not db.isdigit():
            raise ValueError(f"Redis database must be a number, got {db!r} in {url!r}")
        kwargs["db"] = int(db)
    return kwargs


def _from_url(url: str) -> RedisBackend:
    options = url_options(url, {"ttl_s", "timeout_s"} | BREAKER_OPTIONS)
    cluster = url.lower().startswith("redis+cluster://")
    ttl = options.get("ttl_s")
    return RedisBackend(
        RedisCluster if cluster else redis.Redis,
        client_kwargs=_client_kwargs(url, options, cluster),
        ttl_s=float(ttl) if ttl else None,
        breaker=breaker_from_options(options),
    )


register_backend("redis", _from_url)
register_backend("rediss", _from_url)
register_backend("redis+cluster", _from_url)
