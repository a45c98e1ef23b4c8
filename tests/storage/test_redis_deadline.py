"""Every Redis call keeps to one deadline: a server whose replies trickle in (each socket read
gets a few bytes, so no socket timeout ever fires) costs a call its `timeout_s`, then a
counted failure that the breaker hears, on one server and on a cluster alike."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from redis.cluster import RedisCluster

from benchmarks.delay_proxy import DelayProxy
from uniradix.key import RadixKey
from uniradix.storage import KeySpace, MissReason, PageKey, open_backend
from uniradix.storage.redis_backend import RedisBackend, _client_kwargs
from uniradix.storage.redis_deadline import (
    BYTES_PER_S,
    BoundedConnection,
    DeadlinePassed,
    call_deadline,
    outside_deadline,
    wait_s,
)

from .conftest import RedisServer

KS = KeySpace("org/m@rev1", "bfloat16", "layer_first", 1, "full")
TRICKLE_B_S = 100.0  # the replies of a 16-page batch take minutes at this rate
# Far above the 0.2 s deadline, far below a batch's replies at `TRICKLE_B_S`: only a call that
# outlived its deadline takes this long.
HANG_S = 5.0


def pages(n: int, size: int = 4096, seed: int = 0) -> tuple[list[PageKey], list[bytes]]:
    keys = KS.keys_for(RadixKey([seed * 1_000_000 + i for i in range(n)]))
    return keys, [bytes([(seed + i) % 256]) * size for i in range(n)]


def timed(fn, *args):  # type: ignore[no-untyped-def]
    start = time.monotonic()
    out = fn(*args)
    assert time.monotonic() - start < HANG_S, f"{fn.__name__} outlived its deadline"
    return out


@pytest.fixture
def proxy(redis_server: RedisServer) -> Iterator[DelayProxy]:
    proxy = DelayProxy(redis_server.port).start()
    yield proxy
    proxy.close()


def test_trickling_replies_cost_one_deadline_then_the_breaker_opens(
    redis_server: RedisServer, proxy: DelayProxy
) -> None:
    keys, data = pages(16)
    direct = open_backend(redis_server.url)
    assert direct.batch_set(keys, data) == 16
    store = open_backend(f"redis://127.0.0.1:{proxy.port}/0?timeout_s=0.2&breaker_failures=2")
    assert store.batch_exists(keys) == 16  # connected, at full speed
    proxy.bytes_per_s = TRICKLE_B_S
    got = timed(store.batch_get, keys)
    assert [getattr(p, "reason", None) for p in got] == [MissReason.BACKEND_ERROR] * 16
    assert timed(store.batch_set, keys, data) == 0  # 16 "+OK" replies: trickling too
    s = store.stats()
    assert s.failed_ops == 2 and s.breaker_trips == 1 and s.breaker_state == "open"
    assert s.last_error is not None and "Timeout" in s.last_error  # the deadline cut the wait
    proxy.bytes_per_s = None  # the link recovers: the next probe closes the breaker
    deadline = time.monotonic() + HANG_S
    while store.batch_exists(keys) != 16:
        assert time.monotonic() < deadline, "hits did not resume"
        time.sleep(0.05)
    assert [bytes(p) for p in store.batch_get(keys)] == data  # type: ignore[arg-type]
    store.close()
    direct.close()


def test_a_cluster_call_keeps_to_its_deadline(redis_cluster: list[RedisServer]) -> None:
    # Every master reached through its own proxy (redis-py's `address_remap`).
    proxies = {n.port: DelayProxy(n.port).start() for n in redis_cluster}
    kwargs = _client_kwargs(
        f"redis+cluster://127.0.0.1:{redis_cluster[0].port}", {"timeout_s": "0.2"}, True
    )
    kwargs["address_remap"] = lambda addr: (addr[0], proxies[addr[1]].port)
    store = RedisBackend(RedisCluster, client_kwargs=kwargs)
    try:
        keys, data = pages(24, seed=1)
        assert store.batch_set(keys, data) == 24
        batches = store._cluster
        assert batches is not None
        pools = [node.redis_connection.connection_pool for node in batches._table[2]]  # type: ignore[union-attr]
        assert pools and all(p.connection_class is BoundedConnection for p in pools)
        for proxy in proxies.values():
            proxy.bytes_per_s = TRICKLE_B_S
        got = timed(store.batch_get, keys)
        assert [getattr(p, "reason", None) for p in got] == [MissReason.BACKEND_ERROR] * 24
        # The deadline ends the call either inside a wait (redis-py's "Timeout reading") or
        # as the next wait would begin (`DeadlinePassed`): whichever the trickle's timing hits.
        error = str(store.stats().last_error)
        assert store.stats().failed_ops == 1 and ("Timeout" in error or "DeadlinePassed" in error)
    finally:
        store.close()
        for proxy in proxies.values():
            proxy.close()


def test_past_the_deadline_no_wait_begins() -> None:
    assert wait_s(0.5) is None  # no call: the socket's own timeout
    with call_deadline(0.05):
        wait = wait_s(0.5)
        assert wait is not None and 0 < wait <= 0.05
        with call_deadline(10.0):  # nested: the outer call's clock
            assert wait_s(None) <= 0.05  # type: ignore[operator]
        time.sleep(0.06)
        with pytest.raises(DeadlinePassed):
            wait_s(0.5)
    assert wait_s(0.5) is None


def test_bytes_to_move_extend_the_deadline_and_set_up_runs_outside_it() -> None:
    with call_deadline(0.1, num_bytes=int(2 * BYTES_PER_S)):  # 2 s of transfer
        wait = wait_s(None)
        assert wait is not None and 2.0 < wait <= 2.1
        with outside_deadline():
            assert wait_s(None) is None  # a one-time set-up: its socket timeouts only
        assert wait_s(None) is not None
