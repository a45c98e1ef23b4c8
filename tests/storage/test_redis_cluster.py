"""Redis Cluster batches: split by master and sent to all at once (a lookup: one multi-key
command per slot, a chain's pages sharing a slot per group), a stale slot map refreshed and
retried once (MOVED), a page still redirected a miss (ASK), the stored prefix found by one
EXISTS per slot and then per page of a partly stored slot, and a master killed mid-run (its
replica takes over): counted misses, no call longer than its timeouts, no wrong data, then
hits again."""

from __future__ import annotations

import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import redis
from redis.crc import key_slot

from benchmarks.redis_servers import free_port
from uniradix.key import RadixKey
from uniradix.storage import KeySpace, MissReason, PageKey, open_backend
from uniradix.storage.redis_backend import RedisBackend
from uniradix.storage.redis_cluster import ClusterBatches

from .conftest import RedisServer, start_cluster

KS = KeySpace("org/m@rev1", "bfloat16", "layer_first", 1, "full")
ONE_PER_SLOT = KeySpace("org/m@rev1", "bfloat16", "layer_first", 1, "full", group_pages=1)
"""Every page its own tag: the slot moves and redirections below hit one page."""


def pages(
    n: int, size: int = 256, seed: int = 0, space: KeySpace = KS
) -> tuple[list[PageKey], list[bytes]]:
    keys = space.keys_for(RadixKey([seed * 1_000_000 + i for i in range(n)]))
    return keys, [bytes([(seed + i) % 256]) * size for i in range(n)]


def cluster_store(nodes: list[RedisServer], options: str = "?timeout_s=10") -> RedisBackend:
    """A store on the cluster; by default with a 10 s call deadline, as these tests check what
    is stored, not latency (the tests of timeouts pass their own options)."""
    store = open_backend(f"redis+cluster://127.0.0.1:{nodes[0].port}{options}")
    assert isinstance(store, RedisBackend)
    return store


def cluster_batches(store: RedisBackend) -> ClusterBatches:
    batches = store._cluster
    assert batches is not None
    return batches


def node_id(node: RedisServer) -> str:
    return str(node.client().execute_command("CLUSTER MYID").decode())


def slot_ports(nodes: list[RedisServer], slot: int) -> list[int]:
    """The ports of the slot's master, then of its replicas, as the first live node says."""
    alive = next(n for n in nodes if n.proc is not None)
    for start, end, *holders in alive.client().execute_command("CLUSTER SLOTS"):
        if start <= slot <= end:
            return [int(holder[1]) for holder in holders]
    raise AssertionError(f"slot {slot} has no owner")


def owner(nodes: list[RedisServer], slot: int) -> RedisServer:
    master = slot_ports(nodes, slot)[0]
    return next(n for n in nodes if n.port == master)


def test_batch_is_split_over_every_master(redis_cluster: list[RedisServer]) -> None:
    store = cluster_store(redis_cluster)
    assert store.clear()
    keys, data = pages(300)
    assert store.batch_set(keys, data) == 300
    held = [n.client().dbsize() for n in redis_cluster]
    assert sum(held) == 300 and min(held) > 0
    assert store.batch_exists(keys) == 300
    assert [bytes(p) for p in store.batch_get(keys, 256)] == data  # type: ignore[arg-type]
    assert store.delete(keys[:10]) == 10
    assert store.batch_exists(keys) == 0 and store.batch_exists(keys[10:]) == 290
    assert store.stats().pages_read == 300 and store.stats().failed_ops == 0
    store.close()


@pytest.mark.parametrize("space", [KS, ONE_PER_SLOT], ids=["tagged-groups", "slot-per-page"])
def test_stored_prefix_stops_at_the_first_absent_page(
    redis_cluster: list[RedisServer], space: KeySpace
) -> None:
    store = cluster_store(redis_cluster)
    assert store.clear()
    keys, data = pages(200, seed=1, space=space)
    assert store.batch_set(keys, data) == 200
    for gap in (0, 1, 57, 150, 199):
        store.delete([keys[gap]])
        assert store.batch_exists(keys) == gap
        assert store.batch_set([keys[gap]], [data[gap]]) == 1
    # A whole group absent (its slot answers 0), and gaps in two groups (the first counts).
    store.delete(keys[64:128])
    assert store.batch_exists(keys) == 64 and store.batch_exists(keys[128:]) == 72
    store.delete([keys[70], keys[130], keys[190]])
    assert store.batch_exists(keys[128:]) == 2 and store.batch_exists(keys[:64]) == 64
    assert store.batch_set(keys, data) == 200 and store.batch_exists(keys) == 200
    store.close()


