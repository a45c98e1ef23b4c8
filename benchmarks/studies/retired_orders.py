"""Study copies of the eviction orders retired from the library, kept because the hit table
(`benchmarks/hit_table.py`) compares the default with each of them on the judging half.

Importing this module registers them (`uniradix.eviction.orders`) under `study:` names:

- SWA `study:reuse_aware`: among the `SCAN` least recent windows, the least recent one that
  never served a match goes first, else the least recent;
- SWA `study:greedy_dual`: the library's credit order with each node credited by its own end
  and passed windows worth a tenth (not a fiftieth);
- SWA `study:greedy_dual_window`: the library's credit order without the output windows'
  measured worth;
- Mamba `study:flop_aware`: GreedyDual over the marginal compute alone, no reuse weight, no
  probation;
- `study:branch_aware` (both pools; the retired `--aux-eviction-policy branch_aware` ordered
  both), after Marconi (MLSys 2025): among the `WINDOW` least recent nodes, unusable ones
  first, then (Mamba) *covered* states (a deeper state on the single-child chain below), then
  the rest, each class by recency plus the compute a hit there saves.
"""

from __future__ import annotations

from collections.abc import Iterator

from uniradix.eviction import swa_order
from uniradix.eviction.aux_eviction import WINDOW, EvictingComponent, prefix_cost, unusable
from uniradix.eviction.mamba_credit import MambaCreditOrder
from uniradix.eviction.orders import register_mamba_order, register_swa_order
from uniradix.eviction.swa_credit import SWACreditEviction
from uniradix.eviction.swa_order import SWAOrder
from uniradix.tree.node import TreeNode

MAX_CHAIN = 64  # nodes followed down a single-child chain looking for a deeper state
GREEDY_DUAL_PASSED_WORTH = 0.1


class ReuseAwareSWA(SWAOrder):
    """`reuse_aware` SWA windows: never-served windows first among the least recent."""

    def candidates(self) -> Iterator[TreeNode]:
        while True:
            lru = self.component.lru
            head = node = lru.least_recent_unlocked()
            if head is None:
                return
            budget = swa_order.SCAN
            while node is not None and self.was_served(node):
                if budget is not None:
                    budget -= 1
                    if budget <= 0:
                        node = None  # no window without evidence within the scan
                        break
                node = lru.least_recent_unlocked(before=node)
            yield head if node is None else node


class GreedyDualSWA(SWACreditEviction):
    """`greedy_dual`: each node credited by its own end, passed windows worth a tenth."""

    passed_worth = GREEDY_DUAL_PASSED_WORTH

    def served(self, node: TreeNode, depth: int, window_end: int) -> None:
        self._serve(node, depth)

    def refreshed(self, node: TreeNode, depth: int, window_end: int) -> None:
        self._set_credit(node, self.inflation + self.worth(node, depth))


class FlopAwareMamba(MambaCreditOrder):
    """`flop_aware`: credits of the marginal compute alone; unusable states first."""

    def __init__(self, component: EvictingComponent) -> None:
        super().__init__(component, reuse_weight=0.0, cost_exponent=1.0)

    def candidates(self) -> Iterator[TreeNode]:
        while True:
            victim = self._unusable_victim() or self._least_credit()
            if victim is None:
                victim = self.component.lru.least_recent_unlocked()
            if victim is None:
                return
            yield victim


class BranchAware:
    """`branch_aware` victims of `component` (its current `lru` list is read on each call);
    `swa`: (index, window) of the cache's SWA component, if any; `covered`: class 1."""

    def __init__(
        self, component: EvictingComponent, swa: tuple[int, int] | None, covered: bool
    ) -> None:
        self.component = component
        self.swa = swa
        self.covered = covered

    def candidates(self) -> Iterator[TreeNode]:
        while True:
            lru = self.component.lru
            window: list[TreeNode] = []
            node = lru.least_recent_unlocked()
            while node is not None and len(window) < WINDOW:
                window.append(node)
                node = lru.least_recent_unlocked(before=node)
            if not window:
                return
            yield self._pick(window)

    def _pick(self, window: list[TreeNode]) -> TreeNode:
        costs = [prefix_cost(self.component.tree.prefix_len(n)) for n in window]
        top = max(costs) or 1.0
        last = max(len(window) - 1, 1)
        best, best_key = window[0], (3, 0.0)
        for rank, (node, cost) in enumerate(zip(window, costs, strict=True)):
            key = (self._class(node), rank / last + cost / top)
            if key < best_key:
                best, best_key = node, key
        return best

    def _class(self, node: TreeNode) -> int:
        c = self.component
        if self.swa is not None and unusable(c.tree, node, c.index, *self.swa):
            return 0
        if self.covered and self._covered(node):
            return 1
        return 2

    def _covered(self, node: TreeNode) -> bool:
        i = self.component.index
        for _ in range(MAX_CHAIN):
            if len(node.children) != 1:
                return False
            (node,) = node.children.values()
            if node.data[i].value is not None:
                return True
        return False


class BranchAwareSWA(SWAOrder):
    """`branch_aware` SWA windows (no covered class)."""

    def __init__(self, component: EvictingComponent, window_tail: int) -> None:
        super().__init__(component)
        window = getattr(component, "window", window_tail)
        self._order = BranchAware(component, (component.index, window), covered=False)

    def candidates(self) -> Iterator[TreeNode]:
        return self._order.candidates()


class BranchAwareMamba(BranchAware):
    """`branch_aware` Mamba states (covered states second); keeps no credits."""

    def __init__(self, component: EvictingComponent) -> None:
        super().__init__(component, None, covered=True)

    def touch(self, node: TreeNode, resumed: bool = False) -> None:
        """Recency alone counts (the component's LRU list)."""

    def forget(self, node: TreeNode) -> None:
        """Nothing kept per state."""

    def reset(self) -> None:
        """Nothing kept per state."""

    def check_invariants(self, errors: list[str]) -> None:
        """Nothing kept per state."""


SWA_REUSE_AWARE = register_swa_order("study:reuse_aware", lambda c, _tail: ReuseAwareSWA(c))
GREEDY_DUAL = register_swa_order("study:greedy_dual", GreedyDualSWA)
GREEDY_DUAL_WINDOW = register_swa_order("study:greedy_dual_window", SWACreditEviction)
FLOP_AWARE = register_mamba_order("study:flop_aware", FlopAwareMamba)
BRANCH_AWARE = register_swa_order("study:branch_aware", BranchAwareSWA)
register_mamba_order(BRANCH_AWARE, BranchAwareMamba)
# the order of each study copy's columns in the hit table, as the library listed them
SWA_STUDY_ORDERS = (SWA_REUSE_AWARE, GREEDY_DUAL, GREEDY_DUAL_WINDOW)
MAMBA_STUDY_ORDERS = (BRANCH_AWARE, FLOP_AWARE)
