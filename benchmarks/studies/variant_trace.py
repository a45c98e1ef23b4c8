"""A synthetic multi-turn trace in the Mooncake format, to check SWA orders out of sample on
traffic shaped unlike the Mooncake trace: the chance that a conversation goes on and the
gap before its next turn are parameters, and output lengths say nothing about either.

    .venv/bin/python -m benchmarks.studies.variant_trace --out /tmp/variant.jsonl [--requests 3000]
        [--continue-prob 0.5] [--mean-gap 60] [--seed 0]
    .venv/bin/python -m benchmarks.hybrid_hits --sources trace --trace /tmp/variant.jsonl ...

Conversations arrive as a Poisson process (one per `arrival` seconds on average). A first
turn is one of 8 system prompts (1-6k tokens) plus a user document (0.5-24k tokens); after
each turn the conversation goes on with probability `continue_prob`, after an exponential gap
of mean `mean_gap` seconds: the next prompt is the previous one's whole 512-token blocks plus
new blocks (the previous partial block, its output and a new message of 0.1-3k tokens, under
new ids, as in the Mooncake trace). Outputs are 4-600 tokens, drawn independently.
"""

from __future__ import annotations

import argparse
import heapq
import json
import sys

import numpy as np

BLOCK = 512


def generate(
    requests: int, continue_prob: float, mean_gap: float, arrival: float, seed: int
) -> list[dict[str, object]]:
    if not 0 <= continue_prob < 1 or mean_gap <= 0 or arrival <= 0 or requests < 1:
        raise ValueError(
            f"continue_prob={continue_prob} must be in [0, 1), mean_gap={mean_gap}, "
            f"arrival={arrival} and requests={requests} positive"
        )
    rng = np.random.default_rng(seed)
    next_id = iter(range(1 << 62))
    systems = []
    for _ in range(8):
        length = int(rng.integers(1024, 6144)) // BLOCK * BLOCK
        systems.append([next(next_id) for _ in range(length // BLOCK)])
    rows: list[dict[str, object]] = []
    pending: list[tuple[float, int, list[int], int]] = []  # (time, tie, blocks, length)
    t, tie = 0.0, 0
    while len(rows) < requests:
        t += float(rng.exponential(arrival))
        system = systems[int(rng.integers(len(systems)))]
        length = len(system) * BLOCK + int(rng.integers(512, 24576))
        blocks = system + [next(next_id) for _ in range(-(-length // BLOCK) - len(system))]
        heapq.heappush(pending, (t, tie := tie + 1, blocks, length))
        while pending and pending[0][0] <= t and len(rows) < requests:
            at, _, blocks, length = heapq.heappop(pending)
            output = int(rng.integers(4, 600))
            rows.append(
                {
                    "timestamp": int(at * 1000),
                    "input_length": length,
                    "output_length": output,
                    "hash_ids": blocks,
                }
            )
            if rng.random() < continue_prob:
                whole = blocks[: length // BLOCK]
                grown = length // BLOCK * BLOCK + (length % BLOCK) + output
                grown += int(rng.integers(100, 3072))
                more = -(-grown // BLOCK) - len(whole)
                blocks = whole + [next(next_id) for _ in range(more)]
                gap = float(rng.exponential(mean_gap))
                heapq.heappush(pending, (at + gap, tie := tie + 1, blocks, grown))
    rows.sort(key=lambda r: r["timestamp"])  # type: ignore[arg-type,return-value]
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--continue-prob", type=float, default=0.5)
    parser.add_argument("--mean-gap", type=float, default=60.0)
    parser.add_argument("--arrival", type=float, default=1.0, help="mean s between conversations")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rows = generate(args.requests, args.continue_prob, args.mean_gap, args.arrival, args.seed)
    with open(args.out, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    print(f"{len(rows)} requests -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