def test_a_one_slot_lookup_finds_the_stored_prefix(redis_cluster: list[RedisServer]) -> None:
    # One group of a chain's pages: one tag, one slot, one EXISTS (the short path); where
    # the slot's pages are only partly stored, the batch runner asks page by page.
    store = cluster_store(redis_cluster)
    assert store.clear()
    keys, data = pages(60, seed=6)
    assert len({key_slot(k.name.encode()) for k in keys}) == 1
    assert store.batch_exists(keys) == 0
    assert store.batch_set(keys, data) == 60 and store.batch_exists(keys) == 60
    for gap in (0, 1, 33, 59):
        store.delete([keys[gap]])
        assert store.batch_exists(keys) == gap
        assert store.batch_set([keys[gap]], [data[gap]]) == 1
    store.close()


def test_a_one_slot_lookup_survives_a_lost_connection(
    redis_cluster: list[RedisServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The short path's master unreachable (here: a client of a port nothing listens on):
    # the batch runner takes over (it refreshes the slot map when its own master is lost).
    store = cluster_store(redis_cluster)
    assert store.clear()
    keys, data = pages(50, seed=7)
    assert store.batch_set(keys, data) == 50
    gone = redis.Redis(host="127.0.0.1", port=free_port(), socket_connect_timeout=1)
    monkeypatch.setattr(ClusterBatches, "one_slot_master", lambda self, names: gone)
    assert store.batch_exists(keys) == 50 and store.stats().failed_ops == 0
    store.close()


def test_a_lookup_is_one_command_per_slot(redis_cluster: list[RedisServer]) -> None:
    store = cluster_store(redis_cluster)
    assert store.clear()
    keys, data = pages(300, seed=4)  # five groups of a chain: five tags
    assert store.batch_set(keys, data) == 300
    slots = {key_slot(k.name.encode()) for k in keys}
    assert len(slots) == 5
    for node in redis_cluster:
        node.client().config_resetstat()
    assert store.batch_exists(keys) == 300
    assert [bytes(p) for p in store.batch_get(keys, 256)] == data  # type: ignore[arg-type]
    calls: dict[str, int] = {}
    for node in redis_cluster:
        for name, stat in node.client().info("commandstats").items():
            calls[name] = calls.get(name, 0) + int(stat["calls"])
    assert calls.get("cmdstat_exists") == 5 and calls.get("cmdstat_mget") == 5
    assert "cmdstat_get" not in calls
    store.close()


def _move_slot(nodes: list[RedisServer], slot: int, to: RedisServer) -> None:
    deadline = time.monotonic() + 4 * HANG_S
    while True:
        for node in nodes:  # an empty slot: every node learns its new master at once
            node.client().execute_command("CLUSTER SETSLOT", slot, "NODE", node_id(to))
        # The new master's epoch above the old one's, so no gossip still in flight from the
        # old master (a busy machine delays it) gives the slot back to it; then every node
        # agrees. Gossip that won the race anyway is answered by assigning the slot again.
        to.client().execute_command("CLUSTER BUMPEPOCH")
        settle = time.monotonic() + 0.5
        while time.monotonic() < settle:
            if all(slot_ports([n], slot)[0] == to.port for n in nodes):
                return
            time.sleep(0.02)
        assert time.monotonic() < deadline, f"slot {slot} did not move"


@pytest.mark.parametrize("space", [ONE_PER_SLOT, KS], ids=["slot-per-page", "tagged-group"])
def test_moved_slot_refreshes_the_map_and_retries_once(
    own_cluster: list[RedisServer], space: KeySpace
) -> None:
    store = cluster_store(own_cluster)
    keys, data = pages(40, seed=2, space=space)
    slot = key_slot(keys[0].name.encode())
    rest = [i for i, k in enumerate(keys) if key_slot(k.name.encode()) != slot]
    assert len(rest) == (39 if space is ONE_PER_SLOT else 0)  # one group: one slot
    assert store.batch_exists(keys) == 0  # the client now holds the slot map
    assert store.batch_set([keys[i] for i in rest], [data[i] for i in rest]) == len(rest)
    source = owner(own_cluster, slot)
    target = next(n for n in own_cluster if n is not source)
    _move_slot(own_cluster, slot, target)
    assert store.batch_set(keys, data) == 40  # MOVED for page 0: refreshed, sent again
    assert target.client().get(keys[0].name) is not None
    assert store._batches is not None and store._batches.refreshes == 1
    assert [bytes(p) for p in store.batch_get(keys, 256)] == data  # type: ignore[arg-type]
    assert store.stats().failed_ops == 0 and store._batches.refreshes == 1
    store.close()


def test_a_one_slot_lookup_of_a_moved_slot_refreshes_the_map(
    own_cluster: list[RedisServer],
) -> None:
    # The group's slot given to another master: the short path's EXISTS is answered MOVED,
    # and the batch runner refreshes the map and asks the new master (which holds nothing).
    store = cluster_store(own_cluster)
    keys, data = pages(40, seed=8)
    assert store.batch_set(keys, data) == 40 and store.batch_exists(keys) == 40
    slot = key_slot(keys[0].name.encode())
    source = owner(own_cluster, slot)
    target = next(n for n in own_cluster if n is not source)
    for key in keys:  # the slot must be empty to be given away
        source.client().delete(key.name)
    _move_slot(own_cluster, slot, target)
    assert store.batch_exists(keys) == 0 and cluster_batches(store).refreshes == 1
    assert store.batch_set(keys, data) == 40 and store.batch_exists(keys) == 40
    assert target.client().dbsize() == 40 and store.stats().failed_ops == 0
    store.close()


def test_a_page_still_redirected_after_the_retry_is_a_miss(
    own_cluster: list[RedisServer],
) -> None:
    store = cluster_store(own_cluster)
    keys, data = pages(20, seed=3, space=ONE_PER_SLOT)
    assert store.batch_set(keys[1:], data[1:]) == 19
    slot = key_slot(keys[0].name.encode())
    source = owner(own_cluster, slot)
    target = next(n for n in own_cluster if n is not source)
    # A slot being migrated: its master answers ASK for a key it does not hold, and the
    # refreshed map still names it (the slot has not moved yet).
    target.client().execute_command("CLUSTER SETSLOT", slot, "IMPORTING", node_id(source))
    source.client().execute_command("CLUSTER SETSLOT", slot, "MIGRATING", node_id(target))
    got = store.batch_get(keys, 256)
    assert got[0].reason is MissReason.ABSENT  # type: ignore[union-attr]
    assert [bytes(p) for p in got[1:]] == data[1:]  # type: ignore[arg-type]
    assert store.batch_exists(keys) == 0
    assert store.batch_set(keys, data) == 0  # the prefix ends at the redirected page
    assert store.batch_set(keys[1:], data[1:]) == 19
    s = store.stats()
    assert s.failed_ops == 0 and s.pages_corrupt == 0 and s.breaker_state == "closed"
    store.close()


HANG_S = 3.0  # timeouts are 0.3 s: a call that takes longer than a few is a hang


def timed(fn, *args):  # type: ignore[no-untyped-def]
    start = time.monotonic()
    out = fn(*args)
    assert time.monotonic() - start < HANG_S, f"{fn.__name__} hung"
    return out


def test_master_killed_replica_promoted(tmp_path: Path) -> None:
    nodes = start_cluster(tmp_path, replicas=1)
    try:
        store = cluster_store(nodes, "?timeout_s=0.3&breaker_failures=2&breaker_cooldown_s=0.3")
        keys, data = pages(60, seed=4)
        truth = dict(zip((k.name for k in keys), data, strict=True))
        assert store.batch_set(keys, data) == 60
        slot = key_slot(keys[0].name.encode())
        victim, *replica_ports = slot_ports(nodes, slot)
        assert replica_ports
        next(n for n in nodes if n.port == victim).stop()
        killed_at, misses = time.monotonic(), 0
        while True:
            assert time.monotonic() - killed_at < 30, "hits did not resume"
            got = timed(store.batch_get, keys, 256)
            for key, page in zip(keys, got, strict=True):
                if isinstance(page, memoryview):
                    assert bytes(page) == truth[key.name]  # never wrong data
            misses += sum(not isinstance(p, memoryview) for p in got)
            if misses and all(isinstance(p, memoryview) for p in got):
                break  # hits again, through the promoted replica
            # Replication is asynchronous: pages the dead master had not passed on are
            # gone, and written again once writes go through.
            timed(store.batch_set, keys, data)
            time.sleep(0.05)
        # Promoted. The node asked may learn of the failover after the client did (seen once
        # in a full run: its slot map still named the dead master).
        seen_by = time.monotonic() + 10
        while slot_ports(nodes, slot)[0] not in replica_ports:
            assert time.monotonic() < seen_by, "no replica took the slot over"
            time.sleep(0.1)
        s = store.stats()
        assert s.pages_missed >= misses > 0 and s.pages_corrupt == 0
        assert s.failed_ops > 0 and s.breaker_state == "closed"
        store.close()
    finally:
        for node in nodes:
            node.stop()


def test_plain_redis_py_cluster_client_still_works(redis_cluster: list[RedisServer]) -> None:
    client = redis.RedisCluster(host="127.0.0.1", port=redis_cluster[0].port)
    store = RedisBackend(client=client)
    keys, data = pages(30, seed=5)
    assert store.batch_set(keys, data) == 30
    assert store.batch_exists(keys) == 30
    store.close()


def test_threads_share_one_cluster_store(redis_cluster: list[RedisServer]) -> None:
    # It checks what four threads store and read, not latency: a 10 s call deadline (the
    # default 0.5 s was passed once in CI by threads sharing two cores).
    store = cluster_store(redis_cluster)
    batches = [pages(50, seed=10 + t) for t in range(4)]

    def work(keys: list[PageKey], data: list[bytes]) -> bool:
        for _ in range(10):
            if store.batch_set(keys, data) != 50 or store.batch_exists(keys) != 50:
                return False
            if [bytes(p) for p in store.batch_get(keys, 256)] != data:  # type: ignore[arg-type]
                return False
        return True

    with ThreadPoolExecutor(4) as pool:
        assert all(pool.map(lambda b: work(*b), batches))
    assert store.stats().failed_ops == 0 and store.stats().pages_read == 4 * 10 * 50
    store.close()


def test_a_master_that_stops_answering_costs_one_timeout(own_cluster: list[RedisServer]) -> None:
    store = cluster_store(own_cluster, "?timeout_s=0.3&breaker_failures=2&breaker_cooldown_s=0.3")
    keys, data = pages(30, seed=6)
    assert store.batch_set(keys, data) == 30
    frozen = owner(own_cluster, key_slot(keys[0].name.encode()))
    assert frozen.proc is not None
    frozen.proc.send_signal(signal.SIGSTOP)
    try:
        start = time.monotonic()
        got = store.batch_get(keys, 256)
        assert time.monotonic() - start < 1.0  # one 0.3 s timeout, no retry
        assert all(getattr(p, "reason", None) is MissReason.BACKEND_ERROR for p in got)
        assert timed(store.batch_exists, keys) == 0  # the breaker opens after two failures
        assert store.stats().breaker_state == "open"
    finally:
        frozen.proc.send_signal(signal.SIGCONT)
    deadline = time.monotonic() + 10
    while store.batch_exists(keys) != 30:
        assert time.monotonic() < deadline, "hits did not resume"
        time.sleep(0.1)
    assert [bytes(p) for p in store.batch_get(keys, 256)] == data  # type: ignore[arg-type]
    store.close()


def test_slots_match_the_server_with_and_without_hash_tags(
    redis_cluster: list[RedisServer],
) -> None:
    # Names of another scheme (SGLang's backend keeps its own keys) may carry a {hash tag}:
    # a batch must go where the server puts the key, or every page would be redirected.
    from uniradix.storage.redis_cluster import key_slot as ours

    client = redis_cluster[0].client()
    names = [b"ur1.00ff.abcd", b"{user1}.page.7", b"a{}b", b"x{y}z{w}", b"{", b"}{tag}", b"p"]
    for name in names:
        assert ours(name) == client.execute_command("CLUSTER KEYSLOT", name), name
    store = cluster_store(redis_cluster)
    space = KS.key_head
    tagged = [PageKey(f"{space}{{chain7}}.{i:060d}", KS.fingerprint, bytes(32)) for i in range(5)]
    assert store.batch_set(tagged, [b"t" * 8] * 5) == 5 and store.batch_exists(tagged) == 5
    assert [bytes(p) for p in store.batch_get(tagged, 8)] == [b"t" * 8] * 5  # type: ignore[arg-type]
    assert store.stats().failed_ops == 0 and cluster_batches(store).refreshes == 0
    assert len({ours(k.name.encode()) for k in tagged}) == 1
    store.close()
