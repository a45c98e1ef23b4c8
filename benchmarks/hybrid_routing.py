"""Hybrid-aware KV events and routing (issue 31): on a Mooncake-format trace, 4 instances
behind the cache-aware router, page 16, per hybrid config (full+SWA, full+Mamba,
full+SWA+Mamba):

- hit tokens the index predicted when each request was admitted (`at_match`, from the
  events with SWA / Mamba groups) against the actual hits, and what a full-only stream
  promised at the same moment (its over-prediction);
- the cluster's hit rate routing on group events, routing on full-only events, and one
  instance holding all four instances' memory.

    .venv/bin/python -m benchmarks.hybrid_routing                   # a synthetic trace
    .venv/bin/python -m benchmarks.hybrid_routing --trace T.jsonl --requests 800

Without `--trace` it writes a synthetic Mooncake trace (conversations on shared system
prompts, each turn resending the context plus new blocks, seeded) to a temporary file.
Results: `benchmarks/results/hybrid_routing.json` (one entry per trace and request count)
and a table on stdout.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from uniradix.events import KVEventsConfig
from uniradix.sim.cluster import Cluster
from uniradix.sim.replay import ReplayOptions

RESULTS = Path(__file__).parent / "results" / "hybrid_routing.json"
CONFIGS = ("swa", "mamba", "hybrid")
INSTANCES = 4


def synthetic_trace(path: Path, requests: int, seed: int = 0) -> None:
    """Mooncake rows: conversations on 8 system prompts (2-6 blocks of 512 tokens), each
    turn the previous context plus 1-3 new blocks; conversations interleave."""
    rng = random.Random(seed)
    next_id = 0

    def blocks(n: int) -> list[int]:
        nonlocal next_id
        next_id += n
        return list(range(next_id - n, next_id))

    systems = [blocks(rng.randint(2, 6)) for _ in range(8)]
    live: list[list[int]] = []
    rows = []
    for t in range(requests):
        if not live or (len(live) < 24 and rng.random() < 0.3):
            live.append(list(rng.choice(systems)))
        conv = rng.choice(live)
        conv += blocks(rng.randint(1, 3))
        if len(conv) > 24:
            live.remove(conv)
        rows.append({"timestamp": t, "input_length": 512 * len(conv) - rng.randint(0, 400),
                     "output_length": rng.randint(16, 128), "hash_ids": list(conv)})  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def run(options: ReplayOptions, instances: int, components: str) -> dict[str, Any]:
    events = KVEventsConfig(publisher="null", components=components)
    return Cluster(options, instances, "cache-aware", events).run()


def one_instance(options: ReplayOptions) -> dict[str, Any]:
    """One instance with every pool and the running limit of all four."""
    big = options.updated(
        full_tokens=options.pools.full_tokens * INSTANCES,
        swa_tokens=(options.pools.swa_tokens or options.pools.full_tokens) * INSTANCES,
        mamba_slots=(options.pools.mamba_slots or 0) * INSTANCES or None,
        max_running=options.scheduler.max_running * INSTANCES,
    )
    return run(big, 1, "auto")


def measure(trace: str, requests: int) -> dict[str, Any]:
    base = ReplayOptions.of(
        trace=trace,
        page_size=16,
        full_tokens=64_000,
        swa_tokens=8_000,
        sliding_window=1024,
        mamba_slots=24,
        max_running=16,
        max_requests=requests,
    )
    out: dict[str, Any] = {}
    for config in CONFIGS:
        options = replace(base, config=config)
        t0 = time.perf_counter()
        groups, full, one = (
            run(options, INSTANCES, "auto"),
            run(options, INSTANCES, "full"),
            one_instance(options),
        )
        actual = groups["hit_tokens"]
        out[config] = {
            "requests": groups["requests"],
            "per_instance": [
                {
                    k: inst[k]
                    for k in (
                        "name",
                        "requests",
                        "hit_tokens",
                        "predicted_hit_tokens",
                        "indexed_hit_tokens",
                        "at_match_hit_tokens",
                        "full_only_hit_tokens",
                    )
                }
                for inst in groups["instances"]
            ],
            "actual_hit_tokens": actual,
            "at_match_over_actual": groups["at_match_hit_tokens"] / max(actual, 1),
            "predicted_over_actual": groups["predicted_hit_tokens"] / max(actual, 1),
            "full_only_over_actual": groups["full_only_hit_tokens"] / max(actual, 1),
            "hit_rate_groups": groups["hit_rate"],
            "hit_rate_full_only_routing": full["hit_rate"],
            "hit_rate_one_instance": one["hit_rate"],
            "groups_vs_one_instance": groups["hit_rate"] / max(one["hit_rate"], 1e-9),
            "full_only_vs_one_instance": full["hit_rate"] / max(one["hit_rate"], 1e-9),
            "wall_s": time.perf_counter() - t0,
        }
    return out


def table(results: dict[str, Any]) -> str:
    lines = [
        "| config | at-match / actual | predicted / actual | full-only / actual | hit rate "
        "(groups) | hit rate (full-only routing) | one instance | groups vs one |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for config, r in results.items():
        lines.append(
            f"| {config} | {r['at_match_over_actual']:.3f} | {r['predicted_over_actual']:.3f} | "
            f"{r['full_only_over_actual']:.3f} | {r['hit_rate_groups']:.3f} | "
            f"{r['hit_rate_full_only_routing']:.3f} | {r['hit_rate_one_instance']:.3f} | "
            f"{r['groups_vs_one_instance']:.3f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trace", help="a Mooncake JSONL trace (default: synthetic)")
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        trace = args.trace
        if trace is None:
            trace = str(Path(tmp) / "synthetic.jsonl")
            synthetic_trace(Path(trace), args.requests)
        results = measure(trace, args.requests)
    source = args.trace or "synthetic Mooncake trace (seed 0)"
    # One entry per trace and request count: a run replaces only its own.
    out = Path(args.out)
    runs = json.loads(out.read_text()).get("runs", {}) if out.exists() else {}
    runs[f"{Path(source).name}, {args.requests} requests"] = results
    out.write_text(json.dumps({"runs": runs}, indent=1) + "\n")
    print(table(results))


if __name__ == "__main__":
    main()
