"""The default eviction order of Mamba states, `reuse_credit`: states with no sign of reuse
are on probation and go first; the rest follow GreedyDual credits
(`uniradix.eviction.mamba_credit`).

A cache that keeps every state for the same time loses conversations to one-off traffic: a
burst of one-off prompts stores as many states as the conversations do, and by the next turn
the conversations' states are gone (the `bursts` trace of `benchmarks/traces`). Weighing
states by the compute they save does not help there: a one-off prompt's state saves its whole
prompt, a conversation's newest state only its last turn. So, as segmented LRU and 2Q admit
new pages to a probationary segment and promote those used again, a state starts *on
probation* unless there is evidence that its path is reused:

- a match resumed from it, or from a state above it on its path;
- an earlier insert passed over a node above it (`TreeNode.hit_count`): another request
  shared its prefix, so the request that stored it continues one (a conversation's next
  turn, an agent's next call), even when the states it could have resumed from were gone.
  The full KV, which outlives the states, serves as the ghost list that ARC keeps apart.

A state that a newer state below it *covers* goes back on probation: the newer one is on the
same single-child chain, so every request continuing down the chain resumes from the newer
one; the older one serves only requests that branch between the two, and if those come it is
resumed from and promoted again. A state at a fork is never covered.

When a state that showed reuse goes with its full KV, the tree forgets that evidence; a ghost
list keeps it (`uniradix.eviction.mamba_ghosts`): a state stored again at a ghost's prefix
*returns*, is never on probation and is not covered, for its life.

The victim is the least credited unlocked state on probation among the `WINDOW` least
credited; when none of them is on probation, the least credited one (plain GreedyDual, which
keeps costly states long: what wins when reuse distances exceed the pool, as on the Mooncake
trace). Before both, states that cannot end any match go (`unusable` in
`uniradix.eviction.aux_eviction`).

Measured (`python -m benchmarks.hit_table`, docs/hit_rates.md): on `bursts` with ample full KV
the states of one-off prompts no longer push out the conversations' (hit rate 0.32 where the
credit order alone kept 0.000 and the Belady estimate 0.11); elsewhere it ties or beats the
credit order alone.

Worked example (credits in brackets, least first): A [5] on probation, B [3] protected, C [9]
on probation: A goes first (the least credited on probation), then C, then B.
"""

from __future__ import annotations

from collections.abc import Iterator

from uniradix.eviction.aux_eviction import WINDOW, EvictingComponent
from uniradix.eviction.greedy_dual import CreditEntry
from uniradix.eviction.mamba_credit import MambaCreditOrder
from uniradix.eviction.mamba_ghosts import StateGhosts
from uniradix.tree.node import TreeNode


class ProbationEviction(MambaCreditOrder):
    """`reuse_credit` order of a Mamba component: `MambaCreditOrder`'s credits and a
    probation set evicted first."""

    def __init__(self, component: EvictingComponent) -> None:
        super().__init__(component)
        self._probation = self._mark_set("probation marks")
        self.ghosts = StateGhosts(self.tree)

    def on_probation(self, node: TreeNode) -> bool:
        return node in self._probation

    def touch(self, node: TreeNode, resumed: bool = False) -> None:
        fresh = node not in self._credit
        promoted = not fresh and node not in self._probation
        if fresh and not resumed:
            self.ghosts.on_store(node)
        super().touch(node, resumed)
        if resumed or promoted or node in self.ghosts.returned or self._continues(node):
            self._probation.discard(node)
        else:
            self._probation.add(node)
        if not resumed:
            above = self._covered_above(node)
            if above is not None and above not in self.ghosts.returned:
                self._probation.add(above)

    def _continues(self, node: TreeNode) -> bool:
        """Whether `node`'s path shows reuse: a node on it that an earlier insert passed over
        or whose state a match resumed from."""
        n: TreeNode | None = node
        while n is not None and n.parent is not None:
            if n.hit_count > 0 or n in self._resumes:
                return True
            n = n.parent
        return False

    def _covered_above(self, node: TreeNode) -> TreeNode | None:
        """The nearest state above `node` if only a single-child chain leads to it."""
        i = self.index
        n = node.parent
        while n is not None and n.parent is not None:
            if len(n.children) != 1:
                return None
            if n.data[i].value is not None:
                return n
            n = n.parent
        return None

    def forget(self, node: TreeNode) -> None:
        live = len(self.component.lru)
        self.ghosts.on_evict(node, self._resumes.get(node, 0) > 0, live)
        super().forget(node)

    def reset(self) -> None:
        super().reset()
        self.ghosts.clear()

    def check_invariants(self, errors: list[str]) -> None:
        super().check_invariants(errors)
        stale = [n.id for n in self.ghosts.returned if n not in self._credit]
        if stale:
            errors.append(f"mamba order: states on nodes {stale} returned without a credit")

    def candidates(self) -> Iterator[TreeNode]:
        while True:
            victim = self._unusable_victim() or self._probation_victim() or self._least_credit()
            if victim is None:
                victim = self.component.lru.least_recent_unlocked()
            if victim is None:
                return
            yield victim

    def _probation_victim(self) -> TreeNode | None:
        """The least credited unlocked state on probation among the `WINDOW` least credited
        live states; raises `inflation` to it. Every entry looked at goes back in the heap."""
        seen: list[CreditEntry] = []
        victim = None
        while len(seen) < WINDOW and (entry := self._pop_live(self.index)) is not None:
            seen.append(entry)
            credit, _, node = entry
            if node in self._probation and node.data[self.index].lock_ref == 0:
                self.inflation = max(self.inflation, credit)
                victim = node
                break
        self._push_back(seen)
        return victim
