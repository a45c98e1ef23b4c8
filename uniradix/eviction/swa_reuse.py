"""The `reuse_aware` eviction order of SWA windows: windows with no evidence of reuse first.

An SWA window serves a hit only if a later request's match ends right under it, and LRU keeps
every window for the same time whatever its chance of that. Most windows a request leaves
behind are never matched (on the Mooncake trace each request leaves ~8.7k live SWA tokens, and
LRU keeps them ~150 requests against a median reuse distance of ~190), while a window a match
ended under sits where matches end again (a shared prefix's end, the branch point of a
conversation). So among the `SCAN` least recent unlocked windows, the least recent one that
**never served a match** goes first (no match ended within one window below it); when all of
them have, the least recent overall goes (plain LRU).

Only a served match counts as evidence (a later insert passing over the node is no sign that
this window will be matched), and the scan is bounded so that a window that served still ages
out once every other one among the `SCAN` least recent served too.

Worked example (LRU order, least recent first): A (never matched), B (a match ended under
it), C (never matched): A goes first, then C, then B.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from uniradix.eviction.aux_eviction import EvictingComponent
from uniradix.tree.node import TreeNode
from uniradix.types import Req

SWA_EVICTION_POLICIES = (
    "lru",
    "reuse_aware",
    "greedy_dual",
    "greedy_dual_window",
    "greedy_dual_output",
)
SCAN: int | None = 64  # least recent windows searched for one without evidence (None: all)


def check_swa_eviction_policy(name: object) -> str:
    if name not in SWA_EVICTION_POLICIES:
        raise ValueError(
            f"unknown swa_eviction_policy {name!r}; choose one of {list(SWA_EVICTION_POLICIES)}"
        )
    return str(name)


class SWAReuseEviction:
    """`reuse_aware` order of an SWA component; the component calls `served` for the nodes
    a match ended under, `refreshed` for those an insert stored or touched, `split` when a
    listed node is split, and `forget` when a node's window is evicted."""

    def __init__(self, component: EvictingComponent) -> None:
        self.component = component
        self._served: set[TreeNode] = set()

    def served(self, node: TreeNode, depth: int, window_end: int) -> None:
        """A match ended `window_end` units deep, within one window below `node`, which ends
        `depth` units deep."""
        self._served.add(node)

    def was_served(self, node: TreeNode) -> bool:
        return node in self._served

    def refreshed(self, node: TreeNode, depth: int, window_end: int) -> None:
        """An insert ending `window_end` units deep stored or touched `node`'s window (ending
        `depth` units deep): no evidence of reuse (LRU order)."""

    def inserted_past_checkpoints(
        self, node: TreeNode, end: int, checkpoints: Sequence[int], walked: int
    ) -> None:
        """An insert ending at `node` (`end` units deep) was made by a request with
        `checkpoints` (`Req.checkpoint_seqlens`): the nodes past the last hold its decode
        outputs' window. The insert refreshed the windows of the nodes ending deeper than
        `walked` (one window and a page below `end`), not those above."""

    def request_step(self, req: Req) -> None:
        """`req` is running (called at each of its out-of-window steps)."""

    def split(self, parent: TreeNode, child: TreeNode) -> None:
        """`parent` was split off `child`'s window: it served what the child served."""
        if child in self._served:
            self._served.add(parent)

    def forget(self, node: TreeNode) -> None:
        self._served.discard(node)

    def reset(self) -> None:
        self._served.clear()

    def reused(self, node: TreeNode) -> bool:
        """Whether `node`'s window served a match (see the module docstring)."""
        return node in self._served

    def candidates(self) -> Iterator[TreeNode]:
        while True:
            lru = self.component.lru
            head = node = lru.least_recent_unlocked()
            if head is None:
                return
            budget = SCAN
            while node is not None and self.reused(node):
                if budget is not None:
                    budget -= 1
                    if budget <= 0:
                        node = None  # no window without evidence within the scan
                        break
                node = lru.least_recent_unlocked(before=node)
            yield head if node is None else node

    def check_invariants(self, errors: list[str]) -> None:
        """Serve marks are kept for live windows only (dropped at eviction)."""
        i = self.component.index
        stale = [n.id for n in self._served if n.data[i].value is None]
        if stale:
            errors.append(f"swa order: serve marks kept for nodes {stale} holding no window")
