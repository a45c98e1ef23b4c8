"""The `flop_aware` eviction order of Mamba states: GreedyDual over the compute a state saves.

A Mamba state at prefix length `p` lets a request resume at `p`. If it is evicted, a request
that would have resumed there falls back to the nearest state above it on the path, at `q`,
and recomputes `[q, p)`. So what the state is worth is its *marginal* compute,
`prefix_cost(p) - prefix_cost(q)`, not the compute of the whole prefix: a state a few hundred
tokens below another one (a prompt end under a block-boundary checkpoint, a finished
request's state under its prompt's) is worth those few hundred tokens, a state far below the
nearest other one is worth all the tokens in between.

The order is GreedyDual (Young 1994; with sizes, Cao and Irani's GreedyDual-Size 1997), the
classic way to weigh recency against the cost of a miss: each state has a credit
`H = L + marginal cost` set when it is stored or a match resumes from it, the victim is the
unlocked state of least `H`, and `L` rises to the victim's `H`. A state no match uses loses
its standing as `L` rises past it; a costly one takes longer to. The marginal cost is taken
when the credit is set (an ancestor evicted later makes it an underestimate, which only
evicts the state sooner).

Before the credit order, states that cannot end any match are evicted first (class 0 of
`uniradix.components.aux_eviction`: on full+SWA+Mamba, a state whose SWA window is
tombstoned), among the `WINDOW` least recent.

Worked example: states at 512 (credit L+c(512)), 8192 (L+c(8192)-c(512)) and 8200 (L+c(8200)-
c(8192), eight tokens' worth): the state at 8200 goes first although it is the most recent;
requests that would have resumed at 8200 resume at 8192 and recompute eight tokens.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterator

from uniradix.components.aux_eviction import (
    WINDOW,
    BranchAwareEviction,
    EvictingComponent,
    prefix_cost,
)
from uniradix.tree.node import TreeNode


class FlopAwareEviction(BranchAwareEviction):
    """`flop_aware` order of a Mamba component; the component calls `touch` whenever a state
    is stored or used and `forget` when it is evicted.

    Credits sit in a heap with lazy deletion (an entry counts only while it is the node's
    current credit), so a victim costs O(log n), not a pass over every state; the heap is
    rebuilt when stale entries outnumber the live ones."""

    def __init__(self, component: EvictingComponent) -> None:
        super().__init__(component, None, covered=False)
        self.inflation = 0.0  # GreedyDual's L
        self._credit: dict[TreeNode, float] = {}
        self._heap: list[tuple[float, int, TreeNode]] = []
        self._pushes = itertools.count()  # ties in credit go by age

    def marginal_cost(self, node: TreeNode) -> float:
        """Compute saved by resuming at `node` rather than at the nearest state above it."""
        i, tree = self.index, self.tree
        above = node.parent
        while above is not None and above.parent is not None and above.data[i].value is None:
            above = above.parent
        upper = 0 if above is None or above.parent is None else tree.prefix_len(above)
        return prefix_cost(tree.prefix_len(node)) - prefix_cost(upper)

    def touch(self, node: TreeNode) -> None:
        credit = self.inflation + self.marginal_cost(node)
        self._credit[node] = credit
        heapq.heappush(self._heap, (credit, next(self._pushes), node))
        if len(self._heap) > 2 * len(self._credit) + WINDOW:
            self._heap = [(c, next(self._pushes), n) for n, c in self._credit.items()]
            heapq.heapify(self._heap)

    def forget(self, node: TreeNode) -> None:
        self._credit.pop(node, None)

    def reset(self) -> None:
        self.inflation = 0.0
        self._credit.clear()
        self._heap.clear()

    def credit(self, node: TreeNode) -> float:
        credit = self._credit.get(node)
        return self.inflation + self.marginal_cost(node) if credit is None else credit

    def candidates(self) -> Iterator[TreeNode]:
        while True:
            victim = self._unusable_victim() or self._least_credit()
            if victim is None:
                # Only states never credited are left (none should be): LRU order.
                victim = self.component.lru.least_recent_unlocked()
            if victim is None:
                return
            yield victim

    def _unusable_victim(self) -> TreeNode | None:
        """Class 0 among the `WINDOW` least recent unlocked states (full+SWA+Mamba only)."""
        if self.swa is None:
            return None
        lru, seen = self.component.lru, 0
        node = lru.least_recent_unlocked()
        while node is not None and seen < WINDOW:
            if self._unusable(node, *self.swa):
                return node
            node = lru.least_recent_unlocked(before=node)
            seen += 1
        return None

    def _least_credit(self) -> TreeNode | None:
        """The unlocked state of least credit; raises `inflation` to it. Locked states met on
        the way go back into the heap before returning."""
        i, heap, locked = self.index, self._heap, []
        victim = None
        while heap:
            entry = heapq.heappop(heap)
            credit, _, node = entry
            if self._credit.get(node) != credit or node.data[i].value is None:
                continue  # stale: touched since, or evicted
            if node.data[i].lock_ref > 0:
                locked.append(entry)
                continue
            heapq.heappush(heap, entry)  # it stays listed until `forget`
            self.inflation = max(self.inflation, credit)
            victim = node
            break
        for entry in locked:
            heapq.heappush(heap, entry)
        return victim
