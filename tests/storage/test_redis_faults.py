"""Redis going away and coming back, server-side eviction, TTL, and a full server: every
case is a counted miss or a shorter stored prefix, never an exception or a hang."""

from __future__ import annotations

import time
from pathlib import Path

from benchmarks.redis_servers import free_port, wait_cluster_ok
from uniradix.key import RadixKey
from uniradix.storage import KeySpace, Miss, MissReason, open_backend
from uniradix.storage.redis_backend import RedisBackend

from .conftest import RedisServer

KS = KeySpace("org/m@rev1", "bfloat16", "layer_first", 1, "full")
ONE_PER_SLOT = KeySpace("org/m@rev1", "bfloat16", "layer_first", 1, "full", group_pages=1)
HANG_S = 5.0  # far above the 0.2 s socket timeout: only a hang takes this long


def pages(n: int, size: int = 4096) -> tuple[list, list[bytes]]:  # type: ignore[type-arg]
    return KS.keys_for(RadixKey(list(range(n)))), [bytes([i % 256]) * size for i in range(n)]


def timed(fn, *args):  # type: ignore[no-untyped-def]
    start = time.monotonic()
    out = fn(*args)
    assert time.monotonic() - start < HANG_S, f"{fn.__name__} hung"
    return out


def test_killed_mid_run_then_restarted(own_redis: RedisServer) -> None:
    url = own_redis.url + "?timeout_s=0.2&breaker_failures=2&breaker_cooldown_s=0.3"
    store = open_backend(url)
    keys, data = pages(8)
    assert store.batch_set(keys, data) == 8
    assert store.batch_exists(keys) == 8
    own_redis.stop()
    # Down: the first calls fail within the socket timeout, then the breaker turns L3 off.
    assert timed(store.batch_exists, keys) == 0
    assert [p.reason for p in timed(store.batch_get, keys[:2])] == [MissReason.BACKEND_ERROR] * 2  # type: ignore[union-attr]
    assert store.stats().breaker_trips == 1 and store.stats().breaker_state == "open"
    assert [p.reason for p in timed(store.batch_get, keys[:2])] == [MissReason.BREAKER_OPEN] * 2  # type: ignore[union-attr]
    assert timed(store.batch_set, keys, data) == 0
    own_redis.start()  # back, empty (no persistence)
    deadline = time.monotonic() + HANG_S
    while store.batch_set(keys, data) != 8:  # refused until the cool-down lets a probe through
        assert time.monotonic() < deadline, "hits did not resume"
        time.sleep(0.05)
    got = store.batch_get(keys)
    assert [bytes(p) for p in got if isinstance(p, memoryview)] == data
    s = store.stats()
    assert s.failed_ops == 2 and s.breaker_trips == 1 and s.breaker_state == "closed"
    assert s.misses_by_reason["backend_error"] == 2 and s.misses_by_reason["breaker_open"] >= 2
    store.close()


def test_server_never_there() -> None:
    for url in (
        f"redis://127.0.0.1:{free_port()}/0?timeout_s=0.2",
        f"redis+cluster://127.0.0.1:{free_port()}?timeout_s=0.2",
    ):
        store = open_backend(url)
        keys, data = pages(2)
        assert timed(store.batch_exists, keys) == 0
        assert timed(store.batch_set, keys, data) == 0
        assert all(isinstance(p, Miss) for p in timed(store.batch_get, keys))
        assert not store.clear()
        assert store.stats().failed_ops >= 3
        store.close()


def test_pages_evicted_by_redis_are_plain_misses(tmp_path: Path) -> None:
    server = RedisServer(tmp_path, "--maxmemory", "2mb", "--maxmemory-policy", "allkeys-lru")
    server.start()
    try:
        store = open_backend(server.url)
        keys, data = pages(100, size=64 * 1024)  # 6.4 MB into 2 MB
        for i in range(0, 100, 10):
            store.batch_set(keys[i : i + 10], data[i : i + 10])
        got = store.batch_get(keys, expected_bytes=64 * 1024)
        hits = [i for i, p in enumerate(got) if isinstance(p, memoryview)]
        assert 0 < len(hits) < 100
        assert all(bytes(got[i]) == data[i] for i in hits)  # type: ignore[arg-type]
        s = store.stats()
        assert s.pages_corrupt == 0 and s.misses_by_reason == {"absent": 100 - len(hits)}
        store.close()
    finally:
        server.stop()


