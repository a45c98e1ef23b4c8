"""The output windows of the default order of SWA windows (`reuse_credit`,
`uniradix.eviction.swa_past`): the credit order of `uniradix.eviction.swa_credit`, with the
windows a request leaves past its last checkpoint (its decode outputs) worth what their
measured reuse says.

Why: a finished request's window at the outputs' end is the deepest of its windows, so the
credit order alone credits it most, yet it serves only traffic that sends outputs back (a
chat, an agent's loop); where none does (the synthetic Mooncake trace) it is dead weight. Which
traffic it is can be told only from the stream, so the order counts the tokens of windows
stored and of those that later served a match, for prompt windows and for output windows, and
a never-served output window is worth

    factor * depth ** COST_EXPONENT,  factor = min(1, output share / prompt share)

each share with a prior of one window's tokens at the prompt share (the factor starts at 1).
So that demoted windows cannot bias the count, every `OUTPUT_SAMPLE`-th request's output
window keeps the full worth, and only those are counted. Output nodes are the nodes of a
finished request's insert wholly past its last checkpoint (`InsertParams.checkpoint_seqlens`);
an insert naming none marks nothing, so without checkpoint placement this is the credit order
alone.

At each insert naming checkpoints it also refreshes the never-served nodes of the windows
ending at them that the insert's own refresh (one window below its end) did not reach, at the
hit at the deepest such checkpoint: node boundaries depend on the path's history, and without
this a next turn's grid window could keep an old credit and go first. Figures:
docs/hit_rates.md.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from uniradix.eviction.aux_eviction import EvictingComponent
from uniradix.eviction.swa_credit import SWACreditEviction
from uniradix.tree.node import TreeNode

OUTPUT_SAMPLE = 8  # every 8th request's output window keeps the full worth and is counted


@dataclass
class OutputReuseCounts:
    """Tokens of windows stored, and of those that served a match, by class: prompt windows
    (all but passed and output ones) and sampled output windows."""

    prompt_stored: int = 0
    prompt_served: int = 0
    output_stored: int = 0
    output_served: int = 0


class SWAOutputCreditEviction(SWACreditEviction):
    """The credit order with never-served output windows worth `output_factor()` of their
    depth's worth (module docstring); `reuse_credit` adds past windows on top."""

    def __init__(self, component: EvictingComponent, window_tail: int, **weights: float) -> None:
        """`weights`: `reuse_weight` / `cost_exponent`, as `SWACreditEviction`'s."""
        super().__init__(component, window_tail, **weights)
        self._outputs: set[TreeNode] = set()  # live output windows' nodes
        self._sampled: set[TreeNode] = set()  # those at the full worth, whose reuse is counted
        self._output_inserts = 0
        self.counts = OutputReuseCounts()

    def output_factor(self) -> float:
        """The worth factor of a never-served output window that is not sampled: the share
        of sampled output tokens that served a match over that of prompt tokens, each with
        a prior of one window's tokens at the prompt share; at most 1."""
        c, prior = self.counts, self.window_tail
        prompt = (c.prompt_served + prior) / (c.prompt_stored + prior)
        output = (c.output_served + prior * prompt) / (c.output_stored + prior)
        return min(1.0, output / prompt)

    def worth(self, node: TreeNode, depth: int) -> float:
        if node in self._outputs and node not in self._sampled and node not in self._serves:
            return self.output_factor() * math.pow(depth, self.cost_exponent)
        return super().worth(node, depth)

    def inserted_past_checkpoints(
        self, node: TreeNode, end: int, checkpoints: Sequence[int], walked: int
    ) -> None:
        """Marks the never-served nodes of the insert wholly past its last checkpoint as an
        output window; every `OUTPUT_SAMPLE`-th request's stay at the full worth and are
        counted. Then refreshes the checkpoints' windows above `walked`."""
        self._mark_outputs(node, end, max(checkpoints))
        self._refresh_checkpoint_windows(node, end, checkpoints, walked)

    def _refresh_checkpoint_windows(
        self, node: TreeNode, end: int, checkpoints: Sequence[int], walked: int
    ) -> None:
        """Credits the never-served nodes of the windows ending at `checkpoints` (on the
        insert's path, at most `end` deep) that the insert's own refresh did not reach (they
        end at `walked` or above) with the hit at the deepest such checkpoint, as
        the credit order credits a window's nodes together."""
        tail, i = self.window_tail, self.component.index
        windows = sorted((c for c in checkpoints if c <= end), reverse=True)
        if not windows:
            return
        stop = end
        for n in self.component.tree.path_to_root(node):
            start = stop - n.num_tokens
            if stop <= windows[-1] - tail:
                break
            if stop <= walked and n.data[i].value is not None and n not in self._serves:
                deepest = next((c for c in windows if start < c and c - tail < stop), None)
                if deepest is not None and n not in self._passed and n not in self._outputs:
                    self.refreshed(n, stop, deepest)
            stop = start

    def _mark_outputs(self, node: TreeNode, end: int, last_checkpoint: int) -> None:
        i, top, fresh = self.component.index, end, []
        for n in self.component.tree.path_to_root(node):
            start = end - n.num_tokens
            if start < last_checkpoint:
                break
            if n.data[i].value is not None and not (
                n in self._serves or n in self._outputs or n in self._passed
            ):
                fresh.append(n)
            end = start
        if not fresh:
            return
        sampled = self._output_inserts % OUTPUT_SAMPLE == 0
        self._output_inserts += 1
        for n in fresh:
            self.counts.prompt_stored -= n.num_tokens  # counted as a prompt's when stored
            self._outputs.add(n)
            if sampled:
                self._sampled.add(n)
                self.counts.output_stored += n.num_tokens
            else:
                self._set_credit(n, self.inflation + self.worth(n, top))

    def _mark_passed(self, node: TreeNode, depth: int) -> None:
        self.counts.prompt_stored -= node.num_tokens  # counted as a prompt's when stored
        super()._mark_passed(node, depth)

    def served(self, node: TreeNode, depth: int, window_end: int) -> None:
        if node not in self._serves:
            if node in self._sampled:
                self.counts.output_served += node.num_tokens
            elif node not in self._outputs and node not in self._passed:
                self.counts.prompt_served += node.num_tokens
        self._serve(node, window_end)  # as the credit order credits a served window

    def refreshed(self, node: TreeNode, depth: int, window_end: int) -> None:
        if node not in self._credit:
            self.counts.prompt_stored += node.num_tokens
        super().refreshed(node, depth, window_end)

    def split(self, parent: TreeNode, child: TreeNode) -> None:
        for table in (self._outputs, self._sampled):
            if child in table:
                table.add(parent)
        super().split(parent, child)

    def forget(self, node: TreeNode) -> None:
        super().forget(node)
        self._outputs.discard(node)
        self._sampled.discard(node)

    def reset(self) -> None:
        super().reset()
        self._outputs.clear()
        self._sampled.clear()
        self._output_inserts = 0
        self.counts = OutputReuseCounts()

    def check_invariants(self, errors: list[str]) -> None:
        """Output marks are kept for live windows only; sampled ones are output ones."""
        super().check_invariants(errors)
        i = self.component.index
        stale = [n.id for n in self._outputs | self._sampled if n.data[i].value is None]
        if stale:
            errors.append(f"swa order: output marks kept for nodes {stale} holding no window")
        if not self._sampled <= self._outputs:
            errors.append("swa order: sampled output windows not marked as outputs")
