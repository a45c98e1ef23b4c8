"""KV events: what they cost the cache, how fast the publisher goes, and what cache-aware
routing buys on the Mooncake trace.

    .venv/bin/python -m benchmarks.bench_events ops        # per-op cost, events off vs on
    .venv/bin/python -m benchmarks.bench_events publisher  # events/s over loopback ZMQ
    .venv/bin/python -m benchmarks.bench_events routing    # 4 instances x 3 routers vs 1

`ops` plays the same request stream (`benchmarks/streams.py`, the call sequence of
`benchmarks/ops.py`) on caches without a sink and with a `KVEventStream` publishing to a real
ZMQ socket, alternating off/on/off/on in one process. The timed cache calls show the hook's
cost; the flush (deferred hashing, coalescing, queueing; encoding and sending run on the
publisher's thread) is timed apart, per request, since it runs once per scheduler step.
Results go to `benchmarks/results/events_<part>.json`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
from pathlib import Path
from typing import Any

import zmq

from benchmarks.ops import play
from benchmarks.streams import StreamSpec, requests
from benchmarks.uniradix_side import FullAdapter, build_full
from uniradix.events import (
    BlockStored,
    KVEventsConfig,
    KVEventStream,
    NullEventPublisher,
    ZmqEventPublisher,
)
from uniradix.events.types import KVEvent
from uniradix.sim.cluster import run_cluster
from uniradix.sim.replay import ReplayOptions
from uniradix.types import InsertResult

ROOT = Path(__file__).resolve().parents[1]
TRACE = str(ROOT.parent / "shared/reference/mooncake_synthetic_trace.jsonl")
RESULTS = Path(__file__).resolve().parent / "results"
CACHE_OPS = ("match", "lock", "evict", "alloc", "insert", "unlock")


class EventsAdapter(FullAdapter):
    """FullAdapter whose cache publishes KV events; flushes once per request (a step)."""

    def __init__(self, adapter: FullAdapter, use_zmq: bool) -> None:
        super().__init__(adapter.cache)
        config = KVEventsConfig(endpoint="tcp://127.0.0.1:*")
        publisher = ZmqEventPublisher(config) if use_zmq else NullEventPublisher()
        self.stream = KVEventStream(self.cache, [publisher])
        self.flush_ns: list[int] = []

    def after_insert(self, result: InsertResult, state: Any) -> None:
        t0 = time.perf_counter_ns()
        self.stream.flush()
        self.flush_ns.append(time.perf_counter_ns() - t0)


class IdleSink:
    """A sink that ignores every report: the hook sites' own cost, nothing downstream."""

    def on_stored(self, node: Any, medium: str) -> None:
        return

    def on_removed(self, node: Any, medium: str) -> None:
        return

    def on_cleared(self) -> None:
        return

    def redistribute_on_split(self, parent: Any, child: Any, split_len: int) -> None:
        return


def _op_totals(result: dict[str, Any]) -> tuple[float, int]:
    ops = result["ops"]
    total_ms = sum(ops[op]["total_ms"] for op in CACHE_OPS if op in ops)
    return total_ms, sum(ops[op]["count"] for op in CACHE_OPS if op in ops)


def bench_ops(rounds: int) -> dict[str, Any]:
    streams = {
        "chat": (StreamSpec("chat"), 1 << 16),
        "mooncake": (StreamSpec("mooncake", scale=0.1, trace_path=TRACE), 1 << 20),
    }
    out: dict[str, Any] = {}
    for name, (spec, pool) in streams.items():
        runs: dict[str, list[dict[str, Any]]] = {"off": [], "hook": [], "on": [], "on_null": []}
        for _ in range(rounds):
            for mode in runs:
                adapter = build_full(16, pool)
                if mode == "hook":
                    adapter.cache.set_event_sink(IdleSink())
                elif mode != "off":
                    adapter = EventsAdapter(adapter, use_zmq=mode == "on")
                result = play(adapter, requests(spec))
                total_ms, count = _op_totals(result)
                run = {"cache_ops_ms": total_ms, "ops": count, "hit_rate": result["hit_rate"]}
                run["requests"] = result["requests"]
                run["median_us"] = {
                    op: v["median_us"] for op, v in result["ops"].items() if op in CACHE_OPS
                }
                run["counts"] = {
                    op: v["count"] for op, v in result["ops"].items() if op in CACHE_OPS
                }
                if isinstance(adapter, EventsAdapter):
                    run["flush_ms"] = sum(adapter.flush_ns) / 1e6
                    run["events"] = adapter.stream.events_published
                    adapter.stream.close()
                runs[mode].append(run)
        off = statistics.median(r["cache_ops_ms"] for r in runs["off"])
        on = statistics.median(r["cache_ops_ms"] for r in runs["on"])
        flush = statistics.median(r["flush_ms"] for r in runs["on"])
        # Per call, robust to a noisy machine: each op's median over the rounds' medians,
        # weighted by its call count.
        typical = {
            mode: sum(
                statistics.median(r["median_us"][op] for r in runs[mode]) * count
                for op, count in runs[mode][0]["counts"].items()
            )
            for mode in runs
        }
        out[name] = {
            "runs": runs,
            "median_weighted_overhead": typical["on"] / typical["off"] - 1,
            "median_weighted_overhead_hook_only": typical["hook"] / typical["off"] - 1,
            "median_weighted_overhead_null_publisher": typical["on_null"] / typical["off"] - 1,
            "per_op_us_off": 1000 * off / runs["off"][0]["ops"],
            "per_op_us_on": 1000 * on / runs["on"][0]["ops"],
            "cache_ops_overhead": on / off - 1,
            "with_flush_overhead": (on + flush) / off - 1,
            "flush_us_per_request": 1000 * flush / runs["on"][0]["requests"],
            "flush_share_of_cache_ops": flush / off,
        }
        print(name, json.dumps({k: v for k, v in out[name].items() if k != "runs"}))
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


def bench_routing(max_requests: int | None) -> dict[str, Any]:
    base = ReplayOptions(
        trace=TRACE, config="full", page_size=16, full_tokens=1 << 20, max_requests=max_requests
    )
    out: dict[str, Any] = {}
    one = run_cluster(ReplayOptions(**{**vars(base), "full_tokens": 4 << 20}), 1, "round-robin")
    out["one_instance_4M"] = _brief(one)
    print("one", json.dumps(out["one_instance_4M"]))
    for router in ("round-robin", "least-loaded", "cache-aware"):
        summary = run_cluster(base, 4, router)
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
    parser.add_argument("part", choices=("ops", "publisher", "routing"))
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--batches", type=int, default=20000)
    parser.add_argument("--events-per-batch", type=int, default=8)
    parser.add_argument("--max-requests", type=int)
    args = parser.parse_args()
    if args.part == "ops":
        result = bench_ops(args.rounds)
    elif args.part == "publisher":
        result = bench_publisher(args.batches, args.events_per_batch)
    else:
        result = bench_routing(args.max_requests)
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"events_{args.part}.json"
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
