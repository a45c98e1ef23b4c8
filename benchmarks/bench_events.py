"""KV events: what they cost the cache, how fast the publisher goes, and what cache-aware
routing buys on the Mooncake trace.

    .venv/bin/python -m benchmarks.bench_events ops        # per-op cost, events off vs on
    .venv/bin/python -m benchmarks.bench_events hashing    # ns/token of the page digests
    .venv/bin/python -m benchmarks.bench_events publisher  # events/s over loopback ZMQ
    .venv/bin/python -m benchmarks.bench_events routing    # 4 instances x 3 routers vs 1
    .venv/bin/python -m benchmarks.bench_events routing --routers cache-aware:continuation

`ops` (what the events cost the cache's calls) is described in `benchmarks/events_ops.py`.
Results go to `benchmarks/results/events_<part>.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
import types
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import zmq

from benchmarks.events_ops import OPS_STREAMS, TRACE, bench_ops, git_show
from benchmarks.hybrid_routing import DISPATCHES, VARIANTS
from benchmarks.uniradix_side import build_full
from uniradix import native
from uniradix.events import (
    BlockStored,
    KVEventsConfig,
    ZmqEventPublisher,
)
from uniradix.events.types import KVEvent
from uniradix.hashing.events import block_hashing
from uniradix.hashing.node_digests import NodeDigests
from uniradix.hashing.page import chain_digests, page_digests
from uniradix.hashing.storage_keys import KeySpace
from uniradix.key import RadixKey
from uniradix.sim.cluster import Cluster
from uniradix.sim.replay import ReplayOptions
from uniradix.sim.router import make_router
from uniradix.types import InsertParams

RESULTS = Path(__file__).resolve().parent / "results"


_ZERO = bytes(32)  # a stand-in NONE_HASH


def _best_s(fn: Any, rounds: int = 9) -> float:
    best = float("inf")  # CPU-bound: the least disturbed run (timeit's convention)
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def _python_hashing(fn: Any) -> Any:
    """`fn` run with the native module switched off (the chain in Python and hashlib)."""

    def run() -> Any:
        saved, native.HAVE_NATIVE = native.HAVE_NATIVE, False
        try:
            return fn()
        finally:
            native.HAVE_NATIVE = saved

    return run


def bench_hashing(num_tokens: int, before_rev: str | None) -> dict[str, Any]:
    """ns per token: SGLang-chain digests of one `num_tokens` prefix (now, with the native
    module off: `*_python`, and with `page_hash.page_digests` of `before_rev`), vLLM
    sha256_cbor digests, storage keys built
    from them, and a second read of a node's digests from the shared table (what a backup
    or a remove pays once the node was hashed)."""
    tokens = np.random.default_rng(1).integers(0, 150_000, num_tokens)
    key = RadixKey(tokens)
    before = None
    if before_rev:
        before = types.ModuleType("page_hash_before")
        exec(
            compile(git_show(before_rev, "uniradix/hashing/page.py"), "before", "exec"),
            before.__dict__,
        )
    vllm = block_hashing("vllm_sha256_cbor", hash_seed="0").hasher
    assert vllm is not None
    out: dict[str, Any] = {
        "num_tokens": num_tokens,
        "before_rev": before_rev,
        "native": native.HAVE_NATIVE and native.sha256_implementation(),
    }
    for ps in (1, 16, 64):
        n = num_tokens if ps > 1 else num_tokens // 8  # page 1 is slow: a shorter prefix
        units = key.units[: n * 8]
        ks = KeySpace("bench/model@rev", "bfloat16", "layer_first", ps, "full")
        cache = build_full(ps, 1 << 20).cache
        slots = cache.pools.kv_allocator.alloc(n)
        cache.insert(InsertParams(RadixKey.from_units(units, None, False), slots))
        table = NodeDigests.of_tree(cache.tree)
        leaf = next(iter(cache.tree.root.children.values()))
        figures = {
            "digests": _best_s(lambda u=units, p=ps: chain_digests(u, p)),
            "digests_python": _best_s(_python_hashing(lambda u=units, p=ps: chain_digests(u, p))),
            "vllm_sha256_cbor": _best_s(lambda u=units, p=ps: vllm(u, p, _ZERO, None, True)),
            "vllm_sha256_cbor_python": _best_s(
                _python_hashing(lambda u=units, p=ps: vllm(u, p, _ZERO, None, True))
            ),
            "storage_keys": _best_s(lambda u=units, p=ps, k=ks: k.keys(page_digests(u, p))),
            "first_node_lookup": _best_s(lambda t=table, n=leaf: (t.clear(), t.node(n, None))),
            "first_node_lookup_python": _best_s(
                _python_hashing(lambda t=table, n=leaf: (t.clear(), t.node(n, None)))
            ),
            "second_node_lookup": _best_s(lambda t=table, n=leaf: t.node(n, None)),
        }
        if before is not None:
            figures["digests_before"] = _best_s(lambda u=units, p=ps: before.page_digests(u, p))
        out[f"page{ps}_ns_per_token"] = {k: round(v / n * 1e9, 2) for k, v in figures.items()}
        print(ps, json.dumps(out[f"page{ps}_ns_per_token"]))
    return out


def bench_publisher(num_batches: int, events_per_batch: int) -> dict[str, Any]:
    """Batches of `events_per_batch` BlockStored events (4 pages of 16 tokens each) pushed
    through a loopback PUB to a SUB that counts them; events/s from first publish to the
    last batch received."""
    config = KVEventsConfig(endpoint="tcp://127.0.0.1:*", max_queue_size=num_batches + 1)
    publisher = ZmqEventPublisher(config)
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.setsockopt(zmq.RCVHWM, 0)
    sub.connect(publisher.endpoint)
    time.sleep(0.5)  # let the subscription reach the PUB socket
    received = [0]

    def count() -> None:
        while sub.poll(2000):
            sub.recv_multipart()
            received[0] += 1
            if received[0] == num_batches:
                return

    reader = threading.Thread(target=count)
    reader.start()
    event = BlockStored([1, 2, 3, 4], 5, list(range(64)), 16, None, "GPU", None, group_idx=0)
    batch: list[KVEvent] = [event] * events_per_batch
    t0 = time.perf_counter()
    for _ in range(num_batches):
        publisher.publish(batch)
    reader.join()
    elapsed = time.perf_counter() - t0
    publisher.close()
    sub.close()
    ctx.term()
    out = {
        "batches": num_batches,
        "events_per_batch": events_per_batch,
        "received_batches": received[0],
        "dropped": publisher.dropped,
        "seconds": elapsed,
        "events_per_s": received[0] * events_per_batch / elapsed,
        "batches_per_s": received[0] / elapsed,
    }
    print(json.dumps(out))
    return out


ROUTING_ROUTERS = ("round-robin", "least-loaded", "cache-aware")


def _routing_run(task: tuple[ReplayOptions, str]) -> dict[str, Any]:
    """One cluster replay: "one" (one instance, 4x the memory), a router's name, or
    "cache-aware:VARIANT" (`CacheAware` with `benchmarks.hybrid_routing.VARIANTS[VARIANT]`,
    or the cluster dispatching as `DISPATCHES[VARIANT]` says)."""
    base, router = task
    if router == "one":
        return Cluster(base.updated(full_tokens=4 << 20), 1, "round-robin").run()
    name, _, variant = router.partition(":")
    if not variant:
        return Cluster(base, 4, name).run()
    if variant in DISPATCHES:  # the default router, dispatched late and / or awaiting turns
        return Cluster(base, 4, name, None, **DISPATCHES[variant]).run()
    options = VARIANTS[variant]
    return Cluster(
        base, 4, lambda index, names, recent: make_router(name, index, names, recent, **options)
    ).run()


def bench_routing(
    max_requests: int | None, routers: Sequence[str] = ROUTING_ROUTERS, jobs: int = 1
) -> dict[str, Any]:
    base = ReplayOptions.of(
        trace=TRACE, config="full", page_size=16, full_tokens=1 << 20, max_requests=max_requests
    )
    with ProcessPoolExecutor(jobs) as pool:
        summaries = list(pool.map(_routing_run, [(base, r) for r in ["one", *routers]]))
    one = summaries[0]
    out: dict[str, Any] = {"one_instance_4M": _brief(one)}
    print("one", json.dumps(out["one_instance_4M"]))
    for router, summary in zip(routers, summaries[1:], strict=True):
        out[router] = _brief(summary)
        out[router]["vs_one_instance"] = summary["hit_rate"] / one["hit_rate"]
        print(router, json.dumps(out[router]))
    return out


def _brief(summary: dict[str, Any]) -> dict[str, Any]:
    keep = ("requests", "hit_rate", "load_imbalance", "events_published", "events_dropped")
    out = {k: summary[k] for k in keep}
    out["instance_hit_rates"] = [round(i["hit_rate"], 4) for i in summary["instances"]]
    out["instance_requests"] = [i["requests"] for i in summary["instances"]]
    out["wall_s"] = round(summary["wall_s"], 1)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("part", choices=("ops", "hashing", "publisher", "routing"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--page-sizes", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--before", help="git revision whose recorder runs as `zmq_before`")
    parser.add_argument(
        "--python-hashing",
        action="store_true",
        help="ops: also run hash_only, null and zmq with the native module off (*_pyhash)",
    )
    parser.add_argument(
        "--eager-flush",
        action="store_true",
        help="ops: also run null and zmq with the step packed at the flush (*_eager)",
    )
    parser.add_argument(
        "--flush-hashing",
        action="store_true",
        help="ops: also run null and zmq hashing the step at the flush (*_hashed)",
    )
    parser.add_argument(
        "--cool-kb",
        type=int,
        nargs="+",
        default=[0, 4096],
        help="KiB written between steps (ops; 0: none), each value a variant of every mode",
    )
    parser.add_argument(
        "--streams", nargs="+", choices=sorted(OPS_STREAMS), default=["chat", "mooncake"]
    )
    parser.add_argument("--batches", type=int, default=20000)
    parser.add_argument("--events-per-batch", type=int, default=8)
    parser.add_argument("--max-requests", type=int)
    parser.add_argument(
        "--routers",
        default=",".join(ROUTING_ROUTERS),
        help="routing: comma-separated routers, `cache-aware:VARIANT` for a router option "
        "of benchmarks.hybrid_routing.VARIANTS or a dispatch of its DISPATCHES (results then "
        "go under 'variants' or 'dispatch')",
    )
    parser.add_argument("--jobs", type=int, default=1, help="routing: replays run at once")
    parser.add_argument("--tokens", type=int, default=131072, help="prefix length (hashing)")
    args = parser.parse_args()
    if args.part == "ops":
        result = bench_ops(
            args.rounds,
            args.page_sizes,
            args.before,
            args.cool_kb,
            args.streams,
            args.python_hashing,
            args.eager_flush,
            args.flush_hashing,
        )
    elif args.part == "hashing":
        result = bench_hashing(args.tokens, args.before)
    elif args.part == "publisher":
        result = bench_publisher(args.batches, args.events_per_batch)
    else:
        routers = args.routers.split(",")
        for router in routers:
            name, _, variant = router.partition(":")
            if name not in ROUTING_ROUTERS or (variant and variant not in VARIANTS | DISPATCHES):
                parser.error(f"unknown router {router!r}")
        result = bench_routing(args.max_requests, routers, args.jobs)
    revision = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    result = {
        "command": "python -m benchmarks.bench_events " + " ".join(sys.argv[1:]),
        "commit": revision,
        "load_at_end": [round(x, 2) for x in os.getloadavg()],
        **result,
    }
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"events_{args.part}.json"
    if args.part == "routing" and args.routers != ",".join(ROUTING_ROUTERS):
        # Router options go under "variants" (dispatches under "dispatch"), next to the
        # default routers' run.
        late = any(r.partition(":")[2] in DISPATCHES for r in routers)
        key = "dispatch" if late else "variants"
        if args.max_requests:  # a shorter run beside the whole trace's
            key += f"_{args.max_requests}_requests"
        result = json.loads(path.read_text()) | {key: result} if path.exists() else result
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
