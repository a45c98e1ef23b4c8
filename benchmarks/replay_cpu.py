"""CPU seconds of the Mooncake replay (page 16, every config) for two source trees, run
interleaved so both see the same machine load, and whether their results are identical.

    .venv/bin/python -m benchmarks.replay_cpu --before /tmp/base --after . [--repeats 3]
        [--configs full swa mamba hybrid] [--json benchmarks/results/replay_cpu.json]

Each run is `python -m uniradix.cli replay --trace TRACE --page-size 16 --config C --json` in
a child process with the tree's directory first on PYTHONPATH; its CPU time (user + system,
from `os.wait4`) covers the whole command, imports included. Before and after alternate,
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
from pathlib import Path

from benchmarks.replay_diff import differences, without_timings
from benchmarks.trace import TRACE


def run_once(tree: Path, config: str, trace: str, out: Path) -> float:
    """CPU seconds of one replay run from `tree`, its JSON written to `out`."""
    env = dict(os.environ, PYTHONPATH=str(tree.resolve()))
    command = [sys.executable, "-m", "uniradix.cli", "replay", "--trace", trace]
    command += ["--page-size", "16", "--config", config, "--json", "--no-progress"]
    with out.open("w") as f:
        proc = subprocess.Popen(command, stdout=f, env=env, cwd=tempfile.gettempdir())
        _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(command)} (from {tree}) failed")
    return usage.ru_utime + usage.ru_stime


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
    cpu: dict[str, dict[str, list[float]]] = {c: {"before": [], "after": []} for c in args.configs}
    differing = []
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.repeats):
            for config in args.configs:
                order = ["before", "after"] if rep % 2 == 0 else ["after", "before"]
                outs = {side: Path(tmp, f"{side}_{config}.json") for side in order}
                for side in order:
                    cpu[config][side].append(run_once(trees[side], config, args.trace, outs[side]))
                a, b = (without_timings(json.loads(outs[s].read_text())) for s in trees)
                diff = differences(a, b)
                if diff:
                    differing.append((rep, config, diff[:5]))
                row = cpu[config]
                print(
                    f"repeat {rep} {config:>6}: before {row['before'][-1]:5.2f} s  "
                    f"after {row['after'][-1]:5.2f} s  {'DIFFER' if diff else 'identical'}",
                    flush=True,
                )
    print(f"\n{'config':>6}  {'before CPU s':>13}  {'after CPU s':>13}  after/before")
    for config, row in cpu.items():
        ratios = [a / b for a, b in zip(row["after"], row["before"], strict=True)]
        print(
            f"{config:>6}  {min(row['before']):5.2f}-{max(row['before']):5.2f}  "
            f"{min(row['after']):5.2f}-{max(row['after']):5.2f}  "
            f"{min(ratios):.2f}-{max(ratios):.2f}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps({"cpu_s": cpu, "repeats": args.repeats}, indent=2))
    for rep, config, diff in differing:
        print(f"repeat {rep} {config}: results differ: {diff}", file=sys.stderr)
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())
