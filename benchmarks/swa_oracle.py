"""How far an oracle eviction of SWA windows gets: Belady's order (evict the window whose next
use lies farthest in the future) with the trace's future requests known, next to `lru` and
the SWA orders, at issue 14's pool sizes. It tells how much of the full+SWA gap is the
eviction order and how much is capacity (as `benchmarks/mamba_oracle.py` for Mamba states).

    .venv/bin/python -m benchmarks.swa_oracle [--max-requests 2000] [--windows 1024 4096]
        [--config swa] [--policies lru reuse_credit] [--scale 1]

A window is *used* by a request only where that request's match ends within one window above
it: full-only's hit length `h` of each request (from a full-attention-only replay at the same
sizes, as `benchmarks/swa_window_demand.py`) is where its match would end, so an SWA node
`[a, b)` is used by a request that holds the node's prefix up to `min(b, h)` and whose window
`[h - W, h)` overlaps `[a, b)` (prefixes compared by a chain of page hashes). A node used by no
later request goes first, least recent first; otherwise the one used farthest ahead. A hit
that the cache could still serve at a shallower boundary, or that full-only itself missed,
counts for nothing, and an SWA leaf's eviction also drops its full KV, which the oracle does
not weigh: this is Belady on full-only's match ends, an estimate of the best order rather
than a proven bound. The oracle replaces the SWA component's victim choice in this process
only: a measurement, not a feature. `swa_oracle_replay(options)` runs it on any trace, page and
budget (`benchmarks/hit_table.py`), with the Mamba oracle too on full+SWA+Mamba.
"""

from __future__ import annotations

import argparse
import bisect
import sys
from collections import defaultdict
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

from benchmarks.hybrid_hits import PAGE, TRACE, base_options, full_pool, sized
from benchmarks.mamba_oracle import oracle_replay as mamba_oracle_replay
from benchmarks.mamba_oracle import replayed_specs
from benchmarks.studies import retired_orders
from benchmarks.studies.swa_window_demand import full_only_hits, full_only_hits_at
from uniradix.components.swa import SWAComponent
from uniradix.sim.replay import ReplayOptions, run_replay
from uniradix.sim.scheduler import Scheduler
from uniradix.tree.node import TreeNode

NEVER = 1 << 60
PAGE_BYTES = PAGE * 8  # keys pack each token as 8 bytes


def chain(packed: bytes, start: int = 0, page_bytes: int = PAGE_BYTES) -> list[int]:
    """Hash of the prefix ending at each whole page of `packed`, continuing from `start`."""
    out, h = [], start
    for at in range(0, len(packed) - page_bytes + 1, page_bytes):
        h = hash((h, packed[at : at + page_bytes]))
        out.append(h)
    return out


