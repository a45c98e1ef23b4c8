"""`redis://host:port/db`, `rediss://` (TLS) and `redis+cluster://host:port`: L3 shared
across instances. A password goes in the URL (`redis://:password@host:6379/0`, or
`redis://user:password@host` with Redis ACLs).

One Redis key per page (its `PageKey.name`) holding one string, the 72-byte header followed
by the payload, written by one `SET`: a page is written and replaced atomically, and a reader
(`GET`) gets a whole page or nothing (joining header and payload costs less than a two-field
`HSET`: `python -m benchmarks.storage`). Batches are one non-transactional pipeline packed
by hand (`redis_wire`), parsed by hiredis (redis-py picks it when installed). A key holding
anything else (another type, a short value) is a rejected page, not a store failure.
Options:

- `ttl_s`: expire each page after this many seconds (`SET ... PX`, so `volatile-*` eviction
  policies can reclaim pages); without it pages live until evicted or deleted;
- `timeout_s` (default 0.5): each call's deadline (`redis_deadline`: every socket wait of
  the call, connect and reconnect included, waits at most the time left; large pages earn
  their transfer time). redis-py's own retries are off, so a dead or stalled server costs
  one bounded timeout per call until the breaker opens;
- `breaker_failures`, `breaker_cooldown_s`: the circuit breaker.

A server with `maxmemory` and an `allkeys-*` / `volatile-*` policy may drop any page: that
page is then a plain miss. Under `noeviction` a full server refuses writes: the batch's
stored prefix ends there, and backups pause for a while (`StorageBackend.writable`). On
a Redis Cluster a page's slot is its name's hash tag: the pages of a chain share one per
group of 64 (`uniradix.hashing.storage_keys`), so a lookup is one `MGET` / `EXISTS` per
slot, while chains and groups spread over the shards; a cluster batch is split by master
and sent to every master at once (`redis_cluster`). `clear()` removes only `ur<digit>.*`
keys (pages of this key format and of earlier ones).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from urllib.parse import unquote, urlsplit

import redis
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.connection import Connection, SSLConnection
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
from uniradix.storage.redis_cluster import NODE_LOST, REDIRECTED, ClusterBatches, Packer
from uniradix.storage.redis_deadline import (
    BoundedConnection,
    BoundedSSLConnection,
    call_deadline,
    outside_deadline,
)
from uniradix.storage.redis_wire import (
    NameBlock,
    Reply,
    pick,
    pipelined,
    script_command,
    set_commands,
)

_CLEAR_CHUNK = 1000
_CLEAR_MATCH = KEY_PREFIX.rstrip("0123456789") + "[0-9].*"  # this key format's and earlier
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
        timeout_s: float | None = None,
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
        # Each store call's deadline (`redis_deadline`): by default the socket timeout.
        self.timeout_s = (
            timeout_s if timeout_s is not None else _socket_timeout(client, client_kwargs)
        )
        if self.timeout_s is not None and not self.timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0 or None, got {self.timeout_s}")
        self._connect_lock = threading.Lock()
        self._batches: ClusterBatches | None = None
        self._exists_script: bool | None = None  # does the server run `_EXISTS_PREFIX`?

    @property
    def client(self) -> Client:
        if self._client_obj is None:
            with self._connect_lock:
                if self._client_obj is None:
                    assert self._connect is not None
                    # Built once per store (a Cluster client reads the slot map and the
                    # command table: ~1 s under load), bounded per socket wait only.
                    with outside_deadline():
                        client = self._connect(**self._client_kwargs)  # type: ignore[arg-type]
                    _bound_waits(client)
                    self._client_obj = client
        return self._client_obj

    @property
    def _cluster(self) -> ClusterBatches | None:
        """The batch runner of a cluster client (None for one server)."""
        client = self.client
        if isinstance(client, redis.Redis):
            return None
        if self._batches is None:
            with self._connect_lock:
                if self._batches is None:
                    self._batches = ClusterBatches(client)
        return self._batches

    def _deadline(self, num_bytes: int = 0) -> AbstractContextManager[None]:
        """The clock of one store call (`redis_deadline`): `timeout_s` and the bytes' time."""
        if self.timeout_s is None:
            return nullcontext()
        return call_deadline(self.timeout_s, num_bytes)

    def _store_exists_prefix(self, names: list[str]) -> int:
        with self._deadline():
            return self._exists_prefix(names)

    def _exists_prefix(self, names: list[str]) -> int:
        cluster = self._cluster
        if cluster is not None:
            return self._cluster_exists_prefix(cluster, names)
        # One multi-key EXISTS answers "is the whole run stored?" (the usual case); otherwise
        # the prefix script finds where it stops: two round trips in all, so the call is
        # bounded by two timeouts. A server without scripts (Redis < 7) bisects on the count
        # instead: log2(n) round trips.
        client = self.client
        assert isinstance(client, redis.Redis)  # no cluster runner: one server
        encoded = NameBlock(names)  # packed by hand: redis-py encodes each name in Python
        stored = pipelined(client, encoded.command(b"EXISTS"), 1)[0]
        if isinstance(stored, Exception):  # an error reply (NOAUTH, ...): a store failure
            raise stored
        if stored == len(names):
            return len(names)
        if self._exists_script is not False:
            script = script_command(_EXISTS_PREFIX, encoded)
            reply = pipelined(client, script, 1)[0]
            if isinstance(reply, int):
                self._exists_script = True
                return reply
            self._exists_script = self._exists_script or False  # never worked: not again
        lo, hi = 0, len(names) - 1  # the stored prefix is in [lo, hi]
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if client.exists(*names[lo:mid]) == mid - lo:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def _cluster_exists_prefix(self, cluster: ClusterBatches, text_names: list[str]) -> int:
        # A multi-key EXISTS must stay in one slot: one per slot, all sent at once (a
        # chain's pages share a tag per group, so a few slots), answers "is the whole run
        # stored?" (the usual case). Where a slot's pages are only partly stored, the pages
        # of such slots before the first surely absent one are asked one by one: two round
        # trips in all, as on one server.
        names = NameBlock(text_names)
        master = cluster.one_slot_master(text_names)
        if master is not None:  # one slot (a group of a chain's pages): one command
            try:
                stored = pipelined(master, names.command(b"EXISTS"), 1)[0]
            except NODE_LOST:
                stored = None  # the batch runner below refreshes the map and retries
            if stored == len(names) or stored == 0:
                return int(stored)
            # Partly stored, a redirection or a lost master: the general path below.
        absent = len(names)  # the first page surely not stored (none: the batch's end)
        partly: list[Sequence[int]] = []
        for pages, stored in cluster.run_slots(names, b"EXISTS"):
            if stored != len(pages):
                if isinstance(stored, int) and stored > 0:
                    partly.append(pages)
                else:  # none stored, or an error reply (still redirected): a miss from here
                    absent = min(absent, pages[0])
        if not partly:
            return absent
        asked = sorted(i for pages in partly for i in pages if i < absent)
        sub = names.subset(asked)
        replies = cluster.run(sub, lambda idx: sub.key_commands(b"EXISTS", idx))
        return next((i for i, n in zip(asked, replies, strict=True) if n != 1), absent)

    def _store_get(self, text_names: list[str]) -> list[StoredPage | None]:
        names = NameBlock(text_names)
        replies: list[Reply] = [None] * len(names)
        with self._deadline(getattr(self._call, "get_bytes", 0)):
            cluster = self._cluster
            if cluster is None:
                replies = self._run(names, lambda idx: names.key_commands(b"GET", idx))
            else:  # one MGET per slot: its reply, the slot's pages' values (or its error)
                slot_gets = cluster.run_slots(names, b"MGET")
                for pages, values in slot_gets:
                    got = values if isinstance(values, list) else [values] * len(pages)
                    deque(map(replies.__setitem__, pages, got), maxlen=0)
        return [_stored(reply) for reply in replies]

    def _store_set(
        self, text_names: list[str], headers: list[bytes], payloads: list[Payload]
    ) -> int:
        """The batch's `SET`s, each value sent as header then payload (`set_commands`): no
        joined copy of the payload is made. A refused write (a full server under
        `noeviction`) ends the stored prefix without counting as a store failure: the server
        is up, the breaker stays closed. A lost connection raises instead."""
        names = NameBlock(text_names)

        def pack(idx: Sequence[int]) -> list[bytes | memoryview]:
            return set_commands(
                pick(names.names, idx), pick(headers, idx), pick(payloads, idx), self.ttl_ms
            )

        num_bytes = sum(memoryview(p).nbytes for p in payloads) + sum(map(len, headers))
        with self._deadline(num_bytes):
            replies = self._run(names, pack)
        for i, reply in enumerate(replies):
            if isinstance(reply, Exception):
                if not isinstance(reply, REDIRECTED):  # refused: not the moving slot's fault
                    self._note_refusal(str(reply).splitlines()[0])
                return i
        return len(names)

    def _store_delete(self, text_names: list[str]) -> int:
        names = NameBlock(text_names)
        with self._deadline():
            replies = self._run(names, lambda idx: names.key_commands(b"UNLINK", idx))
        return sum(r for r in replies if isinstance(r, int))

    def _run(self, names: NameBlock, pack: Packer) -> list[Reply]:
        """One reply per name (`redis_wire.Reply`): on a cluster split by master
        (`ClusterBatches`), on one server one pipeline."""
        cluster = self._cluster
        if cluster is not None:
            return cluster.run(names, pack)
        client = self.client
        assert isinstance(client, redis.Redis)  # no cluster runner: one server
        return pipelined(client, pack(list(range(len(names)))), len(names))

    def _store_clear(self) -> None:
        client = self.client
        batch: list[str] = []
        for name in client.scan_iter(match=_CLEAR_MATCH, count=_CLEAR_CHUNK):
            batch.append(name.decode())  # page names are ASCII
            if len(batch) == _CLEAR_CHUNK:
                self._store_delete(batch)
                batch = []
        if batch:
            self._store_delete(batch)

    def _store_close(self) -> None:
        if self._client_obj is not None:
            self._client_obj.close()


