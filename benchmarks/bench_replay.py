"""Replays the whole public Mooncake trace through the real cache (invariant checks off) and
prints requests/s, hit rate against the ideal (unbounded) cache, and peak usage of each pool,
per config and full-pool size.

    .venv/bin/python -m benchmarks.bench_replay [--configs full swa mamba hybrid]
        [--full-tokens N ...] [--page-size P] [--sliding-window W] [--swa-fraction F]
"""

from __future__ import annotations

import argparse
import json
import sys

from benchmarks.trace import TRACE
from uniradix.sim.replay import ReplayOptions, run_replay


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", default=str(TRACE))
    parser.add_argument("--configs", nargs="+", default=["full", "swa", "mamba", "hybrid"])
    parser.add_argument("--page-size", type=int, default=16)
    parser.add_argument("--full-tokens", type=int, nargs="+", default=[1 << 20, 1 << 22])
    parser.add_argument("--sliding-window", type=int, default=4096)
    parser.add_argument("--swa-fraction", type=float, default=0.25, help="SWA pool / full pool")
    parser.add_argument("--mamba-slots", type=int, default=512)
    parser.add_argument("--max-running", type=int, default=64)
    parser.add_argument("--chunk-size", type=int, default=8192)
    parser.add_argument("--max-requests", type=int, default=None)
    parser.add_argument("--json", help="also write the summaries to this file")
    args = parser.parse_args()
    rows = []
    print(
        f"{'config':>7} {'full_tokens':>11} {'requests':>8} {'req/s':>7} {'hit':>7} {'ideal':>7} "
        f"{'retract':>7} {'wall_s':>7}  peak used / capacity per pool"
    )
    for config in args.configs:
        for full_tokens in args.full_tokens:
            s = run_replay(
                ReplayOptions.of(
                    trace=args.trace,
                    config=config,
                    page_size=args.page_size,
                    full_tokens=full_tokens,
                    swa_tokens=int(full_tokens * args.swa_fraction),
                    sliding_window=args.sliding_window,
                    mamba_slots=args.mamba_slots,
                    max_running=args.max_running,
                    chunk_size=args.chunk_size,
                    max_requests=args.max_requests,
                    progress=True,
                )
            ).summary
            peaks = ", ".join(
                f"{pool} {c['peak_used']}/{c['capacity']}" for pool, c in s["components"].items()
            )
            print(
                f"{config:>7} {full_tokens:>11} {s['requests']:>8} {s['requests_per_s']:>7.1f} "
                f"{s['hit_rate']:>7.2%} {s['ideal_hit_rate']:>7.2%} {s['retractions']:>7} "
                f"{s['wall_s']:>7.1f}  {peaks}",
                flush=True,
            )
            if any(s["leaked"].values()):
                print(f"leaked: {s['leaked']}", file=sys.stderr)
                return 1
            rows.append(s)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
