"""The credit part of the default order of Mamba states (`reuse_credit`): GreedyDual over the
compute a state saves, weighted by the evidence that its path is reused.

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

Before the credit order, states that cannot end any match are evicted first (`unusable` in
`uniradix.eviction.aux_eviction`: on full+SWA+Mamba, a state whose SWA window is
tombstoned), among the `WINDOW` least recent.

A state's worth is weighted by how likely a match is to come back to its path, as
GreedyDual-Size-Frequency (Cherkasova 1998) weighs cost by use count:
`H = L + (1 + REUSE_WEIGHT * e) * marginal ** COST_EXPONENT`, where the *reuse evidence* `e`
counts the matches that resumed from the state itself or from a live state above
it on its path. A request continuing a conversation resumes from its previous turn's state,
so the states it stores carry that evidence, while a one-off request's states carry none. On
the Mooncake trace a request sharing its first block with an earlier one has its whole-block
prompt shared by a later request 62% of the time, one sharing nothing 23%; the marginal cost
alone rates the other way (a fresh request's states save its whole prompt, a continuation's
only the new turn), so the unweighted order (the retired `flop_aware`) kept one-off prompts'
states and lost conversations' tails. The exponent above 1 keeps costly states longer against
cheap recent ones (measured, see `REUSE_WEIGHT`). On top of these credits the default evicts
states with no sign of reuse first (`uniradix.eviction.mamba_probation`).

Worked example: states at 512 (credit L+c(512)), 8192 (L+c(8192)-c(512)) and 8200 (L+c(8200)-
c(8192), eight tokens' worth): the state at 8200 goes first although it is the most recent;
requests that would have resumed at 8200 resume at 8192 and recompute eight tokens.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

from uniradix.eviction.aux_eviction import WINDOW, EvictingComponent, prefix_cost, unusable
from uniradix.eviction.greedy_dual import GreedyDualCredits
from uniradix.tree.node import TreeNode

# The weights: the best of a grid (weight 0-3, exponent 1-2) on the Mooncake trace's
# first 2,000 requests at 512 slots (`python -m benchmarks.hybrid_hits`).
REUSE_WEIGHT = 3.0
COST_EXPONENT = 1.5


class MambaCreditOrder(GreedyDualCredits):
    """Credits of a Mamba component's states; the component calls `touch` whenever a state is
    stored or used and `forget` when it is evicted, and sets `swa` to (index, window) of the
    cache's SWA component, if any. Subclasses define `candidates`."""

    def __init__(
        self,
        component: EvictingComponent,
        reuse_weight: float = REUSE_WEIGHT,
        cost_exponent: float = COST_EXPONENT,
    ) -> None:
        self.component = component
        self.tree = component.tree
        self.index = component.index
        self.swa: tuple[int, int] | None = None
        self._init_credits(WINDOW, reuse_weight, cost_exponent)
        self._resumes: dict[TreeNode, int] = {}  # matches that resumed from a live state

    def marginal_cost(self, node: TreeNode) -> float:
        """Compute saved by resuming at `node` rather than at the nearest state above it."""
        return self._walk_up(node)[0]

    def reuse_evidence(self, node: TreeNode) -> int:
        """Matches that resumed from `node`'s state or from a live state above it on its path:
        a prefix that was resumed from before is likely to be continued again."""
        return self._resumes.get(node, 0) + self._walk_up(node)[1]

    def _walk_up(self, node: TreeNode) -> tuple[float, int]:
        """(marginal cost of `node`'s state, resumes of the live states above it), one walk."""
        i, tree = self.index, self.tree
        upper: int | None = None
        resumes = 0
        above = node.parent
        while above is not None and above.parent is not None:
            if above.data[i].value is not None:
                if upper is None:
                    upper = tree.prefix_len(above)
                    if not self.reuse_weight:
                        break
                resumes += self._resumes.get(above, 0)
            above = above.parent
        return prefix_cost(tree.prefix_len(node)) - prefix_cost(upper or 0), resumes

    def value(self, node: TreeNode) -> float:
        """What keeping `node`'s state is worth: `(1 + reuse_weight * reuse evidence) *
        marginal cost ** cost_exponent`."""
        marginal, above = self._walk_up(node)
        evidence = self._resumes.get(node, 0) + above
        return (1.0 + self.reuse_weight * evidence) * math.pow(marginal, self.cost_exponent)

    def touch(self, node: TreeNode, resumed: bool = False) -> None:
        """Sets `node`'s credit; `resumed`: a match resumes from it (one more use)."""
        if resumed and self.reuse_weight:
            self._resumes[node] = self._resumes.get(node, 0) + 1
        self._set_credit(node, self.inflation + self.value(node))

    def forget(self, node: TreeNode) -> None:
        self._drop_credit(node)
        self._resumes.pop(node, None)

    def reset(self) -> None:
        self._clear_credits()
        self._resumes.clear()

    def check_invariants(self, errors: list[str]) -> None:
        """Credits and use counts are kept for live states only (dropped at eviction), and
        every live state has a credit."""
        tables = (("credit", self._credit), ("resume count", self._resumes))
        holders = set(self.component.lru)
        self._check_tables(errors, self.index, holders, tables, "mamba order", "state")

    def credit(self, node: TreeNode) -> float:
        credit = self._credit.get(node)
        return self.inflation + self.value(node) if credit is None else credit

    def candidates(self) -> Iterator[TreeNode]:
        raise NotImplementedError

    def _unusable_victim(self) -> TreeNode | None:
        """An unusable state among the `WINDOW` least recent unlocked ones (full+SWA+Mamba
        only)."""
        if self.swa is None:
            return None
        lru, seen = self.component.lru, 0
        node = lru.least_recent_unlocked()
        while node is not None and seen < WINDOW:
            if unusable(self.tree, node, self.index, *self.swa):
                return node
            node = lru.least_recent_unlocked(before=node)
            seen += 1
        return None

    def _least_credit(self) -> TreeNode | None:
        """The unlocked state of least credit; raises `inflation` to it. Locked states met on
        the way go back into the heap before returning."""
        locked = []
        victim = None
        while (entry := self._pop_live(self.index)) is not None:
            credit, _, node = entry
            if node.data[self.index].lock_ref > 0:
                locked.append(entry)
                continue
            self._push_back((entry,))  # it stays listed until `forget`
            self.inflation = max(self.inflation, credit)
            victim = node
            break
        self._push_back(locked)
        return victim
