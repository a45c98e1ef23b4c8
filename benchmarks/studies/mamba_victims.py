"""Which Mamba evictions differ between two orders on one hit-table cell, and why one order's
choices make more hits: per victim the order chose, how many unlocked states it had to choose
from, and for every request whose hit differs the history of the state it lost (stored,
resumed from, evicted: by the order or with its full KV).

    .venv/bin/python -m benchmarks.studies.mamba_victims [--trace agentic_interfered/s1]
        [--budget tight] [--config hybrid] [--orders study:no_ghosts reuse_credit]
        [--sharegpt PATH]
    .venv/bin/python -m benchmarks.studies.mamba_victims hybrid_hits [its arguments]

Both orders run with the SWA default, so only the Mamba order differs (the hit table's `lru`
column orders both pools). `hybrid_hits ...` runs `benchmarks.hybrid_hits` with this
module's orders registered, e.g. `--policy study:no_ghosts`.

Two orders are registered for comparison: `study:no_ghosts`, the default without its ghost
list (`uniradix.eviction.mamba_ghosts`: the default before it), and `study:ghost_resumes`,
the ghost list tried the other way: a returned state gets back its former resume count (its
credit weighted by it, and so off probation) instead of being spared probation and covers.
Measurements, not library orders: their figures are in docs/hit_rates.md.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from collections import Counter, OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from benchmarks.hit_table import BUDGETS, sized
from benchmarks.traces.suite import suite
from uniradix.components.mamba import MambaComponent
from uniradix.eviction.aux_eviction import EvictingComponent
from uniradix.eviction.mamba_ghosts import StateGhosts, prefix_digest
from uniradix.eviction.mamba_probation import ProbationEviction
from uniradix.eviction.orders import register_mamba_order
from uniradix.key import UNIT_BYTES
from uniradix.sim.batch import RunningRequest
from uniradix.sim.metrics import ReplayMetrics
from uniradix.sim.replay import run_replay
from uniradix.sim.scheduler import Scheduler
from uniradix.tree.node import TreeNode
from uniradix.types import FreeSlots, InsertContext, MatchPrefixParams, MatchResult

HISTORY = 8
MOONCAKE = Path("../shared/reference/mooncake_synthetic_trace.jsonl")


def key_digest(extra_key: str | None, units: bytes, length: int) -> bytes:
    """`prefix_digest` (`uniradix.eviction.mamba_ghosts`) of the node that would end `length`
    tokens into a key."""
    h = hashlib.blake2b(digest_size=16)
    h.update((extra_key or "").encode())
    h.update(units[: length * UNIT_BYTES])
    return h.digest()


class NoGhosts(StateGhosts):
    """A ghost list that keeps nothing."""

    def on_store(self, node: TreeNode) -> bool:
        return False

    def on_evict(self, node: TreeNode, showed_reuse: bool, live_states: int) -> None:
        return None


class WithoutGhosts(ProbationEviction):
    """`study:no_ghosts`: the default without its ghost list."""

    def __init__(self, component: EvictingComponent) -> None:
        super().__init__(component)
        self.ghosts = NoGhosts(self.tree)


class GhostResumes(WithoutGhosts):
    """`study:ghost_resumes`: a resumed state that leaves the tree with its full KV leaves its
    resume count as a ghost (as many as live states); stored again, it gets the count back."""

    def __init__(self, component: EvictingComponent) -> None:
        super().__init__(component)
        self._counts: OrderedDict[bytes, int] = OrderedDict()

    def touch(self, node: TreeNode, resumed: bool = False) -> None:
        if not resumed and node not in self._credit and self._counts:
            count = self._counts.pop(prefix_digest(self.tree, node), 0)
            if count:
                self._resumes[node] = count
        super().touch(node, resumed)

    def forget(self, node: TreeNode) -> None:
        count = self._resumes.get(node, 0)
        if count and node in self.tree.leaves:
            self._counts[prefix_digest(self.tree, node)] = count
            while len(self._counts) > max(len(self.component.lru), 1):
                self._counts.popitem(last=False)
        super().forget(node)

    def reset(self) -> None:
        super().reset()
        self._counts.clear()


NO_GHOSTS = register_mamba_order("study:no_ghosts", WithoutGhosts)
GHOST_RESUMES = register_mamba_order("study:ghost_resumes", GhostResumes)


@dataclass
class Event:
    kind: str  # "store", "resume", "evict"
    rid: int | None  # the request last admitted (or being admitted)
    length: int  # prefix length of the state
    digest: bytes
    picked: bool = False  # an eviction the order chose (not one with a full-KV leaf)
    with_full_kv: bool = False  # the node left the tree with it
    unlocked: int = 0  # unlocked states the order chose among (picked evictions only)


@dataclass
class Recorder:
    """Wraps the Mamba component's and the scheduler's hooks in this process only."""

    events: list[Event] = field(default_factory=list)
    hits: dict[int, tuple[int, int]] = field(default_factory=dict)  # rid -> (hit, full-KV)
    keys: dict[int, tuple[str | None, bytes]] = field(default_factory=dict)  # rid -> its key
    rid: int | None = None
    picked: TreeNode | None = None

    def install(self) -> None:
        rec = self
        admit, candidates = Scheduler._admit, MambaComponent.eviction_candidates
        evict, commit = MambaComponent.evict_node, MambaComponent.commit_insert
        finalize, on_admit = MambaComponent.finalize_match, ReplayMetrics.on_admit

        def _admit(self: Scheduler, rid: int, budget: int) -> Any:
            rec.rid = rid
            return admit(self, rid, budget)

        def eviction_candidates(self: MambaComponent) -> Iterator[TreeNode]:
            for node in candidates(self):
                rec.picked = node
                yield node

        def evict_node(self: MambaComponent, node: TreeNode, actions: list[FreeSlots]) -> int:
            picked, rec.picked = node is rec.picked, None
            unlocked = sum(1 for n in self.lru if n.data[self.index].lock_ref == 0)
            rec.add(self, node, "evict", picked, node in self.tree.leaves, unlocked)
            return evict(self, node, actions)

        def commit_insert(self: MambaComponent, ins: InsertContext, node: TreeNode) -> None:
            fresh = self.slot(node) is None
            commit(self, ins, node)
            if fresh and self.slot(node) is not None:
                rec.add(self, node, "store")

        def finalize_match(self: MambaComponent, walk: Any, params: MatchPrefixParams) -> Any:
            if rec.rid is not None:
                rec.keys.setdefault(rec.rid, (params.key.extra_key, bytes(params.key.units)))
            if walk.num_accepted:
                rec.add(self, walk.path[walk.num_accepted - 1], "resume")
            return finalize(self, walk, params)

        def on_admit_(self: ReplayMetrics, request: RunningRequest, match: MatchResult) -> None:
            if request.num_admissions == 1:
                rec.hits[request.spec.rid] = (match.device_prefix_len, match.full_kv_hit_length)
            on_admit(self, request, match)

        Scheduler._admit = _admit  # type: ignore[method-assign]
        MambaComponent.eviction_candidates = eviction_candidates  # type: ignore[method-assign]
        MambaComponent.evict_node = evict_node  # type: ignore[method-assign]
        MambaComponent.commit_insert = commit_insert  # type: ignore[method-assign]
        MambaComponent.finalize_match = finalize_match  # type: ignore[method-assign]
        ReplayMetrics.on_admit = on_admit_  # type: ignore[method-assign]

    def add(self, c: MambaComponent, node: TreeNode, kind: str, picked: bool = False,
            with_full_kv: bool = False, unlocked: int = 0) -> None:  # fmt: skip
        digest = prefix_digest(c.tree, node)
        length = c.tree.prefix_len(node)
        self.events.append(Event(kind, self.rid, length, digest, picked, with_full_kv, unlocked))

    def clear(self) -> None:
        self.events, self.hits, self.keys = [], {}, {}


def replay(rec: Recorder, options: Any, order: str) -> tuple[float, Recorder]:
    """Hit rate of `options` under Mamba order `order`, and what `rec` saw (a copy)."""
    rec.clear()
    rate = float(run_replay(options.updated(aux_eviction_policy=order)).summary["hit_rate"])
    return rate, replace(rec)


def picked(events: list[Event]) -> list[Event]:
    return [e for e in events if e.kind == "evict" and e.picked]


def report(name: str, runs: dict[str, tuple[float, Recorder]]) -> list[str]:
    (a, (rate_a, rec_a)), (b, (rate_b, rec_b)) = runs.items()
    lines = [f"{name}: {a} {rate_a:.4f}, {b} {rate_b:.4f}"]
    for order, (_, rec) in runs.items():
        chosen = picked(rec.events)
        choice = Counter(min(e.unlocked, 3) for e in chosen)
        others = sum(1 for e in rec.events if e.kind == "evict" and not e.picked)
        lines.append(
            f"- {order}: {len(chosen)} victims the order chose ({choice[1]} the only unlocked "
            f"state, {choice[2]} one of two, {choice[3]} among three or more); {others} states "
            "went with a full-KV leaf the full pool evicted or by a cascade"
        )
    pa, pb = picked(rec_a.events), picked(rec_b.events)
    first = next(
        (i for i, (x, y) in enumerate(zip(pa, pb, strict=False)) if x.digest != y.digest), None
    )
    if first is not None:
        lines.append(f"- the orders first choose different victims at victim {first + 1}")
    differing = sorted(r for r in rec_a.hits if rec_a.hits[r] != rec_b.hits.get(r))
    net = sum(rec_b.hits.get(r, (0, 0))[0] - rec_a.hits[r][0] for r in differing)
    lines.append(f"- {len(differing)} requests' hits differ; {b} minus {a}: {net:+d} hit tokens")
    for rid in differing:
        lines.append(f"- request {rid}: hit (usable, full-KV) {a} {rec_a.hits[rid]}, "
                     f"{b} {rec_b.hits.get(rid)}")  # fmt: skip
        for order, (_, rec) in runs.items():
            lines.extend(f"  - {order}: {line}" for line in history(rec, rid))
    return lines


def history(rec: Recorder, rid: int) -> list[str]:
    """What happened to the states on request `rid`'s path before its admission: each
    stored, resumed from or evicted (the last `HISTORY` events)."""
    extra, units = rec.keys.get(rid, (None, b""))
    lengths = {e.length for e in rec.events if e.length * UNIT_BYTES <= len(units)}
    on_path = {key_digest(extra, units, n) for n in lengths}
    admitted = next((i for i, e in enumerate(rec.events) if e.rid == rid), len(rec.events))
    out = []
    for e in rec.events[:admitted]:
        if e.digest not in on_path:
            continue
        how = ""
        if e.kind == "evict" and e.picked:
            how = f", chosen by the order among {e.unlocked} unlocked"
        elif e.kind == "evict":
            how = ", with its full KV" if e.with_full_kv else ", by a cascade"
        out.append(f"{e.kind} at {e.length} (request {e.rid}){how}")
    return out[-HISTORY:]


def main(argv: list[str] | None = None) -> int:
    args_in = sys.argv[1:] if argv is None else argv
    if args_in[:1] == ["hybrid_hits"]:
        from benchmarks import hybrid_hits

        sys.argv = ["benchmarks.hybrid_hits", *args_in[1:]]
        return hybrid_hits.main()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", default="agentic_interfered/s1")
    parser.add_argument("--budget", default="tight", choices=list(BUDGETS))
    parser.add_argument("--config", default="hybrid", choices=["mamba", "hybrid"])
    parser.add_argument("--orders", nargs=2, default=[NO_GHOSTS, "reuse_credit"])
    parser.add_argument("--mooncake", type=Path, default=MOONCAKE)
    parser.add_argument("--sharegpt", type=Path, default=None)
    args = parser.parse_args(args_in)
    traces = {t.name: t for t in suite(mooncake=args.mooncake, sharegpt_json=args.sharegpt,
                                       only=[args.trace])}  # fmt: skip
    if args.trace not in traces:
        print(f"trace {args.trace!r} is not in the suite here", file=sys.stderr)
        return 2
    options = replace(sized(traces[args.trace].options, *BUDGETS[args.budget]), config=args.config)
    rec = Recorder()
    rec.install()
    runs = {order: replay(rec, options, order) for order in args.orders}
    print("\n".join(report(f"{args.trace} {args.budget} {args.config}", runs)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
