"""SGLang's `UnifiedRadixCache` per op on three TreeCores: uniradix's ("uniradix",
`uniradix.integrations.sglang`), SGLang's Rust core and its Python core.

    .venv/bin/python benchmarks/sglang_cores.py [--workloads chat,fewshot] [--page-sizes 1]
        [--configs full,full+swa,full+mamba] [--scale 1.0] [--pool-tokens 16384]
        [--out benchmarks/results/sglang_cores.md]

Needs SGLang 0.5.23 in .venv (scripts/setup_sglang.sh). Each core gets its own cache on the
same pools and plays the same request stream (`benchmarks/streams.py`) through the same
driver (`benchmarks/peer/sglang_driver.py`, `benchmarks/ops.py`); the three take turns,
a few batches each, so machine noise falls on all alike. The table gives per-op medians and
the uniradix/Rust ratio (below 1: uniradix faster), and each core's hit rate: they must be
equal (the cores cache the same tokens), as must the KV events each emits (a digest of
SGLang's events, from a second, untimed pass with events on); the run fails if either
differs.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
from pathlib import Path
from typing import Any

import msgspec

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks" / "peer"))

from stubs import install_stubs  # noqa: E402

install_stubs()

import uniradix.integrations.sglang  # noqa: E402, F401  (registers the "uniradix" core)
from benchmarks.ops import OPS, Measurement, Player  # noqa: E402
from benchmarks.peer.sglang_driver import SGLangAdapter, build_cache  # noqa: E402
from benchmarks.streams import StreamSpec, requests  # noqa: E402

CORES = ("uniradix", "rust", "python")
SHOWN_OPS = ("match", "insert", "evict")
BATCH = 16
TURN_BATCHES = 4


def _adapter(
    core: str, config: str, page_size: int, pool_tokens: int, kv_events: bool
) -> SGLangAdapter:
    os.environ["SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND"] = core
    cache = build_cache(config, page_size, pool_tokens, kv_events=kv_events)
    return SGLangAdapter(cache, page_size)


def _digest_events(digest: Any, cache: Any) -> None:
    """Folds the KV events the cache queued since the last call into `digest`."""
    for event in cache.take_events():
        digest.update(msgspec.msgpack.encode(event))


def event_digests(
    spec: StreamSpec, config: str, page_size: int, pool_tokens: int
) -> dict[str, str]:
    """An untimed pass per core with KV events on (SGLang's Python recorder hashes every
    page in Python, which would swamp the timed ops): the digest of all its events."""
    digests = {}
    for core in CORES:
        adapter = _adapter(core, config, page_size, pool_tokens, kv_events=True)
        player, digest = Player(adapter, requests(spec), BATCH), hashlib.sha256()
        while not player.step(TURN_BATCHES):
            _digest_events(digest, adapter.cache)
        _digest_events(digest, adapter.cache)
        digests[core] = digest.hexdigest()[:16]
    return digests


def run_stream(
    workload: str, config: str, page_size: int, scale: float, pool_tokens: int
) -> dict[str, Any]:
    spec = StreamSpec(workload=workload, scale=scale, batch=BATCH)
    runs, classes = {}, {}
    for core in CORES:
        adapter = _adapter(core, config, page_size, pool_tokens, kv_events=False)
        classes[core] = type(adapter.cache.tree_core).__name__
        runs[core] = Measurement(
            lambda a=adapter: a, lambda: requests(spec), heap=False, batch=BATCH
        )
    done: set[str] = set()
    while len(done) < len(CORES):
        for core in CORES:
            if core not in done and runs[core].step(TURN_BATCHES):
                done.add(core)
    results = {core: runs[core].finish() for core in CORES}
    rates = {core: round(r["hit_rate"], 9) for core, r in results.items()}
    if len(set(rates.values())) != 1:
        raise SystemExit(f"{workload} {config} p{page_size}: hit rates differ: {rates}")
    events = event_digests(spec, config, page_size, pool_tokens)
    if len(set(events.values())) != 1:
        raise SystemExit(f"{workload} {config} p{page_size}: KV events differ: {events}")
    return {"results": results, "classes": classes, "events": events["uniradix"]}


def _op(result: dict[str, Any], op: str) -> float:
    """The op's median, NaN where the stream never called it (no eviction in a roomy pool)."""
    stats = result["ops"].get(op)
    return float(stats["median_us"]) if stats else float("nan")


def table(rows: list[tuple[str, str, int, dict[str, Any]]], command: str) -> str:
    lines = [
        "# SGLang's UnifiedRadixCache per op: uniradix core vs SGLang's Rust and Python cores",
        "",
        f"Command: `{command}`",
        "",
        "Median µs per call (CPU; config: the cache's components, SWA window 128);"
        " `u/rust`: uniradix over Rust (below 1:"
        " uniradix faster), KV events off. Hit rates, and KV events (sha256 of SGLang's events"
        " in order, from a second, untimed pass with events on), are equal across the three"
        " cores (checked by the run).",
        "",
        "| workload | config | page | op | uniradix | rust | python | u/rust | hit rate"
        " | KV events |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for workload, config, page_size, run in rows:
        r = run["results"]
        for op in SHOWN_OPS:
            u, rust, py = (_op(r[c], op) for c in CORES)
            lines.append(
                f"| {workload} | {config} | {page_size} | {op} | {u:.1f} | {rust:.1f} | {py:.1f} |"
                f" {u / rust:.2f} | {r['uniradix']['hit_rate']:.4f} | {run['events']} |"
            )
    classes = rows[0][3]["classes"] if rows else {}
    lines += ["", "Tree core classes built: " + ", ".join(f"{k}={v}" for k, v in classes.items())]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workloads", default="chat,fewshot")
    p.add_argument("--page-sizes", default="1")
    p.add_argument("--configs", default="full", help="full, full+swa, full+mamba (comma-separated)")
    p.add_argument(
        "--scale",
        type=float,
        default=1.0,
        help="stream size (1.0: 1,000-1,280 inserts a cell; at 0.3 ratios scatter ±5%% a run)",
    )
    p.add_argument("--pool-tokens", type=int, default=16384)
    p.add_argument("--out", type=Path, default=REPO / "benchmarks/results/sglang_cores.md")
    args = p.parse_args(argv)
    assert set(SHOWN_OPS) <= set(OPS), f"ops {SHOWN_OPS} not all measured by benchmarks/ops.py"
    rows = []
    for workload in args.workloads.split(","):
        for config in args.configs.split(","):
            for page_size in (int(x) for x in args.page_sizes.split(",")):
                run = run_stream(workload, config, page_size, args.scale, args.pool_tokens)
                rows.append((workload, config, page_size, run))
    command = "python benchmarks/sglang_cores.py " + " ".join(
        sys.argv[1:] if argv is None else argv
    )
    text = table(rows, command.strip())
    args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
