"""Where lost hybrid hits come from: for each lost hit (the usable match stopped short of the
full-KV match end `F`), was `F` a position where an earlier request had been given a
checkpoint (`Req.checkpoint_seqlens`), or one it only computed through?

    .venv/bin/python -m benchmarks.studies.lost_hit_origins [--max-requests 2000] [--config hybrid]
        [--window 1024] [--mamba-slots 512] [--swa-policy reuse_credit]

Kinds of `F` (the lost tokens of each, as a share of the full-KV hit tokens, split by the
cause `uniradix.sim.lost_hits` names):

- `placed`: an earlier admitted request listed `F` as a checkpoint, and the node ending at `F`
  is as old as that request's finish (its state or window was kept, then lost);
- `placed_recreated`: the same, but the node ending at `F` was created after that request
  finished (the path was evicted whole and computed again by a request passing through);
- `placed_running`: the request listing `F` is still running;
- `prompt_end`: an earlier prompt ended at `F` (page floored) without a checkpoint listed
  there (its match already covered `F`);
- `grid_mid_prompt`: `F` is on the 512-token grid, inside earlier prompts only (they computed
  through it; placement keeps only the last grid boundary before a prompt end);
- `other`: anything else.

Prefixes are identified by the trace's block hashes and the length, so the driver reads
Mooncake-style prompts (`BlockPrompt`) only. A measurement in this process, not a feature: it
wraps the scheduler's and the metrics' hooks.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from typing import Any

from benchmarks.hybrid_hits import TRACE, base_options, full_pool, run, sized
from uniradix.sim import metrics as metrics_module
from uniradix.sim import scheduler as scheduler_module
from uniradix.sim.replay import ReplayOptions
from uniradix.sim.request_spec import BlockPrompt

GRID = 512


def prefix_id(prompt: BlockPrompt, length: int) -> int:
    return hash((tuple(prompt.hash_ids[: -(-length // prompt.block_size)]), length))


class Origins:
    """Wraps the hooks for one replay and counts lost tokens per (kind, causes)."""

    def __init__(self) -> None:
        self.placer: dict[int, int] = {}  # prefix id -> rid that listed a checkpoint there
        self.ends: set[int] = set()
        self.pending: dict[int, list[int]] = {}
        self.finished_at: dict[int, int] = {}  # rid -> tree node counter at its finish
        self.boundary_node: dict[int, int | None] = {}
        self.tokens: Counter[tuple[str, str]] = Counter()
        self.requests: Counter[tuple[str, str]] = Counter()

    def install(self) -> None:
        origins = self
        sched = scheduler_module.Scheduler
        metrics = metrics_module.ReplayMetrics
        next_chunk, on_match = sched._next_chunk, metrics.on_match
        on_admit, on_finish = metrics.on_admit, metrics.on_finish

        def wrapped_next_chunk(self: Any, request: Any, budget: int) -> Any:
            entry = next_chunk(self, request, budget)
            rid, prompt = request.spec.rid, request.spec.prompt
            if entry is not None and request.num_admissions == 1 and rid not in origins.pending:
                listed = [prefix_id(prompt, p) for p in request.req.checkpoint_seqlens]
                origins.pending[rid] = [*listed, prefix_id(prompt, len(prompt) // 16 * 16)]
            return entry

        def wrapped_on_match(self: Any, rid: int, key: Any, match: Any) -> None:
            on_match(self, rid, key, match)
            full, usable = match.full_kv_hit_length, match.device_prefix_len
            if full > usable:
                node = self.lost_hits._node_at(match.last_device_node, usable, key, full)
                origins.boundary_node[rid] = None if node is None else node.id

        def wrapped_on_admit(self: Any, request: Any, match: Any) -> None:
            rid = request.spec.rid
            lost = self._pending_match.get(rid)
            if request.num_admissions == 1 and lost and lost.full_tokens > lost.usable_tokens:
                origins.count(rid, request.spec.prompt, lost)
            listed = origins.pending.pop(rid, [])
            for pid in listed[:-1]:
                origins.placer[pid] = rid
            origins.ends.update(listed[-1:])
            on_admit(self, request, match)

        def wrapped_on_finish(self: Any, request: Any) -> None:
            origins.finished_at[request.spec.rid] = self.lost_hits.cache.tree._next_id
            on_finish(self, request)

        sched._next_chunk = wrapped_next_chunk  # type: ignore[method-assign]
        metrics.on_match = wrapped_on_match  # type: ignore[method-assign]
        metrics.on_admit = wrapped_on_admit  # type: ignore[method-assign]
        metrics.on_finish = wrapped_on_finish  # type: ignore[method-assign]

    def count(self, rid: int, prompt: BlockPrompt, lost: Any) -> None:
        boundary = lost.full_tokens
        pid = prefix_id(prompt, boundary)
        if pid in self.placer:
            placer = self.placer[pid]
            node = self.boundary_node.get(rid)
            if placer not in self.finished_at:
                kind = "placed_running"
            elif node is not None and node > self.finished_at[placer]:
                kind = "placed_recreated"
            else:
                kind = "placed"
        elif pid in self.ends:
            kind = "prompt_end"
        else:
            kind = "grid_mid_prompt" if boundary % GRID == 0 else "other"
        key = (kind, "+".join(lost.causes))
        self.tokens[key] += lost.full_tokens - lost.usable_tokens
        self.requests[key] += 1


def replay_options(argv: list[str] | None = None) -> ReplayOptions:
    """The replay the command line asks for, at issue 14's sizes (`benchmarks.hybrid_hits`)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-requests", type=int, default=2000, help="0: the whole trace")
    parser.add_argument("--config", default="hybrid", choices=["swa", "mamba", "hybrid"])
    parser.add_argument("--window", type=int, default=1024)
    parser.add_argument("--mamba-slots", type=int, default=512)
    parser.add_argument("--swa-policy", default=None, help="SWA eviction policy (None: default)")
    args = parser.parse_args(argv)
    base = base_options("trace", str(TRACE))
    if args.swa_policy is not None:
        base = base.updated(swa_eviction_policy=args.swa_policy)
    if args.max_requests:
        base = base.updated(max_requests=args.max_requests)
    base = base.updated(full_tokens=full_pool(base)[0])
    window = None if args.config == "mamba" else args.window
    return sized(base, args.config, window, 1, args.mamba_slots)


def main() -> int:
    options = replay_options()
    origins = Origins()
    origins.install()
    s = run(options)
    full_hits = s["lost_hits"]["full_kv_hit_tokens"]
    window = options.pools.sliding_window if options.config != "mamba" else None
    print(
        f"{options.config} W={window} SWA order {options.eviction.swa_eviction_policy}: "
        f"hit rate {s['hit_rate']:.4f}; lost per kind of boundary:"
    )
    print("| kind | causes | requests | lost / full-KV hit tokens |\n|---|---|---|---|")
    for (kind, causes), num in origins.tokens.most_common():
        share = num / full_hits
        print(f"| {kind} | {causes} | {origins.requests[kind, causes]} | {share:.1%} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
