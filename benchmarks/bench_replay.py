"""Replays the whole public Mooncake trace through the real cache (invariant checks off) and
prints requests/s, hit rate against the ideal (unbounded) cache, and peak pool usage, for a
few full-attention pool sizes.

    PYTHONPATH=. python3 benchmarks/bench_replay.py [--full-tokens N ...] [--page-size P]
"""

from __future__ import annotations

import argparse
import json
import sys

from uniradix.sim.replay import ReplayOptions, run_replay

TRACE = "/work/shared/reference/mooncake_synthetic_trace.jsonl"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", default=TRACE)
    parser.add_argument("--page-size", type=int, default=16)
    parser.add_argument("--full-tokens", type=int, nargs="+", default=[1 << 20, 1 << 22])
    parser.add_argument("--max-running", type=int, default=64)
    parser.add_argument("--chunk-size", type=int, default=8192)
    parser.add_argument("--max-requests", type=int, default=None)
    parser.add_argument("--json", help="also write the summaries to this file")
    args = parser.parse_args()
    rows = []
    print(
        f"{'full_tokens':>12} {'requests':>8} {'req/s':>7} {'hit':>7} {'ideal':>7} "
        f"{'peak_used':>10} {'evicted':>11} {'retract':>7} {'wall_s':>7}"
    )
    for full_tokens in args.full_tokens:
        s = run_replay(
            ReplayOptions(
                trace=args.trace,
                config="full",
                page_size=args.page_size,
                full_tokens=full_tokens,
                max_running=args.max_running,
                chunk_size=args.chunk_size,
                max_requests=args.max_requests,
                progress=True,
            )
        ).summary
        full = s["components"]["full"]
        print(
            f"{full_tokens:>12} {s['requests']:>8} {s['requests_per_s']:>7.1f} "
            f"{s['hit_rate']:>7.2%} {s['ideal_hit_rate']:>7.2%} {full['peak_used']:>10} "
            f"{full['evicted']:>11} {s['retractions']:>7} {s['wall_s']:>7.1f}",
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
