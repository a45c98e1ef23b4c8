"""The default eviction order of SWA windows, `reuse_credit`: the output-window order of
`uniradix.eviction.swa_output`, with the windows a finished request's decode outputs went
past worth nothing until some prompt window has served a match.

Why: a finished request's checkpoint windows that lie wholly above its last window (its
prompt's grid points, `Req.checkpoint_seqlens`) serve only a request that branches there
rather than continuing from the end. Whether traffic does is a property of the stream: on the
synthetic Mooncake trace continuations branch at block boundaries, in a chat that sends its
answers back nobody does (the `bursts` trace of `benchmarks/traces`). Before any prompt
window has served a match there is no evidence of reuse anywhere, so a request is presumed
to be continued from its end: its *past* windows are credited at GreedyDual's `L` alone
(worth 0) and go first, its last window stays (as states and windows without evidence go
first on probation). Once a prompt window has served, past windows are worth their depth
as every window is. On `bursts` the deciding evictions come in the first burst, before any
window served; on the Mooncake trace the first serve comes at its 128th insert naming
checkpoints (about the 40th request). Weighing past windows by their measured reuse instead
(served over resolved tokens of a sample, against prompt windows') wins `bursts` as well but
reads 0.9500 of full-only on the whole Mooncake trace at W = 4096 against 0.9507 for this
rule, as for the order without past windows (figures: docs/hit_rates.md).
"""

from __future__ import annotations

from collections.abc import Sequence

from uniradix.eviction.aux_eviction import EvictingComponent
from uniradix.eviction.swa_output import SWAOutputCreditEviction
from uniradix.tree.node import TreeNode


class SWAPastCreditEviction(SWAOutputCreditEviction):
    """`reuse_credit`: the output-window order with never-served past windows worth nothing
    until a prompt window has served (module docstring)."""

    def __init__(self, component: EvictingComponent, window_tail: int, **weights: float) -> None:
        """`weights`: `reuse_weight` / `cost_exponent`, as `SWACreditEviction`'s."""
        super().__init__(component, window_tail, **weights)
        self._past = self._mark_set("past marks")  # live past windows marked before any serve

    def cold(self) -> bool:
        """Whether no prompt window has served a match yet."""
        return self.counts.prompt_served == 0

    def worth(self, node: TreeNode, depth: int) -> float:
        if node in self._past and self.cold() and node not in self._serves:
            return 0.0
        return super().worth(node, depth)

    def inserted_past_checkpoints(
        self, node: TreeNode, end: int, checkpoints: Sequence[int], walked: int
    ) -> None:
        """Then, while no prompt window has served, credits the never-served nodes of
        `checkpoints`' windows wholly above the insert's last window at `L` alone, when the
        insert went past its last checkpoint."""
        super().inserted_past_checkpoints(node, end, checkpoints, walked)
        if end > max(checkpoints) and self.cold():
            self._mark_past(node, end, checkpoints)

    def _mark_past(self, node: TreeNode, end: int, checkpoints: Sequence[int]) -> None:
        i, tail, stop = self.component.index, self.window_tail, end
        for n in self.component.tree.path_to_root(node):
            if stop <= min(checkpoints) - tail:
                break
            start = stop - n.num_tokens
            marked = n in self._serves or n in self._outputs or n in self._passed
            in_window = any(start < c and c - tail < stop for c in checkpoints if c <= end)
            if stop <= end - tail and n.data[i].value is not None and not marked and in_window:
                self._past.add(n)
                self._set_credit(n, self.inflation)
            stop = start

    def split(self, parent: TreeNode, child: TreeNode) -> None:
        if child in self._past:
            self._past.add(parent)
        super().split(parent, child)