_EXISTS_PREFIX = b"""#!lua flags=allow-cross-slot-keys,no-writes
for i, name in ipairs(ARGV) do
  if redis.call('EXISTS', name) == 0 then return i - 1 end
end
return #ARGV"""
"""How many of the names given, from the first, are stored (one server: one round trip)."""


def _stored(reply: Reply) -> StoredPage | None:
    """A `GET` reply as a stored page: a redirected page (its slot still moving) is absent;
    any other error (WRONGTYPE: a key that is not ours) a rejected page."""
    if isinstance(reply, REDIRECTED):
        return None
    if isinstance(reply, Exception):
        return _FOREIGN
    assert reply is None or isinstance(reply, bytes)
    return reply


_BOUNDED = {Connection: BoundedConnection, SSLConnection: BoundedSSLConnection}


def _bound_waits(client: Client) -> None:
    """Makes the connections of one server's client keep to each call's deadline: its pool
    builds `redis_deadline`'s classes instead of redis-py's plain ones (TCP or TLS, picked
    by redis-py from the URL's scheme)."""
    if isinstance(client, redis.Redis):
        pool = client.connection_pool
        pool.connection_class = _BOUNDED.get(pool.connection_class, pool.connection_class)


def _socket_timeout(client: Client | None, kwargs: dict[str, object] | None) -> float | None:
    """The socket timeout the client was built with (None: none set)."""
    if client is None:
        pool = (kwargs or {}).get("connection_pool")
        found = (kwargs or {}).get("socket_timeout")
    elif isinstance(client, redis.Redis):
        pool, found = client.connection_pool, None
    else:
        pool, found = None, client.nodes_manager.connection_kwargs.get("socket_timeout")
    if isinstance(pool, redis.ConnectionPool):
        found = pool.connection_kwargs.get("socket_timeout")
    return float(found) if isinstance(found, (int, float)) else None


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
    if parts.scheme.lower() == "rediss":
        kwargs["ssl"] = True
    if cluster:
        # Every node's connections keep to the call's deadline (one server: `_bound_waits`).
        # redis-py gives a connection class to the nodes of a cluster built from a URL only.
        host = str(kwargs["host"])
        kwargs["url"] = (
            f"redis://[{host}]:{kwargs['port']}"
            if ":" in host
            else (f"redis://{host}:{kwargs['port']}")
        )
        kwargs["connection_class"] = BoundedConnection
    if parts.username:
        kwargs["username"] = unquote(parts.username)
    if parts.password:
        kwargs["password"] = unquote(parts.password)
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
