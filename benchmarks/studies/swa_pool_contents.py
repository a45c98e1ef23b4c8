"""What fills the SWA pool: the live SWA tokens of a full+SWA replay on the Mooncake trace,
sampled every `--every` admissions, split by whether a later request uses the window (the
Belady oracle's next use, `benchmarks/swa_oracle.py`), whether it served a match, whether the
order marked it passed (a middle prefill chunk's end its request went past), leaf or inner,
and locked. Where the pool is mostly windows nobody uses again while hits are lost to SWA
evictions, the eviction order, not the memory, is what to fix.

    .venv/bin/python -m benchmarks.studies.swa_pool_contents [--max-requests 2000] [--window 4096]
        [--swa-policy study:greedy_dual] [--every 100] [--skip 500]

Shares are of all sampled live SWA tokens (samples before request `--skip` are left out: the
pool is still filling). A measurement in this process, not a feature: it wraps the
scheduler's admission to know the clock.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter

from benchmarks.hybrid_hits import TRACE, base_options, full_pool, sized
from benchmarks.studies.swa_window_demand import full_only_hits
from benchmarks.swa_oracle import NEVER, SWAOracle
from uniradix.components.swa import SWAComponent
from uniradix.sim.replay import run_replay
from uniradix.sim.scheduler import Scheduler
from uniradix.tree.node import TreeNode


def window_class(component: SWAComponent, node: TreeNode, oracle: SWAOracle) -> str:
    order = component._reuse
    used = "used later" if oracle.next_use(node) != NEVER else "never used"
    served = "served" if order is not None and order.was_served(node) else "never served"
    passed = order is not None and node in getattr(order, "_passed", ())
    kind = "leaf" if not node.children else "inner"
    locked = "locked, " if node.data[component.index].lock_ref > 0 else ""
    return f"{locked}{used}, {served}{', passed' if passed else ''}, {kind}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-requests", type=int, default=2000, help="0: the whole trace")
    parser.add_argument("--window", type=int, default=4096)
    parser.add_argument("--swa-policy", default=None, help="SWA eviction policy (None: default)")
    parser.add_argument("--every", type=int, default=100)
    parser.add_argument("--skip", type=int, default=500)
    args = parser.parse_args()
    limit = args.max_requests or None
    base = base_options("trace", str(TRACE)).updated(max_requests=limit)
    base = base.updated(full_tokens=full_pool(base)[0])
    hits, _, _ = full_only_hits(limit)
    oracle = SWAOracle(base, hits, args.window)
    options = sized(base, "swa", args.window, 1)
    if args.swa_policy is not None:
        options = options.updated(swa_eviction_policy=args.swa_policy)
    tokens: Counter[str] = Counter()
    components: list[SWAComponent] = []
    admit, init = Scheduler._admit, SWAComponent.__init__

    def sampled_admit(self: Scheduler, rid: int, budget: int) -> object:
        oracle.clock = rid
        if rid >= args.skip and rid % args.every == 0 and components:
            swa = components[-1]
            for node in swa.lru:
                tokens[window_class(swa, node, oracle)] += node.num_tokens
        return admit(self, rid, budget)

    def recorded_init(self: SWAComponent, *a: object, **k: object) -> None:
        init(self, *a, **k)  # type: ignore[arg-type]
        components.append(self)

    Scheduler._admit = sampled_admit  # type: ignore[method-assign,assignment]
    SWAComponent.__init__ = recorded_init  # type: ignore[method-assign]
    try:
        s = run_replay(options).summary
    finally:
        Scheduler._admit, SWAComponent.__init__ = admit, init  # type: ignore[method-assign]
    total = sum(tokens.values()) or 1
    print(
        f"trace first {limit or 'all'} requests, full+SWA W={args.window}, "
        f"{options.eviction.swa_eviction_policy}: hit rate {s['hit_rate']:.4f}"
    )
    print("| live SWA window | share of sampled SWA tokens |\n|---|---|")
    for name, n in sorted(tokens.items(), key=lambda kv: -kv[1]):
        print(f"| {name} | {n / total:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