class SWAOracle:
    def __init__(self, options: ReplayOptions, hits: dict[int, int], window: int) -> None:
        # prefix hash at a page end q -> the requests whose window holds the page ending at q
        self.window_uses: dict[int, list[int]] = defaultdict(list)
        # prefix hash at h -> the requests whose match ends at h
        self.end_uses: dict[int, list[int]] = defaultdict(list)
        page = options.pools.page_size
        self.page_bytes = page * 8
        for rid, spec in enumerate(replayed_specs(options)):
            h = hits.get(rid, 0)
            if not h:
                continue
            packed = spec.prompt.token_ids()[:h].astype("<i8").tobytes()
            hashes = chain(packed, page_bytes=self.page_bytes)
            for q in range(max(h - window, 0) + page, h + 1, page):
                self.window_uses[hashes[q // page - 1]].append(rid)
            self.end_uses[hashes[-1]].append(rid)
        self.clock = 0
        self.victims = 0
        self.first_use: str | None = None  # an SWA policy: the oracle decides first uses only
        self._ends: dict[tuple[int, int], int] = {}  # (node id, prefix length) -> end hash
        self._pages: dict[tuple[int, int, int], list[int]] = {}

    def _end_hash(self, node: TreeNode) -> int:
        """Hash of the prefix ending at `node`'s end (0 for the root)."""
        if node.parent is None:
            return 0
        return self.page_hashes(node)[-1]

    def page_hashes(self, node: TreeNode) -> list[int]:
        """Prefix hashes at each page end within `node`."""
        end = sum(n.num_tokens for n in _path(node))
        memo = (node.id, end, node.num_tokens)
        if memo not in self._pages:
            assert node.parent is not None
            self._pages[memo] = chain(node.key, self._end_hash(node.parent), self.page_bytes)
        return self._pages[memo]

    def _next(self, rids: list[int]) -> int:
        i = bisect.bisect_left(rids, self.clock)
        return rids[i] if i < len(rids) else NEVER

    def next_use(self, node: TreeNode) -> int:
        hashes = self.page_hashes(node)
        first = self._next(self.window_uses.get(hashes[-1], []))
        for h in hashes[:-1]:
            rids = self.end_uses.get(h)
            if rids:
                first = min(first, self._next(rids))
        return first

    def install(self) -> None:
        oracle = self
        admit = Scheduler._admit

        def timed_admit(self: Scheduler, rid: int, budget: int) -> object:
            oracle.clock = rid
            return admit(self, rid, budget)

        def farthest(self: SWAComponent) -> Iterator[TreeNode]:
            lru = self.lru
            while True:
                best, best_use = None, -1
                node = lru.least_recent_unlocked()
                while node is not None:
                    use = oracle.next_use(node)
                    if use > best_use:
                        best, best_use = node, use
                        if use == NEVER:
                            break
                    node = lru.least_recent_unlocked(before=node)
                if best is None:
                    return
                oracle.victims += 1
                yield best

        def first_use(self: SWAComponent) -> Iterator[TreeNode]:
            """The SWA order's victims, but a never-served window no later request uses
            (least recent first) goes before any: the first-use decision made by the oracle."""
            order = self._reuse
            assert order is not None, "--first-use needs an SWA order"
            chosen = order.candidates()
            lru = self.lru
            while True:
                node = lru.least_recent_unlocked()
                while node is not None and (
                    order.was_served(node) or oracle.next_use(node) != NEVER
                ):
                    node = lru.least_recent_unlocked(before=node)
                if node is None and (node := next(chosen, None)) is None:
                    return
                oracle.victims += 1
                yield node

        Scheduler._admit = timed_admit  # type: ignore[method-assign,assignment]
        victims = first_use if self.first_use else farthest
        SWAComponent.eviction_candidates = victims  # type: ignore[method-assign]


@contextmanager
def installed(oracle: SWAOracle) -> Iterator[SWAOracle]:
    """`oracle` chooses the SWA victims inside the block only."""
    saved = Scheduler._admit, SWAComponent.eviction_candidates
    oracle.install()
    try:
        yield oracle
    finally:
        Scheduler._admit, SWAComponent.eviction_candidates = saved  # type: ignore[method-assign]


def swa_oracle_replay(options: ReplayOptions) -> dict[str, Any]:
    """The replay summary of `options` (a config with an SWA pool) with the SWA victims chosen
    by the oracle; on full+SWA+Mamba the Mamba oracle chooses the Mamba victims too."""
    oracle = SWAOracle(options, full_only_hits_at(options), options.pools.sliding_window)
    with ExitStack() as stack:
        stack.enter_context(installed(oracle))
        if options.config == "hybrid":
            return mamba_oracle_replay(options.updated(swa_eviction_policy="lru"))
        s = run_replay(options.updated(swa_eviction_policy="lru")).summary
    if any(s["leaked"].values()):
        raise RuntimeError(f"leak under the oracle: {s['leaked']}")
    return s


def _path(node: TreeNode) -> Iterator[TreeNode]:
    while node.parent is not None:
        yield node
        node = node.parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-requests", type=int, default=2000, help="0: the whole trace")
    parser.add_argument("--windows", type=int, nargs="+", default=[1024, 4096])
    parser.add_argument("--config", default="swa", choices=["swa", "hybrid"])
    parser.add_argument("--policies", nargs="*", default=["lru", "reuse_credit"])
    parser.add_argument("--scale", type=int, default=1, help="SWA pool multiple")
    parser.add_argument(
        "--first-use",
        default=None,
        help="an SWA policy (or a retired one's study copy, e.g. "
        f"{retired_orders.GREEDY_DUAL_WINDOW}): the oracle only evicts never-served windows "
        "no later request uses",
    )
    args = parser.parse_args()
    limit = args.max_requests or None
    base = base_options("trace", str(TRACE)).updated(max_requests=limit)
    base = base.updated(full_tokens=full_pool(base)[0])
    hits, _, _ = full_only_hits(limit)
    full = run_replay(base.updated(config="full")).summary["hit_rate"]
    print(f"trace first {limit or 'all'} requests, {args.config}, full-only {full:.4f}")
    oracle_name = f"{args.first_use}, first uses by the oracle" if args.first_use else "Belady"
    print("| W | " + "".join(f"{p} | " for p in args.policies) + f"oracle ({oracle_name}) |")
    print("|---|" + "---|" * (len(args.policies) + 1))
    for window in args.windows:
        options = sized(base, args.config, window, args.scale)
        ratios = []
        for policy in args.policies:
            s = run_replay(options.updated(swa_eviction_policy=policy)).summary
            ratios.append(f"{s['hit_rate'] / full:.3f}")
        oracle = SWAOracle(base, hits, window)
        oracle.first_use = args.first_use
        saved = Scheduler._admit, SWAComponent.eviction_candidates
        oracle.install()
        try:
            policy = args.first_use or "lru"
            s = run_replay(options.updated(swa_eviction_policy=policy)).summary
        finally:
            Scheduler._admit, SWAComponent.eviction_candidates = saved  # type: ignore[method-assign]
        assert not any(s["leaked"].values()), s["leaked"]
        cells = "".join(f"{r} | " for r in ratios)
        print(f"| {window} | {cells}{s['hit_rate'] / full:.3f} |")
        print(f"oracle victim choices: {oracle.victims}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