def test_full_server_under_noeviction_gives_a_shorter_prefix(tmp_path: Path) -> None:
    server = RedisServer(tmp_path, "--maxmemory", "3mb", "--maxmemory-policy", "noeviction")
    server.start()
    try:
        store = open_backend(server.url)
        keys, data = pages(80, size=64 * 1024)
        stored = 0
        while stored < 80:  # as the backup writer does: stop at the first short batch
            n = store.batch_set(keys[stored : stored + 8], data[stored : stored + 8])
            stored += n
            if n < 8:
                break
        assert 0 < stored < 80 and store.stats().failed_ops == 0
        assert store.batch_exists(keys) == stored
        store.close()
    finally:
        server.stop()


def test_ttl_expires_pages(redis_server: RedisServer) -> None:
    store = open_backend(redis_server.url + "?ttl_s=0.3")
    assert isinstance(store, RedisBackend) and store.ttl_ms == 300
    keys, data = pages(3)
    store.batch_set(keys, data)
    assert 0 < redis_server.client().pttl(keys[0].name) <= 300
    time.sleep(0.4)
    assert store.batch_exists(keys) == 0
    store.close()


def test_hiredis_parses_replies() -> None:
    from redis.utils import HIREDIS_AVAILABLE

    assert HIREDIS_AVAILABLE


def test_a_foreign_key_is_a_rejected_page_not_a_failure(redis_server: RedisServer) -> None:
    store = open_backend(redis_server.url)
    keys, data = pages(3)
    store.batch_set(keys, data)
    client = redis_server.client()
    client.delete(keys[1].name)
    client.hset(keys[1].name, mapping={"h": b"x"})  # another type: WRONGTYPE for GET
    client.set(keys[2].name, b"someone else's string")  # shorter than a header
    got = store.batch_get(keys)
    assert isinstance(got[0], memoryview)
    assert [p.reason for p in got[1:] if isinstance(p, Miss)] == [MissReason.SHORT] * 2
    s = store.stats()
    assert s.failed_ops == 0 and s.pages_corrupt == 2 and s.breaker_state == "closed"
    store.close()


def test_a_server_that_never_answers_costs_one_bounded_timeout() -> None:
    # Accepts connections, never replies: only the socket timeout ends each call.
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    port = listener.getsockname()[1]
    try:
        store = open_backend(f"redis://127.0.0.1:{port}/0?timeout_s=0.2&breaker_failures=2")
        keys, data = pages(2)
        assert [p.reason for p in timed(store.batch_get, keys)] == [MissReason.BACKEND_ERROR] * 2  # type: ignore[union-attr]
        assert timed(store.batch_set, keys, data) == 0
        start = time.monotonic()
        assert [p.reason for p in store.batch_get(keys)] == [MissReason.BREAKER_OPEN] * 2  # type: ignore[union-attr]
        assert time.monotonic() - start < 0.2  # refused without touching the socket
        assert store.stats().breaker_trips == 1
        store.close()
    finally:
        listener.close()


def test_null_backend_stores_nothing() -> None:
    store = open_backend("null")
    keys, data = pages(2)
    assert store.batch_set(keys, data) == 0 and store.batch_exists(keys) == 0
    assert [p.reason for p in store.batch_get(keys)] == [MissReason.ABSENT] * 2  # type: ignore[union-attr]
    assert store.stats().pages_missed == 2 and store.clear()


def test_cluster_node_killed_then_restarted(own_cluster: list[RedisServer]) -> None:
    url = (
        f"redis+cluster://127.0.0.1:{own_cluster[0].port}"
        "?timeout_s=0.2&breaker_failures=2&breaker_cooldown_s=0.3"
    )
    store = open_backend(url)
    keys = ONE_PER_SLOT.keys_for(RadixKey(list(range(32))))  # over the three nodes' slots
    data = pages(32)[1]
    assert store.batch_set(keys, data) == 32
    own_cluster[1].stop()
    # A third of the slots are gone: the batch fails within the timeouts, L3 turns off.
    for _ in range(3):
        assert all(isinstance(p, Miss) for p in timed(store.batch_get, keys))
    s = store.stats()
    assert s.breaker_trips == 1 and s.failed_ops >= 2 and s.pages_read == 0
    own_cluster[1].start()  # rejoins with its slots, empty
    wait_cluster_ok(own_cluster)
    deadline = time.monotonic() + 10 * HANG_S
    while store.batch_set(keys, data) != 32:
        assert time.monotonic() < deadline, "hits did not resume"
        time.sleep(0.1)
    got = store.batch_get(keys)
    assert [bytes(p) for p in got if isinstance(p, memoryview)] == data
    assert store.stats().breaker_state == "closed"
    store.close()
