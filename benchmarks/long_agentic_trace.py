"""A long-context agentic coding trace, generated from a seed, and the replay's wall and RSS.

    .venv/bin/python -m benchmarks.long_agentic_trace generate OUT.jsonl [--requests 300]
        [--seed 0]
    .venv/bin/python -m benchmarks.long_agentic_trace replay OUT.jsonl [--config full]
        [--tree DIR] [-- EXTRA uniradix replay ARGS]

`generate` writes a Mooncake JSONL trace (512-token `hash_ids` blocks) with the shape of
`aiperf synthesize agentic-code`'s default profile (aiperf itself pulls in a web stack and
a tokenizer, too much for a benchmark; this is our own generator): every session starts with
the same 32k-token system prompt and tools, then a per-session repository context
(lognormal, median 5k, mean ~15k, at most 30k tokens); each turn appends ~6k new tokens
(file reads, tool results) and asks for ~1k output tokens; a session ends when its context
would pass 190k tokens, or at random, more likely the longer it is. `SESSIONS` sessions run at
once, each turn after an agentic (70%, median 1.8 s) or human (median 25 s) pause. Contexts
run from ~40k to 190k tokens.

`replay` runs `uniradix replay --trace OUT.jsonl --json` in a child process (from the
source tree `--tree`, default this one: another revision's checkout compares before and
after) and prints its wall time (the process's, and the replay's own without imports and
set-up), the replay's CPU seconds (`Scheduler.run`'s process time: its wall time less the
waits for a core, the figure to compare on a loaded machine), its peak RSS,
its hit rate and a digest of its report minus timings (equal digests: identical replays).
The pools hold `POOL_TOKENS` full-KV tokens; pages of 16, chunks of 8k.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.replay_diff import without_timings

REPO = Path(__file__).resolve().parents[1]
BLOCK = 512
SHARED_TOKENS = 32_000
MAX_CONTEXT = 190_000
SESSIONS = 16
POOL_TOKENS = 1_000_000
RESET_BASE, RESET_SCALING = 0.01, 1.5


def _lognormal(rng: np.random.Generator, median: float, mean: float, low: int, high: int) -> int:
    sigma = math.sqrt(2 * math.log(mean / median))
    return int(min(max(rng.lognormal(math.log(median), sigma), low), high))


class _Session:
    def __init__(self, rng: np.random.Generator, shared: list[int], fresh: list[int], t: float):
        self.blocks = list(shared)
        self.tokens = SHARED_TOKENS
        self.time = t
        self._grow(_lognormal(rng, 5_000, 15_000, 500, 30_000), fresh)

    def _grow(self, num_tokens: int, fresh: list[int]) -> None:
        """Appends `num_tokens` new tokens: the partial last block goes on, then new blocks."""
        self.tokens += num_tokens
        while len(self.blocks) * BLOCK < self.tokens:
            self.blocks.append(fresh[0])
            fresh[0] += 1

    def turn(self, rng: np.random.Generator, fresh: list[int]) -> dict[str, object] | None:
        """The next request, or None when the session ends before it."""
        new = _lognormal(rng, 6_000, 6_300, 500, 10_000)
        if self.tokens + new > MAX_CONTEXT:
            return None
        self._grow(new, fresh)
        output = _lognormal(rng, 1_000, 1_050, 50, 1_500)
        row = {
            "timestamp": int(self.time),
            "input_length": self.tokens,
            "output_length": output,
            "hash_ids": self.blocks[: -(-self.tokens // BLOCK)],
        }
        self._grow(output, fresh)  # the answer is part of the next turn's context
        agentic = rng.random() < 0.7
        self.time += _lognormal(
            rng, *((1_800, 2_500) if agentic else (25_000, 40_000)), 100, 120_000
        )
        reset = RESET_BASE * (1 + RESET_SCALING * self.tokens / MAX_CONTEXT)
        return None if rng.random() < reset else row


def generate(num_requests: int, seed: int) -> list[dict[str, object]]:
    rng = np.random.default_rng(seed)
    shared = list(range(-(-SHARED_TOKENS // BLOCK)))
    fresh = [len(shared)]  # the next unused block id
    sessions = [_Session(rng, shared, fresh, 0.0) for _ in range(SESSIONS)]
    rows: list[dict[str, object]] = []
    while len(rows) < num_requests:
        i = min(range(SESSIONS), key=lambda k: sessions[k].time)
        row = sessions[i].turn(rng, fresh)
        if row is None:
            sessions[i] = _Session(rng, shared, fresh, sessions[i].time)
            continue
        rows.append(row)
    rows.sort(key=lambda r: r["timestamp"])  # type: ignore[arg-type, return-value]
    return rows


# The child: `uniradix replay` with `Scheduler.run` timed in CPU seconds (written to stderr
# last), so any revision's tree can be measured the same way.
_CHILD = """
import sys, time
import uniradix.sim.scheduler as s
from uniradix.cli import main
run = s.Scheduler.run
def timed(self):
    t = time.process_time()
    run(self)
    print(f"cpu_s {time.process_time() - t}", file=sys.stderr)
