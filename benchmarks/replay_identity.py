"""Proves a change behaviour-neutral: replays a fixed matrix and compares it, timings aside.

    .venv/bin/python -m benchmarks.replay_identity record DIR --trace TRACE.jsonl
    .venv/bin/python -m benchmarks.replay_identity compare BEFORE_DIR AFTER_DIR

`record` runs `uniradix replay --json` for every case of `CASES` (every config, with small and
ample pools, page 1 and 16, host tier and L3, sessions, a 4-instance cluster) and writes one
JSON file per case. `compare` reports `identical` per case or every differing field (through
`benchmarks.replay_diff`) and exits 1 if any case differs. A restructuring slice lands only
when `compare` against the main it started from says identical everywhere.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

from benchmarks.replay_diff import differences, without_timings

CONFIGS = ("full", "swa", "mamba", "hybrid")
AMPLE = ["--full-tokens", "400000", "--swa-tokens", "100000", "--mamba-slots", "256"]


def cases(trace: str, store: str) -> dict[str, list[str]]:
    """Case name -> `uniradix replay` arguments (without `--json --no-progress`)."""
    on_trace = ["--trace", trace, "--page-size", "16"]
    out: dict[str, list[str]] = {}
    for config in CONFIGS:
        out[f"trace_{config}"] = [*on_trace, "--config", config]
        out[f"trace_{config}_ample"] = [*on_trace, "--config", config, *AMPLE]
        out[f"workload_{config}"] = ["--config", config]
        out[f"agentic_{config}_p16"] = [
            "--workload",
            "agentic",
            "--config",
            config,
            "--page-size",
            "16",
        ]
    for config in ("full", "hybrid"):
        out[f"trace_{config}_host_l3"] = [
            *on_trace,
            "--config",
            config,
            "--max-requests",
            "800",
            "--host-tokens",
            "200000",
            "--storage",
            f"file://{store}/{config}",
        ]
    out["multi_turn_sessions"] = ["--workload", "multi_turn", "--config", "hybrid", "--sessions"]
    out["trace_cluster"] = [
        *on_trace,
        "--config",
        "full",
        "--max-requests",
        "800",
        "--instances",
        "4",
        "--router",
        "cache-aware",
    ]
    return out


def record(directory: Path, trace: str, only: list[str] | None) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    # Each recording has its own store; its path is written as <store> so that two
    # recordings compare equal.
    store = directory / "store"
    for name, args in cases(trace, str(store)).items():
        if only and name not in only:
            continue
        shutil.rmtree(store, ignore_errors=True)
        cmd = [sys.executable, "-m", "uniradix.cli", "replay", *args, "--json", "--no-progress"]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            print(f"{name}: exit {done.returncode}\n{done.stderr}", file=sys.stderr)
        (directory / f"{name}.json").write_text(done.stdout.replace(str(store), "<store>"))
        print(f"{name}: recorded", flush=True)
    shutil.rmtree(store, ignore_errors=True)


def compare(before: Path, after: Path) -> int:
    failed = 0
    for path in sorted(before.glob("*.json")):
        other = after / path.name
        if not other.exists():
            print(f"{path.stem}: missing in {after}")
            failed += 1
            continue
        a = without_timings(json.loads(path.read_text()))
        b = without_timings(json.loads(other.read_text()))
        diff = differences(a, b)
        print(f"{path.stem}: " + ("identical" if not diff else "DIFFERS"))
        for line in diff[:20]:
            print(f"    {line}")
        failed += bool(diff)
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="verb", required=True)
    rec = sub.add_parser("record")
    rec.add_argument("directory", type=Path)
    rec.add_argument("--trace", required=True)
    rec.add_argument("--only", nargs="*")
    cmp_ = sub.add_parser("compare")
    cmp_.add_argument("before", type=Path)
    cmp_.add_argument("after", type=Path)
    args = parser.parse_args(argv)
    if args.verb == "record":
        record(args.directory, args.trace, args.only)
        return 0
    return compare(args.before, args.after)


if __name__ == "__main__":
    sys.exit(main())
