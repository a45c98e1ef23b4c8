"""The `greedy_dual` eviction order of SWA windows: GreedyDual over the hit tokens a window
serves, weighted by the matches it served, never-served windows first among the least credited;
and `greedy_dual_window` (at the end), which credits a window's nodes together.

An SWA window at prefix length `d` lets a later request resume at `d`: its hit is `d` tokens,
whatever the window's size. On the Mooncake trace the chance that a request's windows are
matched later is about the same for prompts of 2k and of 32k tokens (11-18%), so the hit tokens
a window is expected to serve grow with its depth, and the hits full attention keeps are
mostly deep ones (median 17k tokens). LRU and `reuse_aware` keep a 2k-token prompt's window as
long as a 40k-token one's. GreedyDual (Young 1994; Cao and Irani's GreedyDual-Size 1997)
weighs recency against what a miss costs: each live SWA node has a credit `H = L + worth`,
set when it is stored, refreshed by an insert, or served by a match; the victim is the
unlocked node of least `H`, and `L` rises to the victim's `H`, so a node nobody touches loses
its standing as `L` rises past it, a deep one later than a shallow one. As for Mamba states'
`reuse_aware` (GreedyDual-Size-Frequency, Cherkasova 1998):

    worth = (1 + REUSE_WEIGHT * serves) * depth ** COST_EXPONENT

where `depth` is the prefix length at the node's end and `serves` counts the matches that
ended within one window below the node (those it served). The worth is taken when the credit
is set; a split parent keeps its child's serve count and credit (it was stored and used with
it). As in `reuse_aware` (`uniradix.eviction.swa_reuse`), a window that served a match is
kept past those that never did while one of those is among the `SCAN` (64) least credited:
the victim is the least credited never-served window among them, else the least credited.
Without that rule, deep one-off prompts outlived the shallow agent contexts that every turn
resumes from (agentic_interfered, W=1024: 0.826 against `reuse_aware`'s 0.840).

Worked example (L = 0, weight 3, exponent 1.5): 1024-token windows at depth 2048 (worth
2048**1.5 ~ 92.7k), at depth 16384 (~2.1M), and at depth 2048 that served one match (4 * 92.7k
~ 371k): the first goes first, then the deep one (it never served), the served one last while
a never-served window is among the 64 least credited; after the first eviction L is 92.7k,
and a window stored then at depth 2048 gets 185k.

Tuned on the Mooncake trace's first 2,000 requests (full+SWA / full-only, W=4096 / W=1024):
`reuse_aware` 0.481 / 0.938; without the never-served rule, weight 0 and exponent 1 (plain
GreedyDual on depth) 0.686 / 0.961, exponent 0.5 0.549 / 0.947, 1.5 0.708 / 0.963, 2 0.715 /
0.959; weight 3 and exponent 1 0.694 / 0.963, 1.5 0.747 / 0.963, 2 0.751 / 0.959; weight 8
and exponent 1.5 0.733 / 0.967; with the rule (kept: weight 3, exponent 1.5) 0.733 / 0.967,
the same with weight 0 or a scan of 8, 0.729 / 0.967 with a scan of 2. The whole trace and the
built-in workloads are the out-of-sample check (benchmarks/results/hybrid_hits_swa_greedy_dual.md).

*Passed* windows. A long prompt is prefilled in chunks, and each chunk is published with its
last window live (the request reads it for the next chunk); the next chunk goes on past it,
and the tree kept that window, deep and unserved, as if a prompt ended there. Later requests
branch where prompts end or share blocks (the checkpoints placement names), at a chunk end
only by chance: on the trace at W=4096 these windows held 63% of the SWA pool, never used
again (`python -m benchmarks.swa_pool_contents`). So at each of a running request's
out-of-window steps (`request_step`) while it is in prefill below its last checkpoint, the
live windows within one window below its published end are marked passed, unless they overlap
a checkpoint's window or served a match; a passed window that never served is worth
`PASSED_WORTH * depth ** COST_EXPONENT`. A request without checkpoints marks nothing. Tuned
on the same 2,000 requests (W=4096 / W=1024): before 0.733 / 0.967; factor 0 0.877 / 0.934,
0.05 0.866 / 0.987, 0.1 (kept) 0.867 / 0.987, 0.2 0.858 / 0.979, 0.5 0.849 / 0.974; whole
trace 0.843 -> 0.918 and 0.978 -> 0.995 (benchmarks/results/hybrid_hits_swa_passed.md).

`greedy_dual_window`. A window is live only while every node of it is: losing
any one of them loses the hit at the window's end. `greedy_dual` values each node by its own
end, so a window's upper nodes are worth less than its last one and go first. With checkpoint
placement a prompt keeps two windows: the one ending at the last grid boundary `g` and the one
ending at the prompt end `p` (`p - g` under a block). At W=4096 they are a leaf `[p - W, p)`
and a live parent `[g - W, p - W)` of under a block; the parent, worth `(p - W) ** 1.5`, went
first, which kills the grid window (the one a next turn that shares whole blocks resumes
from) and frees under a block, while the leaf lived on as a prompt-end window that serves
only a resend of the same prompt. Here the nodes within one window (plus a page) below a
match's end are worth the hit at that end, and so are the never-served ones below an
insert's end: a new window's nodes share one credit and go together. A node that served
keeps its own end when an insert touches it (as in `greedy_dual`): valuing it by every
passing insert's end raised shared shallow prefixes (a system prompt every agent resumes
from) and reshuffled small pools (agentic, full+SWA+Mamba W=1024: 0.884 against 0.889, 0.902
with this rule). Tuned on the first 2,000 requests (W=4096 / W=1024): `greedy_dual` 0.867 /
0.986; this 0.905 / 0.987; every refreshed node at the insert's end 0.905 / 0.987; only
served windows at the match's end 0.867 / 0.986; only the nodes an insert newly stores 0.877
/ 0.987; size-aware worth (divided by the node's size over the window) 0.866 / 0.979;
orphaned parents lowered to `L` once their window's last node is gone: no change. Whole
trace and workloads: benchmarks/results/hybrid_hits_h14w_window.md.

Under `greedy_dual_window` a passed window is worth `WINDOW_PASSED_WORTH` (0.02), not 0.1:
with 0.1 passed windows still held 9.8% of the sampled SWA tokens at W=4096 on the whole
trace, of which 1% were used again (fresh windows: 27%, served ones: ~50%), and at 0.02 they
hold 1.9%. The tuning slice is too short for this (a family of requests sharing a prefix
comes back a median ~500 requests later, and one deep hit moves the slice's ratio by ~0.01:
W=4096 / W=1024 0.905 / 0.987 at 0.1, 0.886 / 0.991 at 0.03, 0.892 / 0.991 at 0.02 and at
0.01, 0.895 / 0.934 at 0); on the whole trace (W=4096 / W=1024): 0.1 0.943 / 0.997, 0.03
0.946, 0.02 0.948 / 0.998, 0.01 0.948 / 0.997, 0.005 0.948 / 0.996 (the cost exponent moved
by +-0.02, a change of no meaning, moves W=4096 by up to 0.002). Out of sample on the two
variant traces and the built-in workloads: benchmarks/results/hybrid_hits_h14y.md, which also
logs the first-use rules tried in that session and lost (branch-point windows treated as
served, the prompt-end tail past the grid boundary split off and dropped first).

`greedy_dual_output` (`uniradix.eviction.swa_output`, the default) is this order with
the windows past a request's last checkpoint (its decode outputs) worth their measured reuse.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

from uniradix.eviction import swa_reuse
from uniradix.eviction.aux_eviction import EvictingComponent
from uniradix.eviction.greedy_dual import GreedyDualCredits
from uniradix.eviction.swa_reuse import SWAReuseEviction
from uniradix.tree.node import TreeNode
from uniradix.types import Req

REUSE_WEIGHT = 3.0
COST_EXPONENT = 1.5
PASSED_WORTH = 0.1  # worth factor of a chunk-end window its request went past (never served)
WINDOW_PASSED_WORTH = 0.02  # the same under `greedy_dual_window` (module docstring, h14y)
_SLACK = 64  # stale heap entries allowed beyond twice the live ones before a rebuild


class SWACreditEviction(GreedyDualCredits, SWAReuseEviction):
    """`greedy_dual` order of an SWA component."""

    passed_worth = PASSED_WORTH

    def __init__(
        self,
        component: EvictingComponent,
        window_tail: int,
        reuse_weight: float = REUSE_WEIGHT,
        cost_exponent: float = COST_EXPONENT,
    ) -> None:
        super().__init__(component)
        self.window_tail = window_tail  # the component's window, rounded up to whole pages
        self._init_credits(_SLACK, reuse_weight, cost_exponent)
        self._serves: dict[TreeNode, int] = {}
        self._passed: set[TreeNode] = set()

    def worth(self, node: TreeNode, depth: int) -> float:
        """`(1 + reuse_weight * serves) * depth ** cost_exponent`; `passed_worth` instead of
        the first factor for a passed window that never served (module docstring). `depth`:
        the units from the root to `node`'s end (the callers know it: no walk to the root)."""
        serves = self._serves.get(node, 0)
        if not serves and node in self._passed:
            return self.passed_worth * math.pow(depth, self.cost_exponent)
        return (1.0 + self.reuse_weight * serves) * math.pow(depth, self.cost_exponent)

    def request_step(self, req: Req) -> None:
        """Marks the windows `req` published at a middle prefill chunk's end (below its last
        checkpoint) as passed: its next chunk goes on past them. Windows overlapping a
        checkpoint's window, or that served a match, are left as they are."""
        checkpoints, node, end = req.checkpoint_seqlens, req.last_node, req.cache_protected_len
        if not checkpoints or node is None or end >= max(checkpoints):
            return
        swa, tail = self.component, self.window_tail
        kept = [(c - tail, c) for c in checkpoints]
        floor = end - tail
        for n in swa.tree.path_to_root(node):
            if end <= floor:
                break
            start = end - n.num_tokens
            if (
                n not in self._passed
                and n not in self._serves
                and n.data[swa.index].value is not None
                and not any(a < end and start < b for a, b in kept)
            ):
                self._mark_passed(n, end)
            end = start

    def _mark_passed(self, node: TreeNode, depth: int) -> None:
        self._passed.add(node)
        self._set_credit(node, self.inflation + self.worth(node, depth))

    def credit(self, node: TreeNode) -> float | None:
        return self._credit.get(node)

    def served(self, node: TreeNode, depth: int, window_end: int) -> None:
        super().served(node, depth, window_end)
        self._serves[node] = self._serves.get(node, 0) + 1
        self._set_credit(node, self.inflation + self.worth(node, depth))

    def refreshed(self, node: TreeNode, depth: int, window_end: int) -> None:
        self._set_credit(node, self.inflation + self.worth(node, depth))

    def split(self, parent: TreeNode, child: TreeNode) -> None:
        super().split(parent, child)
        if child in self._serves:
            self._serves[parent] = self._serves[child]
        if child in self._passed:
            self._passed.add(parent)
        credit = self._credit.get(child)
        if credit is None:
            credit = self.inflation + self.worth(parent, self.component.tree.prefix_len(parent))
        self._set_credit(parent, credit)

    def forget(self, node: TreeNode) -> None:
        super().forget(node)
        self._credit.pop(node, None)
        self._serves.pop(node, None)
        self._passed.discard(node)

    def reset(self) -> None:
        super().reset()
        self._clear_credits()
        self._serves.clear()
        self._passed.clear()

    def candidates(self) -> Iterator[TreeNode]:
        while (victim := self._least_credit()) is not None:
            yield victim

    def _least_credit(self) -> TreeNode | None:
        """Among the `swa_reuse.SCAN` unlocked nodes of least credit, the first that never served a
        match, else the first; raises `inflation` to its credit. Every live entry popped on
        the way goes back into the heap (the victim's stays listed until `forget`)."""
        i, popped = self.component.index, []
        first = victim = None
        seen = 0
        scan = swa_reuse.SCAN
        while (scan is None or seen < scan) and (entry := self._pop_live(i)) is not None:
            popped.append(entry)
            node = entry[2]
            if node.data[i].lock_ref > 0:
                continue
            seen += 1
            first = first or entry
            if not self.was_served(node):
                victim = entry
                break
        self._push_back(popped)
        victim = victim or first
        if victim is None:
            return None
        self.inflation = max(self.inflation, victim[0])
        return victim[2]

    def check_invariants(self, errors: list[str]) -> None:
        """Credits and serve counts are kept for live windows only, and every live window
        has a credit."""
        super().check_invariants(errors)
        i, listed = self.component.index, set(self.component.lru)
        tables = (("credit", self._credit), ("serve count", self._serves), ("pass", self._passed))
        for name, table in tables:
            stale = [n.id for n in table if n not in listed or n.data[i].value is None]
            if stale:
                errors.append(f"swa order: {name} kept for nodes {stale} holding no window")
        missing = [n.id for n in listed if n not in self._credit]
        if missing:
            errors.append(f"swa order: windows on nodes {missing} have no credit")


class SWAWindowCreditEviction(SWACreditEviction):
    """`greedy_dual_window`: `greedy_dual` with every node of a served window worth the hit
    at the match's end, and every never-served node an insert stores or touches worth the
    hit at the insert's end, and passed windows worth `WINDOW_PASSED_WORTH` (module
    docstring)."""

    passed_worth = WINDOW_PASSED_WORTH

    def served(self, node: TreeNode, depth: int, window_end: int) -> None:
        super().served(node, window_end, window_end)

    def refreshed(self, node: TreeNode, depth: int, window_end: int) -> None:
        super().refreshed(node, depth if node in self._serves else window_end, window_end)
