"""Where a hybrid cache's Mamba slots go: how many running requests hold, how many the tree
keeps, and which checkpoints (by where they sit in the request that stored them) are stored,
evicted unused, and resumed from.

    .venv/bin/python -m benchmarks.studies.mamba_states [--source trace] [--max-requests 2000]
        [--config mamba] [--policy study:flop_aware] [--max-running 64]

Sizes as `benchmarks.hybrid_hits` (page 16, full KV a quarter of the working set, 512 Mamba
slots). A checkpoint's kind, from the storing request's prompt length `L`: `grid` at
`L // 512 * 512` (the last Mooncake block boundary), `prompt_end` at `L` or `L - 1` floored
to the page, `finish` past `L` (a finished request's state), `branch` at the match's full-KV
end, `chunk` anything else (a prefill chunk end). The counting wraps the cache's and the
scheduler's methods in this process only (a measurement, not a feature).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import Counter
from collections.abc import Callable
from typing import Any

from benchmarks.hybrid_hits import TRACE, base_options, full_pool, sized
from benchmarks.studies.retired_orders import FLOP_AWARE
from uniradix.cache.controller import UnifiedRadixCache
from uniradix.components.mamba import MambaComponent
from uniradix.sim.batch import RunningRequest, held_by
from uniradix.sim.metrics import ReplayMetrics
from uniradix.sim.replay import run_replay
from uniradix.sim.scheduler import Scheduler
from uniradix.tree.node import TreeNode
from uniradix.types import FreeSlots, InsertContext, MatchResult, Req

BLOCK = 512


class StateCensus:
    def __init__(self, page: int) -> None:
        self.page = page
        self.storing: Req | None = None
        self.requests: dict[int, tuple[int, int]] = {}  # id(req) -> (prompt, full-KV match)
        self.kind_of_slot: dict[int, str] = {}
        self.used: set[int] = set()
        self.stored: Counter[str] = Counter()
        self.evicted: Counter[str] = Counter()
        self.evicted_unused: Counter[str] = Counter()
        self.resumed: Counter[str] = Counter()
        self.resumed_tokens: Counter[str] = Counter()
        self.samples: dict[str, list[int]] = {"running": [], "held": [], "tree": []}

    def kind(self, position: int) -> str:
        known = self.requests.get(id(self.storing))
        if known is None:
            return "unknown"
        prompt, full = known
        page = self.page
        if position > prompt:
            return "finish"
        if position == prompt // BLOCK * BLOCK:
            return "grid"
        if position in (prompt // page * page, (prompt - 1) // page * page):
            return "prompt_end"
        return "branch" if position == full // page * page else "chunk"

    def install(self) -> None:
        census = self
        commit = MambaComponent.commit_insert
        evict = MambaComponent.evict_node

        def commit_insert(self: MambaComponent, ins: InsertContext, node: TreeNode) -> None:
            fresh = self.slot(node) is None
            commit(self, ins, node)
            slot = self.slot(node)
            if fresh and slot is not None and ins.params.mamba_value is not None:
                kind = census.kind(self.tree.prefix_len(node))
                census.kind_of_slot[slot] = kind
                census.stored[kind] += 1

        def evict_node(self: MambaComponent, node: TreeNode, actions: list[FreeSlots]) -> int:
            slot = self.slot(node)
            assert slot is not None
            kind = census.kind_of_slot.pop(slot, "unknown")
            census.evicted[kind] += 1
            if slot not in census.used:
                census.evicted_unused[kind] += 1
            census.used.discard(slot)
            return evict(self, node, actions)

        MambaComponent.commit_insert = commit_insert  # type: ignore[method-assign]
        MambaComponent.evict_node = evict_node  # type: ignore[method-assign]
        for name in ("cache_unfinished_req", "cache_finished_req"):
            setattr(UnifiedRadixCache, name, self._storing(getattr(UnifiedRadixCache, name)))
        admit, step = ReplayMetrics.on_admit, ReplayMetrics.on_step

        def on_admit(self: ReplayMetrics, request: RunningRequest, match: MatchResult) -> None:
            census.requests[id(request.req)] = (request.prompt_len, match.full_kv_hit_length)
            mamba = [c for c in self.cache.components if isinstance(c, MambaComponent)]
            if mamba and request.num_admissions == 1 and match.device_prefix_len:
                slot = mamba[0].slot(match.last_device_node)
                if slot is not None:
                    kind = census.kind_of_slot.get(slot, "unknown")
                    census.resumed[kind] += 1
                    census.resumed_tokens[kind] += match.device_prefix_len
                    census.used.add(slot)
            admit(self, request, match)

        def on_step(self: ReplayMetrics, scheduler: Scheduler) -> None:
            pools = self.cache.pools
            if pools.mamba is not None:
                held = held_by(scheduler.running, pools.mamba)["mamba"]
                used = pools.capacities()["mamba"] - pools.available()["mamba"]
                census.samples["running"].append(len(scheduler.running))
                census.samples["held"].append(held)
                census.samples["tree"].append(used - held)
            step(self, scheduler)

        ReplayMetrics.on_admit = on_admit  # type: ignore[method-assign]
        ReplayMetrics.on_step = on_step  # type: ignore[method-assign]

    def _storing(self, method: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(cache: UnifiedRadixCache, req: Req, *args: Any, **kwargs: Any) -> Any:
            self.storing = req
            try:
                return method(cache, req, *args, **kwargs)
            finally:
                self.storing = None

        return wrapped


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", default="trace")
    parser.add_argument("--max-requests", type=int, default=2000)
    parser.add_argument("--config", default="mamba", choices=["mamba", "hybrid"])
    parser.add_argument("--policy", default=FLOP_AWARE)
    parser.add_argument("--max-running", type=int, default=None)
    args = parser.parse_args()
    base = base_options(args.source, str(TRACE)).updated(max_requests=args.max_requests)
    if args.max_running is not None:
        base = base.updated(max_running=args.max_running)
    base = base.updated(full_tokens=full_pool(base)[0], aux_eviction_policy=args.policy)
    full = run_replay(base.updated(config="full")).summary["hit_rate"]
    census = StateCensus(base.pools.page_size)
    census.install()
    options = sized(base, args.config, 1024 if args.config == "hybrid" else None, 1)
    s = run_replay(options).summary
    lost = s["lost_hits"]
    total = max(lost["full_kv_hit_tokens"], 1)
    print(f"{args.source} first {args.max_requests} requests, {args.config}, {args.policy}")
    print(f"hit rate {s['hit_rate']:.4f} / full-only {full:.4f} = {s['hit_rate'] / full:.3f}")
    print("lost:", {k: f"{v / total:.1%}" for k, v in lost["causes"].items()})
    for name, values in census.samples.items():
        ordered = sorted(values)
        print(f"{name}: mean {statistics.mean(values):.0f}, max {ordered[-1]}")
    print("| kind | stored | evicted | evicted unused | resumed from | resumed tokens |")
    print("|---|---|---|---|---|---|")
    for kind in ("grid", "prompt_end", "finish", "branch", "chunk", "unknown"):
        print(
            f"| {kind} | {census.stored[kind]} | {census.evicted[kind]} | "
            f"{census.evicted_unused[kind]} | {census.resumed[kind]} | "
            f"{census.resumed_tokens[kind]} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
