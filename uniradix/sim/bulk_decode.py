"""Decode steps simulated in bulk while nothing observes single tokens.

A decode step of the scheduler appends one token per running request; the cache sees it only
when a request needs a new page (an allocation, evicting when short), finishes, or
(windowed components, tracked Mamba states) crosses a page or a checkpoint. While no prefill
can run (nothing waits, or the running set is full), no request finishes and the pages
needed fit in the free slots, k steps do nothing but allocate those pages, in the order the
steps would, and append tokens: `quiet_steps` counts them and `decode_in_bulk` runs them
with the same allocations and per-step listener calls, skipping the per-token work. The
replay's figures stay identical.

Only a runner that knows its outputs ahead (`BulkRunner`, the replay's) allows this, and
only without a host tier (its transfers progress per step), windowed components, tracked
Mamba states or per-step invariant checks.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np

from uniradix.sim.batch import ModelRunner, RunningRequest

if TYPE_CHECKING:
    from uniradix.cache.controller import UnifiedRadixCache
    from uniradix.sim.row_slots import RowSlots


@runtime_checkable
class BulkRunner(Protocol):
    def next_outputs(self, request: RunningRequest, num: int) -> np.ndarray:
        """The next `num` output tokens of `request` (what `num` decode steps would sample)."""
        ...


def bulk_allowed(cache: UnifiedRadixCache, runner: ModelRunner, check_invariants: bool) -> bool:
    """Whether this set-up lets quiet steps run in bulk at all."""
    mamba = cache.pools.mamba
    return (
        isinstance(runner, BulkRunner)
        and not cache.host_tier.enabled
        and not cache.has_window_steps
        and (mamba is None or not mamba.extra_buffer)
        and not check_invariants
    )


def quiet_steps(running: Sequence[RunningRequest], can_prefill: bool, free: int, ps: int) -> int:
    """How many next steps would be plain decode steps: no prefill can run, no running
    request reaches its last output, and the pages they need fit in the `free` slots (so
    no step evicts)."""
    if can_prefill or not running:
        return 0
    steps = None
    for r in running:
        if not r.prefilled:
            return 0
        left = r.spec.output_len - r.num_output - 1  # the step giving the last one finishes
        if steps is None or left < steps:
            steps = left
    if steps is None or steps < 2:
        return 0
    while steps >= 2 and _slots_needed(running, steps, ps) > free:
        steps //= 2
    return steps if steps >= 2 else 0


def _first_page_step(r: RunningRequest) -> int:
    """Index of the first next decode step that needs a page: step j decodes at position
    len(token_ids) - 1 + j, and the row has slots below kv_allocated_len (whole pages)."""
    return r.req.kv_allocated_len - len(r.req.token_ids) + 1


def _slots_needed(running: Sequence[RunningRequest], steps: int, ps: int) -> int:
    total = 0
    for r in running:
        first = _first_page_step(r)
        if first < steps:
            total += ps * (-(-(steps - first) // ps))
    return total


def decode_in_bulk(
    running: Sequence[RunningRequest],
    runner: ModelRunner,
    slots: RowSlots,
    num_steps: int,
    on_step: Callable[[], None],
) -> None:
    """Runs `num_steps` decode steps (`quiet_steps` or fewer) over `running`: the pages
    each step allocates, in the order a step would (request order), then `on_step`; the
    outputs are appended at once at the end."""
    assert isinstance(runner, BulkRunner)
    ps = slots.page_size
    due: dict[int, list[RunningRequest]] = {}
    for r in running:
        for step in range(max(_first_page_step(r), 0), num_steps, ps):
            due.setdefault(step, []).append(r)
    positions = {id(r): len(r.req.token_ids) - 1 for r in running}
    for step in range(num_steps):
        for r in due.get(step, ()):
            ok = slots.alloc(r, positions[id(r)] + step + 1)
            assert ok, "a bulk decode allocation failed although the slots were free"
        on_step()
    for r in running:
        req = r.req
        outputs = runner.next_outputs(r, num_steps)
        if isinstance(req.token_ids, array):
            req.token_ids.frombytes(outputs.astype(np.int64, copy=False).tobytes())
        else:
            req.token_ids.extend(int(t) for t in outputs)
        req.kv_committed_len = len(req.token_ids) - 1
        r.num_output += num_steps
