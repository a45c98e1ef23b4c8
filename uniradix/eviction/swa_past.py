"""The default eviction order of SWA windows, `reuse_credit`: the output-window order of
`uniradix.eviction.swa_output`, with the windows a finished request's decode outputs went
past worth what their measured reuse says, and nothing before any window has served a match.

Why: a finished request's checkpoint windows that lie wholly above its last window (its
prompt's grid points, `Req.checkpoint_seqlens`) serve only a request that branches there
rather than continuing from the end. Whether traffic does is a property of the stream: on the
synthetic Mooncake trace continuations branch at block boundaries, in a chat that sends its
answers back nobody does (the `bursts` trace of `benchmarks/traces`). Each such *past*
window is worth

    factor * depth ** COST_EXPONENT,  factor = min(1, past share / prompt share)

where the prompt share is tokens of prompt windows that served a match over those stored
(the output order's counts, with no prior serves: 0 until one serves) and the past share
is the tokens of past windows that served over those whose outcome is known, with a prior
of one window's tokens at the prompt share. Past outcomes are counted when known (served,
or evicted unserved), not when stored: a window still waiting for its next turn is no
evidence that it is never used (counted from store, the first turns of every conversation
would read as unused). The prompt share, counted from store, errs low early, which errs
towards keeping past windows. Every `OUTPUT_SAMPLE`-th request's past windows keep the full
worth and only those are counted, so demoted windows cannot bias the count.

Before any prompt window has served a match the prompt share is 0 and so is the factor: with
no evidence of reuse anywhere, a request is presumed to be continued from its end, and the
windows its outputs went past go first (as states and windows without evidence go first on
probation). On `bursts` the deciding evictions come in the first burst, before any window
served; on the Mooncake trace the first comes at its 128th insert naming checkpoints (about the
40th request) and the factor is measured from then on. Figures: docs/hit_rates.md.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from uniradix.eviction.aux_eviction import EvictingComponent
from uniradix.eviction.swa_output import OUTPUT_SAMPLE, SWAOutputCreditEviction
from uniradix.tree.node import TreeNode


class SWAPastCreditEviction(SWAOutputCreditEviction):
    """`reuse_credit`: the output-window order with never-served past windows worth
    `past_factor()` of their depth's worth (module docstring)."""

    def __init__(self, component: EvictingComponent, window_tail: int, **weights: float) -> None:
        """`weights`: `reuse_weight` / `cost_exponent`, as `SWACreditEviction`'s."""
        super().__init__(component, window_tail, **weights)
        self._past: set[TreeNode] = set()  # live past windows' nodes
        self._past_sampled: set[TreeNode] = set()  # those at the full worth, counted
        self._past_inserts = 0
        self.past_served = 0  # tokens of sampled past windows that served a match
        self.past_resolved = 0  # of those served or evicted unserved

    def past_factor(self) -> float:
        """The worth factor of a never-served past window that is not sampled (module
        docstring): 0 until a prompt window has served a match."""
        c, prior = self.counts, self.window_tail
        prompt = c.prompt_served / (c.prompt_stored + prior)
        if prompt <= 0:
            return 0.0
        past = (self.past_served + prior * prompt) / (self.past_resolved + prior)
        return min(1.0, past / prompt)

    def worth(self, node: TreeNode, depth: int) -> float:
        if node in self._past and node not in self._past_sampled and node not in self._serves:
            return self.past_factor() * math.pow(depth, self.cost_exponent)
        return super().worth(node, depth)

    def inserted_past_checkpoints(
        self, node: TreeNode, end: int, checkpoints: Sequence[int], walked: int
    ) -> None:
        """Then marks the never-served nodes of `checkpoints`' windows wholly above the
        insert's last window as past, when the insert went past its last checkpoint."""
        super().inserted_past_checkpoints(node, end, checkpoints, walked)
        if end > max(checkpoints):
            self._mark_past(node, end, checkpoints)

    def _mark_past(self, node: TreeNode, end: int, checkpoints: Sequence[int]) -> None:
        i, tail, stop = self.component.index, self.window_tail, end
        windows = sorted((c for c in checkpoints if c <= end), reverse=True)
        fresh = []
        for n in self.component.tree.path_to_root(node):
            if stop <= min(checkpoints) - tail:
                break
            start = stop - n.num_tokens
            marked = n in self._serves or n in self._outputs or n in self._passed
            if stop <= end - tail and n.data[i].value is not None and not marked:
                deepest = next((c for c in windows if start < c and c - tail < stop), None)
                if deepest is not None and n not in self._past:
                    fresh.append((n, deepest))
            stop = start
        if not fresh:
            return
        sampled = self._past_inserts % OUTPUT_SAMPLE == 0
        self._past_inserts += 1
        for n, deepest in fresh:
            self.counts.prompt_stored -= n.num_tokens  # counted as a prompt's when stored
            self._past.add(n)
            if sampled:
                self._past_sampled.add(n)
            else:
                self._set_credit(n, self.inflation + self.worth(n, deepest))

    def served(self, node: TreeNode, depth: int, window_end: int) -> None:
        if node not in self._past or node in self._serves:
            super().served(node, depth, window_end)
            return
        if node in self._past_sampled:
            self.past_served += node.num_tokens
            self.past_resolved += node.num_tokens
        self._serve(node, window_end)  # as the credit order credits a served window

    def split(self, parent: TreeNode, child: TreeNode) -> None:
        for table in (self._past, self._past_sampled):
            if child in table:
                table.add(parent)
        super().split(parent, child)

    def forget(self, node: TreeNode) -> None:
        if node in self._past_sampled and node not in self._serves:
            self.past_resolved += node.num_tokens  # evicted unserved: its outcome is known
        super().forget(node)
        self._past.discard(node)
        self._past_sampled.discard(node)

    def reset(self) -> None:
        super().reset()
        self._past.clear()
        self._past_sampled.clear()
        self._past_inserts = 0
        self.past_served = self.past_resolved = 0

    def check_invariants(self, errors: list[str]) -> None:
        """Past marks are kept for live windows only; sampled ones are past ones."""
        super().check_invariants(errors)
        i = self.component.index
        stale = [n.id for n in self._past | self._past_sampled if n.data[i].value is None]
        if stale:
            errors.append(f"swa order: past marks kept for nodes {stale} holding no window")
        if not self._past_sampled <= self._past:
            errors.append("swa order: sampled past windows not marked as past")
