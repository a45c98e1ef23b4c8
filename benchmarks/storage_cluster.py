"""Redis Cluster against one Redis, on the same batches through the same backend: wall time
and GB/s of `batch_set` / `batch_get` / `batch_exists` (large pages, and the replay's small
ones), redis-py's own cluster pipeline for reference, the servers' time per probe, and the
floor of a call on this machine: a round trip, and the probe's `EXISTS` commands packed
beforehand and sent with no client code around them. Part of `python -m benchmarks.storage`.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import numpy as np
import redis

from uniradix.key import RadixKey
from uniradix.storage import KeySpace, StorageBackend, open_backend
from uniradix.storage.redis_slots import key_slot
from uniradix.storage.redis_wire import multi_key_command, pipelined, receive, send

KS = KeySpace("bench/model@rev", "bfloat16", "layer_first", 64, "full")


def median_s(fn: Callable[[], object], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def make_pages(num_pages: int, page_bytes: int) -> list[bytes]:
    rng = np.random.default_rng(0)
    return [rng.integers(0, 256, page_bytes, dtype=np.uint8).tobytes() for _ in range(num_pages)]


def bench_cluster(
    one_url: str, cluster_url: str, shapes: list[tuple[int, int]], rounds: int
) -> list[dict[str, float]]:
    """Per batch shape (pages, payload bytes): median wall seconds of each op on one Redis,
    on the cluster, and with redis-py's cluster pipeline (set / get), rounds alternating
    after one unmeasured round (connections made, first writes allocated)."""
    one, cluster = open_backend(one_url), open_backend(cluster_url)
    plain = redis.RedisCluster.from_url(cluster_url.replace("redis+cluster", "redis", 1))
    # Small batches take milliseconds, and a loaded machine's noise is of that order: they
    # get six times the rounds (a few seconds in all).
    servers = [one.client, *(_master_clients(cluster))]  # type: ignore[attr-defined]
    rows = []
    for n, size in shapes:
        for server in servers:
            server.config_resetstat()
        rows.append(
            _bench_shape(one, cluster, plain, n, size, rounds * (6 if size < 1 << 16 else 1))
        )
        rows[-1].update(_probe_server_us(servers))
    rows[-1].update(_round_trips(one, cluster, rounds * 30))
    for store in (one, cluster):
        store.clear()
        store.close()
    plain.close()
    return rows


def _bench_shape(
    one: StorageBackend,
    cluster: StorageBackend,
    plain: redis.RedisCluster,
    num_pages: int,
    page_bytes: int,
    rounds: int,
) -> dict[str, float]:
    data = make_pages(num_pages, page_bytes)
    keys = KS.keys_for(RadixKey(list(range(num_pages * KS.page_size))))
    names = [f"plain.{i}" for i in range(num_pages)]

    def plain_set() -> None:
        pipe = plain.pipeline()  # type: ignore[no-untyped-call]
        for name, page in zip(names, data, strict=True):
            pipe.set(name, page)
        pipe.execute()

    def plain_get() -> None:
        pipe = plain.pipeline()  # type: ignore[no-untyped-call]
        for name in names:
            pipe.get(name)
        pipe.execute()

    ops: dict[str, Callable[[], object]] = {}
    probes: dict[str, Callable[[], object]] = {}
    for store, tag in ((one, "one"), (cluster, "cluster")):
        ops[f"set_{tag}"] = lambda s=store: s.batch_set(keys, data)
        ops[f"get_{tag}"] = lambda s=store: s.batch_get(keys, page_bytes)
        probes[f"exists_{tag}"] = lambda s=store: s.batch_exists(keys)
    probes.update(_exists_floor(one, cluster, [k.name.encode() for k in keys]))
    ops["set_plain"], ops["get_plain"] = plain_set, plain_get
    t: dict[str, list[float]] = {name: [] for name in (*ops, *probes)}
    # The probes get rounds of their own: right after a `batch_get` of 128 MiB, a server
    # still frees that reply's buffers, and a probe of a millisecond or less measured the
    # previous call's tail (0.09x to 9x from one run to the next).
    for batch, num_rounds in ((ops, rounds), (probes, rounds * 6)):
        for i in range(num_rounds + 1):
            for name, op in batch.items():
                wall_s = median_s(op, 1)
                if i:  # the first round only warms up
                    t[name].append(wall_s)
    for store in (one, cluster):
        assert store.batch_exists(keys) == num_pages and store.stats().pages_corrupt == 0
    plain.delete(*names)
    row: dict[str, float] = {"pages": num_pages, "page_bytes": page_bytes}
    row.update({name: statistics.median(v) for name, v in t.items()})
    return row


def _exists_floor(
    one: StorageBackend, cluster: StorageBackend, names: list[bytes]
) -> dict[str, Callable[[], object]]:
    """A probe with no client code around it: its `EXISTS` commands packed beforehand, one
    to one Redis, and one per slot to each master, all sent before any reply is read."""
    whole = multi_key_command(b"EXISTS", names)
    client = cluster._cluster.client  # type: ignore[attr-defined]
    by_node: dict[str, tuple[object, dict[int, list[bytes]]]] = {}
    for name in names:
        node = client.nodes_manager.get_node_from_slot(key_slot(name))
        by_node.setdefault(node.name, (node, {}))[1].setdefault(key_slot(name), []).append(name)
    packed = [
        (
            client.get_redis_connection(node),
            b"".join(multi_key_command(b"EXISTS", ns)[0] for ns in slots.values()),
            len(slots),
        )
        for node, slots in by_node.values()
    ]

    def floor_cluster() -> None:
        for pending, (_, _, count) in zip(
            [send(c, [b]) for c, b, _ in packed], packed, strict=True
        ):
            receive(pending, count)

    return {
        "exists_floor_one": lambda: pipelined(one.client, whole, 1),  # type: ignore[attr-defined]
        "exists_floor_cluster": floor_cluster,
    }


def _master_clients(store: StorageBackend) -> list[redis.Redis]:
    batches = store._cluster  # type: ignore[attr-defined]
    return [node.redis_connection for node in batches.client.get_primaries()]


def _probe_server_us(servers: list[redis.Redis]) -> dict[str, float]:
    """Server time (INFO commandstats) of one `batch_exists`: one Redis's multi-key `EXISTS`
    against the Cluster's (one per slot; the sum over the masters and the busiest one's),
    and how many `EXISTS` the Cluster ran per probe."""
    stats = [s.info("commandstats") for s in servers]
    one = stats[0].get("cmdstat_exists", {})
    masters = [st.get("cmdstat_exists", {}) for st in stats[1:]]
    probes = max(1, one.get("calls", 0))  # both stores ran the same probes; one EXISTS each
    return {
        "probe_us_one": one.get("usec", 0) / probes,
        "probe_us_cluster": sum(m.get("usec", 0) for m in masters) / probes,
        "probe_us_master": max(m.get("usec", 0) for m in masters) / probes,
        "probe_commands": sum(m.get("calls", 0) for m in masters) / probes,
    }


def _round_trips(one: StorageBackend, cluster: StorageBackend, rounds: int) -> dict[str, float]:
    """The floor of a call: median wall of one `PING` to one Redis, and of a `PING` to every
    master at once (all sent, then all replies read, as a Cluster batch does)."""
    ping = [b"*1\r\n$4\r\nPING\r\n"]
    masters = _master_clients(cluster)

    def all_masters() -> None:
        for sent in [send(m, ping) for m in masters]:
            receive(sent, 1)

    t_one: list[float] = []
    t_all: list[float] = []
    for _ in range(rounds):
        t_one.append(median_s(lambda: pipelined(one.client, ping, 1), 1))  # type: ignore[attr-defined]
        t_all.append(median_s(all_masters, 1))
    return {"ping_one": statistics.median(t_one), "ping_masters": statistics.median(t_all)}


def render_cluster(rows: list[dict[str, float]], setup: str) -> str:
    lines = [
        "## Redis Cluster against one Redis",
        "",
        setup,
        "",
        "| batch | op | one Redis | Cluster | Cluster / one | one Redis | Cluster "
        "| redis-py cluster pipeline |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        batch = f"{row['pages']:,.0f} × {_size(row['page_bytes'])}"
        for op in ("set", "get", "exists"):
            one_s, cluster_s = row[f"{op}_one"], row[f"{op}_cluster"]
            plain = row.get(f"{op}_plain")
            lines.append(
                f"| {batch} | `batch_{op}` | {one_s * 1e3:.2f} ms | {cluster_s * 1e3:.2f} ms | "
                f"{cluster_s / one_s:.2f}× | {_rate(row, one_s, op)} | "
                f"{_rate(row, cluster_s, op)} | "
                + (f"{plain * 1e3:.2f} ms ({plain / one_s:.1f}×) |" if plain else "- |")
            )
    lines.append("")
    for row in rows:
        if "probe_us_one" in row:
            lines.append(
                f"Server time of one stored-prefix probe of {row['pages']:,.0f} pages (INFO "
                f"commandstats): one Redis {row['probe_us_one']:,.0f} µs (one multi-key "
                f"`EXISTS`), Cluster {row['probe_us_cluster']:,.0f} µs over its masters "
                f"({row['probe_us_master']:,.0f} µs on the busiest; "
                f"{row['probe_commands']:g} multi-key `EXISTS`, one per slot)."
            )
    for row in rows:
        one_s, cluster_s = row["exists_floor_one"], row["exists_floor_cluster"]
        lines.append(
            f"Floor of the {row['pages']:,.0f}-page probe on this machine (its `EXISTS` packed "
            f"beforehand, no client code): one Redis {one_s * 1e3:.3f} ms, Cluster "
            f"{cluster_s * 1e3:.3f} ms ({cluster_s / one_s:.2f}×; median)."
        )
    last = rows[-1]
    if "ping_one" in last:
        lines.append(
            f"One round trip: `PING` to one Redis {last['ping_one'] * 1e3:.3f} ms, to every "
            f"master at once {last['ping_masters'] * 1e3:.3f} ms (median)."
        )
    return "\n".join(lines + [""])


def _rate(row: dict[str, float], wall_s: float, op: str) -> str:
    """GB/s of payload for large pages; pages/s for small ones and for probes."""
    if op != "exists" and row["page_bytes"] >= 1 << 16:
        return f"{row['pages'] * row['page_bytes'] / 1e9 / wall_s:.2f} GB/s"
    return f"{row['pages'] / wall_s:,.0f} pages/s"


def _size(num_bytes: float) -> str:
    return f"{num_bytes / 2**20:g} MiB" if num_bytes >= 2**20 else f"{num_bytes:,.0f} B"
