"""CPU seconds, wall and peak RSS of the Mooncake replay (page 16, every config) for two
source trees, run interleaved so both see the same machine load, and whether their results
are identical.

    .venv/bin/python -m benchmarks.replay_cpu --before /tmp/base --after . [--repeats 3]
        [--configs full swa mamba hybrid] [--json benchmarks/results/replay_cpu.json]

Each run is `python -m uniradix.cli replay --trace TRACE --page-size 16 --config C --json` in
a child process with the tree's directory first on PYTHONPATH; its CPU time (user + system,
from `os.wait4`), wall time and peak RSS (`ru_maxrss`, what `/usr/bin/time -v` reports)
cover the whole command, imports included; the replay's own `wall_s` (the `Scheduler.run`
loop) is read from its JSON. Before and after alternate,
and which goes first alternates per repeat. Results are compared with `replay_diff` (JSON
minus timings); the script exits 1 if any pair differs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.replay_diff import differences, without_timings
from benchmarks.trace import TRACE

FIGURES = ("cpu_s", "process_wall_s", "replay_wall_s", "peak_rss_mb")


def run_once(tree: Path, config: str, trace: str, out: Path) -> dict[str, float]:
    """`FIGURES` of one replay run from `tree`, its JSON written to `out`."""
    env = dict(os.environ, PYTHONPATH=str(tree.resolve()))
    command = [sys.executable, "-m", "uniradix.cli", "replay", "--trace", trace]
    command += ["--page-size", "16", "--config", config, "--json", "--no-progress"]
    t0 = time.perf_counter()
    with out.open("w") as f:
        proc = subprocess.Popen(command, stdout=f, env=env, cwd=tempfile.gettempdir())
        _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(command)} (from {tree}) failed")
    return {
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "process_wall_s": wall,
        "replay_wall_s": float(json.loads(out.read_text())["wall_s"]),
        "peak_rss_mb": usage.ru_maxrss / 1024,  # Linux reports KiB
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True, help="source tree (repo root)")
    parser.add_argument("--after", type=Path, required=True, help="source tree (repo root)")
    parser.add_argument("--configs", nargs="+", default=["full", "swa", "mamba", "hybrid"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--trace", default=str(TRACE))
    parser.add_argument("--json", help="also write the CPU seconds to this file")
    args = parser.parse_args()
    trees = {"before": args.before, "after": args.after}
    runs: dict[str, dict[str, list[dict[str, float]]]] = {
        c: {"before": [], "after": []} for c in args.configs
    }
    differing = []
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.repeats):
            for config in args.configs:
                order = ["before", "after"] if rep % 2 == 0 else ["after", "before"]
                outs = {side: Path(tmp, f"{side}_{config}.json") for side in order}
                for side in order:
                    runs[config][side].append(run_once(trees[side], config, args.trace, outs[side]))
                a, b = (without_timings(json.loads(outs[s].read_text())) for s in trees)
                diff = differences(a, b)
                if diff:
                    differing.append((rep, config, diff[:5]))
                before, after = runs[config]["before"][-1], runs[config]["after"][-1]
                print(
                    f"repeat {rep} {config:>6}: "
                    + "  ".join(f"{k} {before[k]:.2f} -> {after[k]:.2f}" for k in FIGURES)
                    + f"  {'DIFFER' if diff else 'identical'}",
                    flush=True,
                )
    print(f"\n{'config':>6}  {'figure':>14}  {'before':>13}  {'after':>13}  after/before")
    for config, row in runs.items():
        for k in FIGURES:
            b, a = [r[k] for r in row["before"]], [r[k] for r in row["after"]]
            ratios = [x / y for x, y in zip(a, b, strict=True)]
            print(
                f"{config:>6}  {k:>14}  {min(b):6.2f}-{max(b):6.2f}  {min(a):6.2f}-{max(a):6.2f}  "
                f"{min(ratios):.2f}-{max(ratios):.2f}"
            )
    if args.json:
        cpu = {
            c: {side: [r["cpu_s"] for r in rs] for side, rs in row.items()}
            for c, row in runs.items()
        }
        doc = {"cpu_s": cpu, "runs": runs, "repeats": args.repeats, "trace": args.trace}
        doc["identical"] = not differing
        Path(args.json).write_text(json.dumps(doc, indent=2))
    for rep, config, diff in differing:
        print(f"repeat {rep} {config}: results differ: {diff}", file=sys.stderr)
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())
