"""Why the former SWA default (`output_windows`, the default without its past windows,
`uniradix.eviction.swa_past`) lost `bursts/s1` ample to the retired
`greedy_dual`: rules for fresh (never-served) windows, side by side with the default on the
`bursts` traces and the Mooncake trace.

    .venv/bin/python -m benchmarks.studies.swa_fresh_windows [--max-requests 2000]
        [--rules reuse_credit own_depth ...]

- `own_depth`: a never-served node credited by its own end, not by the end of the insert
  whose window it is in (what `greedy_dual` did);
- `past_measured`: the windows of a finished request's prompt checkpoints that lie wholly
  above its last window (its outputs went past them) worth their measured reuse over that of
  output windows, every 8th request's counted at the full worth (as the default does for
  output windows);
- `past_censored`: the same, a sampled window counted only once its outcome is known
  (served, or evicted unserved);
- `output_factor_1`: the former default with its output windows always at the full worth.

These are variants of the former default; `reuse_credit` is the default now: the windows
of `past_measured` worth nothing until a prompt window has served a match, then their depth.

Each runs full+SWA at the hit table's ample budget (W = 1024) on `bursts/s0` and `bursts/s1`,
and on the Mooncake trace's first requests at issue 14's sizes, W = 1024 and 4096
(`benchmarks.hybrid_hits`). Measured (docs/hit_rates.md): the first two win `bursts/s1` but
lose W = 4096 on Mooncake; the third keeps Mooncake and loses the `bursts` gain. On `bursts`
the deciding evictions come in the first burst, before any window's reuse is known, so only
a prior decides them: the default's (no window served yet, so a request is presumed to be
continued from its end) wins `bursts` and, as the first serve comes early on Mooncake, keeps
W = 4096 there.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence

from benchmarks.hit_table import BUDGETS, measure
from benchmarks.hit_table import sized as table_sized
from benchmarks.hybrid_hits import TRACE, base_options, full_pool, sized
from benchmarks.traces.suite import suite
from uniradix.eviction.aux_eviction import EvictingComponent
from uniradix.eviction.orders import register_swa_order
from uniradix.eviction.swa_output import OUTPUT_SAMPLE, SWAOutputCreditEviction
from uniradix.sim.replay import run_replay
from uniradix.tree.node import TreeNode


class OwnDepth(SWAOutputCreditEviction):
    """The former default with never-served nodes credited by their own end."""

    def refreshed(self, node: TreeNode, depth: int, window_end: int) -> None:
        super().refreshed(node, depth, depth)


class OutputFactor1(SWAOutputCreditEviction):
    """The former default without the measured worth of output windows."""

    def output_factor(self) -> float:
        return 1.0


class PastMeasured(SWAOutputCreditEviction):
    """The former default with past prompt-checkpoint windows worth their measured reuse."""

    censored = False

    def __init__(self, component: EvictingComponent, window_tail: int) -> None:
        super().__init__(component, window_tail)
        self._past: set[TreeNode] = set()
        self._past_sampled: set[TreeNode] = set()
        self._past_inserts = 0
        self.past_served = self.past_stored = 0

    def past_factor(self) -> float:
        c, prior = self.counts, self.window_tail
        prompt = (c.prompt_served + prior) / (c.prompt_stored + prior)
        output = (c.output_served + prior * prompt) / (c.output_stored + prior)
        past = (self.past_served + prior * output) / (self.past_stored + prior)
        return min(1.0, past / output)

    def worth(self, node: TreeNode, depth: int) -> float:
        if node in self._past and node not in self._past_sampled and node not in self._serves:
            return self.past_factor() * math.pow(depth, self.cost_exponent)
        return super().worth(node, depth)

    def inserted_past_checkpoints(
        self, node: TreeNode, end: int, checkpoints: Sequence[int], walked: int
    ) -> None:
        super().inserted_past_checkpoints(node, end, checkpoints, walked)
        if end <= max(checkpoints):
            return
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
            self.counts.prompt_stored -= n.num_tokens
            self._past.add(n)
            if sampled:
                self._past_sampled.add(n)
                self.past_stored += 0 if self.censored else n.num_tokens
            else:
                self._set_credit(n, self.inflation + self.worth(n, deepest))

    def served(self, node: TreeNode, depth: int, window_end: int) -> None:
        if node in self._past and node not in self._serves:
            if node in self._past_sampled:
                self.past_served += node.num_tokens
                self.past_stored += node.num_tokens if self.censored else 0
            self._serve(node, window_end)
            return
        super().served(node, depth, window_end)

    def split(self, parent: TreeNode, child: TreeNode) -> None:
        for table in (self._past, self._past_sampled):
            if child in table:
                table.add(parent)
        super().split(parent, child)

    def forget(self, node: TreeNode) -> None:
        if self.censored and node in self._past_sampled and node not in self._serves:
            self.past_stored += node.num_tokens
        super().forget(node)
        self._past.discard(node)
        self._past_sampled.discard(node)


class PastCensored(PastMeasured):
    censored = True


RULES = {
    "reuse_credit": "reuse_credit",
    "output_windows": register_swa_order("study:fresh_output_windows", SWAOutputCreditEviction),
    "own_depth": register_swa_order("study:fresh_own_depth", OwnDepth),
    "past_measured": register_swa_order("study:fresh_past_measured", PastMeasured),
    "past_censored": register_swa_order("study:fresh_past_censored", PastCensored),
    "output_factor_1": register_swa_order("study:fresh_output_factor_1", OutputFactor1),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-requests", type=int, default=2000, help="of the Mooncake trace")
    parser.add_argument("--rules", nargs="+", default=list(RULES), choices=list(RULES))
    args = parser.parse_args()
    print("| rule | bursts/s0 | bursts/s1 | Mooncake W=1024 | Mooncake W=4096 |")
    print("|---|---|---|---|---|")
    traces = suite(only=["bursts/s0", "bursts/s1"], log=[])
    base = base_options("trace", str(TRACE)).updated(max_requests=args.max_requests)
    base = base.updated(full_tokens=full_pool(base)[0])
    full = run_replay(base.updated(config="full")).summary["hit_rate"]
    for name in args.rules:
        policy = RULES[name]
        cells = [
            measure(table_sized(t.options, *BUDGETS["ample"]), "swa", policy)["hit_rate"]
            for t in traces
        ]
        for window in (1024, 4096):
            options = sized(base, "swa", window, 1).updated(swa_eviction_policy=policy)
            cells.append(run_replay(options).summary["hit_rate"] / full)
        print(f"| {name} | " + " | ".join(f"{c:.4f}" for c in cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
