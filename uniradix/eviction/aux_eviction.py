"""Eviction order of the auxiliary states (SWA windows, Mamba states): `lru`, `branch_aware`,
`flop_aware` or `reuse_aware`.

`lru` evicts each component's least recent unlocked node first.

`flop_aware` orders Mamba states by GreedyDual over the compute a state saves beyond the
nearest state above it (`uniradix.eviction.flop_aware`); `reuse_aware` (the default) weighs
that compute by the matches that resumed on the state's path (same module) and evicts states
with no sign of reuse first (`uniradix.eviction.mamba_probation`). Under
both, and `lru`, SWA windows follow `swa_eviction_policy` (`greedy_dual_output`, the
default, `greedy_dual_window`, `greedy_dual`, `reuse_aware` or `lru`:
`uniradix.eviction.swa_reuse`, `swa_credit`, `swa_output`).

`branch_aware` (after Marconi, MLSys 2025) looks at the `WINDOW` least recent unlocked nodes of
the component's LRU list and evicts, in this order of classes:

0. **unusable** ones, which cannot end any match now: an SWA node whose end lacks `W` live
   tokens before it (a tombstone is closer) and that has no live child whose window could
   still use it; a Mamba state on a node whose SWA window is tombstoned (full+SWA+Mamba: a
   match cannot end there);
1. **covered** Mamba states: the node has one child and the single-child chain below it
   reaches a deeper state before any fork, so every request continuing down that path
   resumes from the deeper one (states at forks and at the ends of paths are kept longer).
   Measured on the Mooncake trace, this evicts the wrong states: a covered state still
   serves every request that leaves the chain between it and the deeper state, and there
   (the last block boundary of the previous prompt, above its prompt-end and finish states)
   is where the next turns branch; `flop_aware` weighs that instead;
2. the rest.

Within a class, the node of least utility goes first: utility = recency (rank in the window,
0 for the least recent, 1 for the most) + the prefill compute a hit ending there saves,
relative to the window's most valuable node. Compute saved is `prefix_cost(p)` for a prefix
of `p` tokens: linear weights plus quadratic attention, `p * (1 + p / QUADRATIC_TOKENS)`,
whose ratio is a 4096-wide model's (`uniradix.sim.compute`: 24 h^2 per token and layer for
the weights, 2 h per key pair for attention, so the two are equal at `12 h` tokens). Deep
checkpoints save more than shallow ones of the same age, so they stay longer.

The order holds no state: each candidate is chosen from a fresh look at the window, so an
eviction (or a cascade) between two candidates is always seen.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from uniradix.tree.core import TreeCore
from uniradix.tree.lru import LRUList
from uniradix.tree.node import TreeNode


class EvictingComponent(Protocol):
    index: int
    tree: TreeCore
    lru: LRUList


AUX_EVICTION_POLICIES = ("lru", "branch_aware", "flop_aware", "reuse_aware")
WINDOW = 64
QUADRATIC_TOKENS = 12 * 4096
MAX_CHAIN = 64  # nodes followed down a single-child chain looking for a deeper state


def check_aux_eviction_policy(name: object) -> str:
    if name not in AUX_EVICTION_POLICIES:
        raise ValueError(
            f"unknown aux_eviction_policy {name!r}; choose one of {list(AUX_EVICTION_POLICIES)}"
        )
    return str(name)


def prefix_cost(num_tokens: int) -> float:
    return num_tokens * (1.0 + num_tokens / QUADRATIC_TOKENS)


class BranchAwareEviction:
    """The `branch_aware` order of `component` (its current `lru` list is read on each call).

    `swa` is (index, window) of the cache's SWA component, if any: an SWA component passes
    its own; a Mamba component learns it from its peers. `covered` enables class 1 (Mamba)."""

    def __init__(
        self, component: EvictingComponent, swa: tuple[int, int] | None, covered: bool
    ) -> None:
        self.component = component
        self.tree = component.tree
        self.index = component.index
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
        costs = [prefix_cost(self.tree.prefix_len(n)) for n in window]
        top = max(costs) or 1.0
        last = max(len(window) - 1, 1)
        best, best_key = window[0], (3, 0.0)
        for rank, (node, cost) in enumerate(zip(window, costs, strict=True)):
            key = (self._class(node), rank / last + cost / top)
            if key < best_key:
                best, best_key = node, key
        return best

    def _class(self, node: TreeNode) -> int:
        if self.swa is not None and self._unusable(node, *self.swa):
            return 0
        if self.covered and self._covered(node):
            return 1
        return 2

    def _unusable(self, node: TreeNode, swa_index: int, window: int) -> bool:
        covered = 0
        for n in self.tree.path_to_root(node):
            if n.data[swa_index].value is None:
                break
            covered += n.num_tokens
            if covered >= window:
                return False
        else:
            return False  # live up to the root: every boundary on the path is valid
        if swa_index != self.index:
            return True
        return not any(c.data[swa_index].value is not None for c in node.children.values())

    def _covered(self, node: TreeNode) -> bool:
        i = self.index
        for _ in range(MAX_CHAIN):
            if len(node.children) != 1:
                return False
            (node,) = node.children.values()
            if node.data[i].value is not None:
                return True
        return False
