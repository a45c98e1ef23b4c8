"""GreedyDual credits of tree nodes, shared by the credit orders of SWA windows
(`uniradix.eviction.swa_credit`) and Mamba states (`uniradix.eviction.mamba_credit`).

Credits sit in a heap with lazy deletion: an entry counts only while it is its node's current
credit and the node still holds the component's value, so a victim costs O(log n), not a pass
over every node; the heap is rebuilt when stale entries outnumber the live ones by more than
the order's slack. Ties in credit go by age (the push count).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable

from uniradix.tree.node import TreeNode

CreditEntry = tuple[float, int, TreeNode]


class GreedyDualCredits:
    """Mixin of a credit order: `inflation` is GreedyDual's L, `_credit` each node's credit;
    a node's worth is weighted by `1 + reuse_weight * uses`, its cost raised to
    `cost_exponent` (each order says what uses and cost are)."""

    def _init_credits(self, slack: int, reuse_weight: float, cost_exponent: float) -> None:
        if reuse_weight < 0 or cost_exponent <= 0:
            raise ValueError(
                f"reuse_weight={reuse_weight} must be >= 0 and cost_exponent={cost_exponent} > 0"
            )
        self.reuse_weight = reuse_weight
        self.cost_exponent = cost_exponent
        self.inflation = 0.0
        self._credit: dict[TreeNode, float] = {}
        self._heap: list[CreditEntry] = []
        self._pushes = itertools.count()
        self._slack = slack
        self._marks: dict[str, set[TreeNode]] = {}

    def _mark_set(self, name: str) -> set[TreeNode]:
        """A new set of marked nodes, kept like the credits: a node leaves it with its credit
        (`_drop_credit`), `_clear_credits` empties it, `_check_tables` checks it (`name`
        says what the marks are in its errors)."""
        marks: set[TreeNode] = set()
        self._marks[name] = marks
        return marks

    def _set_credit(self, node: TreeNode, credit: float) -> None:
        self._credit[node] = credit
        heapq.heappush(self._heap, (credit, next(self._pushes), node))
        if len(self._heap) > 2 * len(self._credit) + self._slack:
            self._heap = [(c, next(self._pushes), n) for n, c in self._credit.items()]
            heapq.heapify(self._heap)

    def _drop_credit(self, node: TreeNode) -> None:
        """`node`'s value is gone: its credit and marks go too (its heap entries go stale)."""
        self._credit.pop(node, None)
        for marks in self._marks.values():
            marks.discard(node)

    def _clear_credits(self) -> None:
        self.inflation = 0.0
        self._credit.clear()
        self._heap.clear()
        for marks in self._marks.values():
            marks.clear()

    def _pop_live(self, index: int) -> CreditEntry | None:
        """Takes the live entry of least credit off the heap (None when none is left),
        dropping the stale ones above it: touched since, or the value at `index` evicted."""
        heap, credits = self._heap, self._credit
        while heap:
            entry = heapq.heappop(heap)
            credit, _, node = entry
            if credits.get(node) == credit and node.data[index].value is not None:
                return entry
        return None

    def _check_tables(
        self,
        errors: list[str],
        index: int,
        holders: set[TreeNode],
        tables: Iterable[tuple[str, Iterable[TreeNode]]],
        order: str,
        held: str,
    ) -> None:
        """Each per-node table (`tables`, the credits among them, and the mark sets) keeps
        entries for `holders` with a live value only, and every holder has a credit."""
        for name, table in (*tables, *self._marks.items()):
            stale = [n.id for n in table if n not in holders or n.data[index].value is None]
            if stale:
                errors.append(f"{order}: {name} kept for nodes {stale} holding no {held}")
        missing = [n.id for n in holders if n not in self._credit]
        if missing:
            errors.append(f"{order}: {held}s on nodes {missing} have no credit")

    def _push_back(self, entries: Iterable[CreditEntry]) -> None:
        for entry in entries:
            heapq.heappush(self._heap, entry)