s.Scheduler.run = timed
main(sys.argv[1:])
"""


def replay(trace: Path, config: str, extra: list[str], tree: Path = REPO) -> dict[str, object]:
    cmd = [
        *(sys.executable, "-c", _CHILD, "replay", "--trace", str(trace.resolve())),
        *("--config", config, "--page-size", "16", "--full-tokens", str(POOL_TOKENS)),
        *("--chunk-size", "8192", "--json", "--no-progress", *extra),
    ]
    env = dict(os.environ, PYTHONPATH=str(tree.resolve()))
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env, cwd=tree)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"replay failed (exit {done.returncode}): {done.stderr[-2000:]}")
    report = json.loads(done.stdout)
    cpu = float(done.stderr.strip().splitlines()[-1].split()[1])
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return {
        "wall_s": round(wall, 2),
        "cpu_s": round(cpu, 2),
        "peak_rss_mb": round(peak_kib / 1024),
        "report": report,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="verb", required=True)
    gen = sub.add_parser("generate")
    gen.add_argument("out", type=Path)
    gen.add_argument("--requests", type=int, default=300)
    gen.add_argument("--seed", type=int, default=0)
    rep = sub.add_parser("replay")
    rep.add_argument("trace", type=Path)
    rep.add_argument("--config", default="full", choices=["full", "swa", "mamba", "hybrid"])
    rep.add_argument("--tree", type=Path, default=REPO, help="source tree to replay with")
    rep.add_argument("extra", nargs="*", help="more `uniradix replay` arguments, after --")
    args = parser.parse_args(argv)
    if args.verb == "generate":
        if args.requests <= 0:
            parser.error(f"--requests must be positive, got {args.requests}")
        rows = generate(args.requests, args.seed)
        args.out.write_text("".join(json.dumps(r) + "\n" for r in rows))
        lengths = [int(r["input_length"]) for r in rows]  # type: ignore[call-overload]
        print(
            f"{len(rows)} requests, contexts {min(lengths)}-{max(lengths)} tokens, "
            f"{sum(lengths)} prompt tokens"
        )
        return 0
    result = replay(args.trace, args.config, args.extra, args.tree)
    report = result["report"]
    assert isinstance(report, dict)
    # The digest of the report minus its timings: equal digests, identical replays.
    digest = hashlib.sha256(
        json.dumps(without_timings(report), sort_keys=True).encode()
    ).hexdigest()[:16]
    print(
        f"process wall {result['wall_s']} s (replay {report['wall_s']:.2f} s, "
        f"{result['cpu_s']:.2f} CPU s; ideal {report['ideal_s']:.2f} s), "
        f"peak RSS {result['peak_rss_mb']} MB, hit rate "
        f"{report['hit_rate']:.4f}, report digest {digest}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
