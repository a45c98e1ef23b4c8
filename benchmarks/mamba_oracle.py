"""How far an oracle eviction of Mamba states gets: Belady's order (evict the state whose next
use lies farthest in the future) with the trace's future requests known, next to `lru` and
`flop_aware` (retired; its study copy, `benchmarks/studies/retired_orders.py`), at issue 14's
pool sizes. It tells how much of the full+Mamba gap is the
eviction policy and how much is capacity. `oracle_replay(options)` runs it on any trace, config
with a Mamba pool, and budget (`benchmarks/hit_table.py`).

    .venv/bin/python -m benchmarks.mamba_oracle [--max-requests 2000] [--config mamba]
        [--mamba-slots 512]

A state at prefix `t[:p]` is *next used* by the first request, from the one being admitted
on, whose key starts with `t[:p]` (prefixes compared by a chain of page hashes). That counts a
request for every state on its path, also those a deeper cached state would serve instead, so
it is Belady on prefix reuse, an approximation of the best order rather than a proven bound:
it is one only where every hit ends at a state a single request reuses and nothing else is
evicted (an ample full pool, one request running); with tight slots and many requests
running it can lose to a plain order, since a state kept for a far use that a deeper state
serves instead, or one whose full KV is gone, wastes its slot.
The oracle replaces the victim choice of `flop_aware` (its class 0 on full+SWA+Mamba is
kept) in this process only: a measurement, not a feature.
"""

from __future__ import annotations

import argparse
import bisect
import sys
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from benchmarks.hybrid_hits import PAGE, TRACE, base_options, full_pool, sized
from benchmarks.studies.retired_orders import FLOP_AWARE, FlopAwareMamba
from uniradix.sim.replay import ReplayOptions, admissible, load_specs, run_replay
from uniradix.sim.request_spec import RequestSpec
from uniradix.sim.scheduler import Scheduler
from uniradix.tree.node import TreeNode

NEVER = 1 << 60
PAGE_BYTES = PAGE * 8  # keys pack each token as 8 bytes


def page_hashes(packed: bytes, page_bytes: int = PAGE_BYTES) -> list[int]:
    """Hash of the prefix ending at each whole page of `packed`, in order."""
    out, h = [], 0
    for start in range(0, len(packed) - page_bytes + 1, page_bytes):
        h = hash((h, packed[start : start + page_bytes]))
        out.append(h)
    return out


def replayed_specs(options: ReplayOptions) -> list[RequestSpec]:
    """The requests `run_replay(options)` serves, numbered as it numbers them."""
    capacity = options.pools.full_tokens // options.pools.page_size * options.pools.page_size
    return admissible(load_specs(options, capacity), capacity, options.pools.page_size)


class Oracle:
    def __init__(self, options: ReplayOptions) -> None:
        self.page_bytes = options.pools.page_size * 8
        self.uses: dict[int, list[int]] = defaultdict(list)  # prefix hash -> rids, ascending
        for rid, spec in enumerate(replayed_specs(options)):
            key = spec.prompt.token_ids()[:-1].astype("<i8").tobytes()
            for h in page_hashes(key, self.page_bytes):
                self.uses[h].append(rid)
        self.clock = 0
        self.victims = 0  # oracle choices made (a run that evicted nothing makes none)
        self._hash: dict[tuple[int, int], int | None] = {}

    def prefix_hash(self, node: TreeNode) -> int | None:
        path, n = [], node
        while n.parent is not None:
            path.append(n.key)
            n = n.parent
        memo = (node.id, sum(len(k) for k in path))
        if memo not in self._hash:
            packed = b"".join(reversed(path))
            whole = len(packed) % self.page_bytes == 0
            hashes = page_hashes(packed, self.page_bytes) if whole else []
            self._hash[memo] = hashes[-1] if hashes else None
        return self._hash[memo]

    def next_use(self, node: TreeNode) -> int:
        h = self.prefix_hash(node)
        rids = self.uses.get(h, []) if h is not None else []
        i = bisect.bisect_left(rids, self.clock)
        return rids[i] if i < len(rids) else NEVER

    def install(self) -> None:
        oracle = self
        admit = Scheduler._admit

        def timed_admit(self: Scheduler, rid: int, budget: int) -> object:
            oracle.clock = rid
            return admit(self, rid, budget)

        def farthest(self: FlopAwareMamba) -> TreeNode | None:
            i = self.index
            live = [
                n for n in self._credit if n.data[i].value is not None and n.data[i].lock_ref == 0
            ]
            oracle.victims += 1
            return max(live, key=oracle.next_use, default=None)

        Scheduler._admit = timed_admit  # type: ignore[method-assign,assignment]
        FlopAwareMamba._least_credit = farthest  # type: ignore[method-assign]


@contextmanager
def installed(oracle: Oracle) -> Iterator[Oracle]:
    """`oracle` chooses `flop_aware`'s victims inside the block only."""
    saved = Scheduler._admit
    oracle.install()
    try:
        yield oracle
    finally:
        Scheduler._admit = saved  # type: ignore[method-assign]
        del FlopAwareMamba._least_credit  # the inherited one again


def oracle_replay(options: ReplayOptions) -> dict[str, Any]:
    """The replay summary of `options` (a config with a Mamba pool) with the Mamba states'
    victims chosen by the oracle (its SWA order, if any, is `options`')."""
    with installed(Oracle(options)):
        s = run_replay(options.updated(aux_eviction_policy=FLOP_AWARE)).summary
    if any(s["leaked"].values()):
        raise RuntimeError(f"leak under the oracle: {s['leaked']}")
    return s


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-requests", type=int, default=2000)
    parser.add_argument("--config", default="mamba", choices=["mamba", "hybrid"])
    parser.add_argument("--mamba-slots", type=int, nargs="+", default=[512])
    args = parser.parse_args()
    base = base_options("trace", str(TRACE)).updated(max_requests=args.max_requests)
    base = base.updated(full_tokens=full_pool(base)[0])
    full = run_replay(base.updated(config="full")).summary["hit_rate"]
    window = 1024 if args.config == "hybrid" else None
    print(f"trace first {args.max_requests} requests, {args.config}, full-only {full:.4f}")
    print("| Mamba slots | lru | flop_aware | oracle (Belady) |")
    print("|---|---|---|---|")
    rows = {}
    for slots in args.mamba_slots:
        for policy in ("lru", FLOP_AWARE):
            options = sized(base, args.config, window, 1).updated(mamba_slots=slots)
            options = options.updated(aux_eviction_policy=policy)
            rows[(slots, policy)] = run_replay(options).summary["hit_rate"] / full
    oracle = Oracle(base)
    oracle.install()
    for slots in args.mamba_slots:
        options = sized(base, args.config, window, 1).updated(mamba_slots=slots)
        s = run_replay(options.updated(aux_eviction_policy=FLOP_AWARE)).summary
        assert not any(s["leaked"].values()), s["leaked"]
        lru, flop = rows[(slots, "lru")], rows[(slots, FLOP_AWARE)]
        print(f"| {slots} | {lru:.3f} | {flop:.3f} | {s['hit_rate'] / full:.3f} |")
    print(f"oracle victim choices: {oracle.victims}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
