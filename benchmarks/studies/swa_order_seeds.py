"""Two SWA orders side by side over many seeds of one built-in workload (or several traces):
whether a row one order loses at seed 0 is a systematic loss or the seed's luck.

    .venv/bin/python -m benchmarks.studies.swa_order_seeds --source agentic --config hybrid
        --window 1024 --mamba-slots 16 24 32 --seeds 30
        [--orders study:greedy_dual study:greedy_dual_window] [--traces A.jsonl B.jsonl]

Sizes as `benchmarks.hybrid_hits` (issue 14's: page 16, full KV a quarter of each seed's
working set, SWA pool a quarter of that or its floor), so seed 0 of a workload is that
benchmark's row. A built-in workload draws its requests from `seed`; with `--traces` each
trace is one draw (made by `benchmarks.studies.variant_trace --seed N`) and `--seeds` is unused.
Prints, per Mamba slot count, each order's mean ratio to full-only, how often the second
order wins and loses against the first, and every draw's pair.
"""

from __future__ import annotations

import argparse
import sys

from benchmarks.hybrid_hits import base_options, full_pool, sized
from benchmarks.studies.retired_orders import GREEDY_DUAL, GREEDY_DUAL_WINDOW
from uniradix.sim.replay import ReplayOptions, run_replay


def ratios(
    base: ReplayOptions, orders: list[str], config: str, window: int, slots: int
) -> list[float]:
    """Each order's hit rate over full-only's on `base`'s requests at issue 14's sizes."""
    full_tokens, _ = full_pool(base)
    base = base.updated(full_tokens=full_tokens)
    full = run_replay(base.updated(config="full")).summary["hit_rate"]
    rates = [
        run_replay(sized(base.updated(swa_eviction_policy=o), config, window, 1, slots)).summary[
            "hit_rate"
        ]
        for o in orders
    ]
    return [r / full if full else 1.0 for r in rates]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", default="agentic", help="a built-in workload (or 'trace')")
    parser.add_argument("--traces", nargs="+", help="trace files, one draw each")
    parser.add_argument("--config", default="hybrid", choices=["swa", "hybrid"])
    parser.add_argument("--window", type=int, default=1024)
    parser.add_argument("--mamba-slots", type=int, nargs="+", default=[24])
    parser.add_argument("--seeds", type=int, default=30)
    parser.add_argument("--orders", nargs=2, default=[GREEDY_DUAL, GREEDY_DUAL_WINDOW])
    args = parser.parse_args()
    if args.seeds < 1:
        raise ValueError(f"--seeds={args.seeds} must be positive")
    if args.traces:
        draws = [(t, base_options("trace", t)) for t in args.traces]
    else:
        draws = [
            (f"seed {s}", base_options(args.source, "").updated(seed=s)) for s in range(args.seeds)
        ]
    first, second = args.orders
    print(f"| Mamba slots | {first} mean | {second} mean | wins | losses | ties | draws |")
    print("|---|---|---|---|---|---|---|")
    for slots in args.mamba_slots:
        pairs = [ratios(b, args.orders, args.config, args.window, slots) for _, b in draws]
        wins = sum(b > a for a, b in pairs)
        losses = sum(b < a for a, b in pairs)
        each = " ".join(f"{a:.3f}/{b:.3f}" for a, b in pairs)
        mean_a = sum(a for a, _ in pairs) / len(pairs)
        mean_b = sum(b for _, b in pairs) / len(pairs)
        print(
            f"| {slots} | {mean_a:.4f} | {mean_b:.4f} | {wins} | {losses} "
            f"| {len(pairs) - wins - losses} | {each} |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
