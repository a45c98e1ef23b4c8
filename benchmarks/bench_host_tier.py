"""Hit rates with an L2 host tier against device-only caches, on the public Mooncake trace
(full attention, page 16): device 1M + host 4M (write_through) and device 1M + host 3M
(write_back) against device-only 1M and 4M, plus transfer volumes, demotions and losses.

With `--hybrid`: the hybrid configs (swa, mamba, hybrid) side by side, device-only (full KV
1M, SWA pool 256k with window 1024, 512 Mamba slots) against the same device pools with a
host tier 4x their size (the SWA and Mamba host pools follow the full one's ratio).

    .venv/bin/python -m benchmarks.bench_host_tier [--hybrid] [--max-requests N] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from benchmarks.trace import TRACE
from uniradix.sim.replay import ReplayOptions, run_replay

M = 1 << 20
RUNS = [  # (label, config, device tokens, host tokens, write policy)
    ("device 1M", "full", M, None, "write_through"),
    ("device 4M", "full", 4 * M, None, "write_through"),
    ("1M + host 4M, write_through", "full", M, 4 * M, "write_through"),
    ("1M + host 3M, write_back", "full", M, 3 * M, "write_back"),
]
HYBRID_RUNS = [
    (f"{config} {label}", config, M, host, policy)
    for config in ("swa", "mamba", "hybrid")
    for label, host, policy in (
        ("device only", None, "write_through"),
        ("+ host 4x, write_through", 4 * M, "write_through"),
        ("+ host 4x, write_back", 4 * M, "write_back"),
    )
]
SWA_TOKENS, WINDOW, MAMBA_SLOTS = 256 * 1024, 1024, 512


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", default=str(TRACE))
    parser.add_argument("--hybrid", action="store_true", help="the hybrid configs instead")
    parser.add_argument("--page-size", type=int, default=16)
    parser.add_argument("--max-running", type=int, default=64)
    parser.add_argument("--chunk-size", type=int, default=8192)
    parser.add_argument("--max-requests", type=int, default=None)
    parser.add_argument("--json", help="also write the summaries to this file")
    parser.add_argument("--only", nargs="+", type=int, help="run only these rows (0-based)")
    args = parser.parse_args()
    rows = []
    print(
        f"{'run':>36} {'hit':>7} {'device':>7} {'host':>7} {'demoted':>9} {'lost':>9} {'wall_s':>7}"
    )
    for i, (label, config, device, host, policy) in enumerate(HYBRID_RUNS if args.hybrid else RUNS):
        if args.only is not None and i not in args.only:
            continue
        options = ReplayOptions.of(
            trace=args.trace,
            config=config,
            page_size=args.page_size,
            full_tokens=device,
            swa_tokens=SWA_TOKENS if config in ("swa", "hybrid") else None,
            sliding_window=WINDOW,
            mamba_slots=MAMBA_SLOTS if config in ("mamba", "hybrid") else None,
            max_running=args.max_running,
            chunk_size=args.chunk_size,
            max_requests=args.max_requests,
            host_tokens=host,
            write_policy=policy,
        )
        s = run_replay(options).summary
        prompt = max(s["prompt_tokens"], 1)
        tiers = s["hit_tokens_by_tier"]
        stats = s.get("host_tier", {})
        print(
            f"{label:>36} {s['hit_rate']:7.4f} {tiers['device'] / prompt:7.4f} "
            f"{tiers['host'] / prompt:7.4f} {stats.get('demoted_tokens', 0):9d} "
            f"{stats.get('lost_tokens', 0):9d} {s['wall_s']:7.1f}",
            flush=True,
        )
        rows.append({"run": label, **s})
        if any(s["leaked"].values()):
            print(f"leaked: {s['leaked']}", file=sys.stderr)
            return 1
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
