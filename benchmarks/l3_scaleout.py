"""Four instances sharing one L3 store against one instance holding all their memory.

Each row runs `uniradix replay --trace TRACE --config full --page-size 16 --full-tokens
1048576 --host-tokens 1048576 --instances 4 --router R --max-requests N --json
[--storage URL]` as a user would, in its own process, for R in round-robin and cache-aware
and the store in: none, one shared Redis, one shared Redis Cluster (3 masters), each store
emptied before the run. The ideal is the trace's `ideal_hit_rate` (every repeated prefix a
hit) from one instance with all four instances' memory (`--full-tokens 4194304
--host-tokens 4194304`), whose own hit rate is shown too. Targets: round-robin >= 0.8x the
ideal, cache-aware >= 0.9x.

The servers are local `redis-server` processes without persistence on free loopback ports.
Run from the repository root:
`python -m benchmarks.l3_scaleout [--trace TRACE] [--requests 1000] [--out
benchmarks/results/storage.md]` (`--requests 0`: the whole trace; the trace defaults to
`benchmarks.trace.TRACE`, `$UNIRADIX_TRACE`). `--out` replaces this benchmark's section for
that many requests in that file (or appends it), leaving the rest as it is.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.redis_servers import RedisProcess, start_cluster
from benchmarks.trace import TRACE

HEADING = "## Scale-out: 4 instances sharing L3"
PER_INSTANCE = ["--full-tokens", "1048576", "--host-tokens", "1048576"]
ALL_MEMORY = ["--full-tokens", "4194304", "--host-tokens", "4194304"]
ROUTERS = ("round-robin", "cache-aware")


@dataclass
class Row:
    router: str
    store: str
    wall_s: float
    summary: dict[str, Any]


def replay(trace: str, requests: int, extra: list[str]) -> tuple[float, dict[str, Any]]:
    argv = [sys.executable, "-m", "uniradix.cli", "replay", "--trace", trace, "--config",
            "full", "--page-size", "16", "--json", *extra]  # fmt: skip
    if requests:
        argv += ["--max-requests", str(requests)]
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    wall_s = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"replay failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return wall_s, json.loads(proc.stdout)


def run_all(trace: str, requests: int, work: Path) -> tuple[dict[str, Any], list[Row]]:
    one = RedisProcess(work / "one").start()
    nodes = start_cluster(work / "cluster", RedisProcess)
    stores = {
        "no L3": None,
        "shared Redis": f"{one.url()}?timeout_s=10",
        "shared Redis Cluster (3 masters)": f"redis+cluster://127.0.0.1:{nodes[0].port}"
        "?timeout_s=10",
    }
    try:
        _, ideal = replay(trace, requests, ALL_MEMORY)
        rows = []
        for router in ROUTERS:
            for store, url in stores.items():
                for server in [one, *nodes]:
                    server.client().flushall()
                extra = [*PER_INSTANCE, "--instances", "4", "--router", router]
                wall_s, summary = replay(
                    trace, requests, extra + (["--storage", url] if url else [])
                )
                rows.append(Row(router, store, wall_s, summary))
                print(render_row(rows[-1], ideal["ideal_hit_rate"]), flush=True)
        return ideal, rows
    finally:
        one.stop()
        for node in nodes:
            node.stop()


def render_row(row: Row, ideal: float) -> str:
    s = row.summary
    per = ", ".join(f"{inst['hit_rate']:.3f}" for inst in s["instances"])
    store = s.get("storage")
    read = "-" if store is None else f"{store['pages_read']:,}"
    written = "-" if store is None else f"{store['pages_written']:,}"
    missed = "-" if store is None else f"{store['pages_missed']:,}"
    return (
        f"| {row.router} | {row.store} | {s['hit_rate']:.4f} | {s['hit_rate'] / ideal:.2f}× | "
        f"{per} | {read} | {written} | {missed} | {row.wall_s:.0f} s |"
    )


def render(ideal: dict[str, Any], rows: list[Row], requests: int, trace: str) -> str:
    n = f"first {requests:,} requests" if requests else f"all {ideal['requests']:,} requests"
    target = ideal["ideal_hit_rate"]
    lines = [
        f"{HEADING} ({n})",
        "",
        f"`python -m benchmarks.l3_scaleout --trace {Path(trace).name} --requests {requests}`: "
        "full attention, page 16, each instance device 1M + host 1M tokens; ideal "
        f"{target:.4f} (the trace's `ideal_hit_rate`); one instance with all the memory "
        f"(device 4M + host 4M, no L3) reaches {ideal['hit_rate']:.4f} "
        f"({ideal['hit_rate'] / target:.2f}×). Targets: round-robin ≥ 0.8×, cache-aware ≥ 0.9×.",
        "",
        "| routing | L3 | hit rate | × ideal | per instance | L3 pages read | written | missed "
        "| wall |",
        "|---|---|---|---|---|---|---|---|---|",
        *(render_row(row, target) for row in rows),
        "",
    ]
    return "\n".join(lines)


def replace_section(path: Path, text: str) -> None:
    """Puts `text` (a section: a `## ` heading line, then its body) in place of the file's
    section with the same heading line (so the first 1,000 requests and the whole trace keep
    a section each), or at the file's end."""
    old = path.read_text() if path.exists() else ""
    heading = text.split("\n", 1)[0] + "\n"
    start = old.find(heading)
    if start < 0:
        path.write_text(old.rstrip("\n") + "\n\n" + text if old else text)
        return
    end = old.find("\n## ", start + len(heading))
    rest = "" if end < 0 else old[end + 1 :]
    path.write_text(old[:start] + text + ("\n" + rest if rest else ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--trace", default=str(TRACE), help="a Mooncake-format JSONL trace (default: %(default)s)"
    )
    parser.add_argument("--requests", type=int, default=1000, help="first N (0: all)")
    parser.add_argument("--out", help="the results file whose section to replace")
    args = parser.parse_args()
    if args.requests < 0:
        parser.error(f"--requests must be >= 0, got {args.requests}")
    work = Path(tempfile.mkdtemp(prefix="uniradix-scaleout-"))
    try:
        ideal, rows = run_all(args.trace, args.requests, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    text = render(ideal, rows, args.requests, args.trace)
    print(text)
    if args.out:
        replace_section(Path(args.out), text)


if __name__ == "__main__":
    main()
