"""The session cache's figure: follow-up-turn hit rate with and without sessions, and what it
costs the other requests, on an agentic workload with interfering one-off traffic and a
device pool at a fraction (default 1/4) of the working set (the unique tokens an unbounded
cache would hold). "unbounded" rows use a pool of twice the working set (no eviction): the
reference each config's follow-up hits are compared with.

    .venv/bin/python benchmarks/bench_sessions.py [--workload agentic_interfered]
        [--configs full hybrid] [--fraction 0.25] [--page-size 1] [--mamba-slots N] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys

from uniradix.sim.ideal import ideal_hits
from uniradix.sim.replay import ReplayOptions, run_replay
from uniradix.sim.workloads import generate_workload


def working_set_tokens(workload: str, seed: int) -> int:
    """Unique tokens of the workload: every computed token minus those an unbounded cache
    would have served from an earlier request."""
    specs = generate_workload(workload, seed)
    computed = sum(len(s.prompt) + s.output_len for s in specs)
    return computed - sum(ideal_hits(specs, 1))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="agentic_interfered")
    parser.add_argument("--configs", nargs="+", default=["full", "hybrid"])
    parser.add_argument("--fraction", type=float, default=0.25)
    parser.add_argument("--page-size", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--mamba-slots", type=int, help="default: 4 per running request")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    specs = generate_workload(args.workload, args.seed)
    working_set = working_set_tokens(args.workload, args.seed)
    pool = int(working_set * args.fraction) // args.page_size * args.page_size
    unbounded = 2 * working_set // args.page_size * args.page_size  # nothing is ever evicted
    rows = []
    for config in args.configs:
        for name, sessions, size in (
            ("unbounded", False, unbounded),
            ("off", False, pool),
            ("on", True, pool),
        ):
            options = ReplayOptions.of(
                workload=args.workload,
                config=config,
                page_size=args.page_size,
                full_tokens=size,
                sliding_window=1024,
                # unbounded: a state slot for every request too
                mamba_slots=4 * len(specs) if name == "unbounded" else args.mamba_slots,
                seed=args.seed,
                sessions=sessions,
            )
            s = run_replay(options).summary
            rows.append(
                {
                    "config": config,
                    "sessions": name,
                    "followup_hit_rate": s["session_followup_hit_rate"],
                    "followup_ideal_hit_rate": s["session_followup_ideal_hit_rate"],
                    "other_hit_rate": s["other_hit_rate"],
                    "other_ideal_hit_rate": s["other_ideal_hit_rate"],
                    "hit_rate": s["hit_rate"],
                    "evicted_while_covered": s["sessions"]["evicted_while_covered"],
                    "wall_s": s["wall_s"],
                }
            )
    if args.json:
        print(json.dumps({"working_set": working_set, "pool": pool, "rows": rows}))
        return 0
    print(f"# {args.workload}: working set {working_set} tokens, device pool {pool}")
    print("| config | sessions | follow-up hit rate (of unbounded) | other requests | all |")
    print("|---|---|---|---|---|")
    reference: dict[str, float] = {}
    for r in rows:
        if r["sessions"] == "unbounded":
            reference[r["config"]] = r["followup_hit_rate"]
        kept = r["followup_hit_rate"] / max(reference[r["config"]], 1e-12)
        print(
            f"| {r['config']} | {r['sessions']} | {r['followup_hit_rate']:.4f} ({kept:.1%}) | "
            f"{r['other_hit_rate']:.4f} | {r['hit_rate']:.4f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
