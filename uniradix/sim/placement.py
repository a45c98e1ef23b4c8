"""Checkpoint placement: where a hybrid cache keeps a request's SWA window and Mamba state, so
that the next request branching off its prefix can resume there.

A full-attention cache can resume anywhere along a cached prefix; an SWA layer only where the
window before the boundary is live, a Mamba layer only where a state was saved. Requests
branch at a few predictable places (Marconi, MLSys 2025), and the scheduler names them at
admission in `Req.checkpoint_seqlens`:

- the prompt end floored to the alignment (an agent's alternative call, a retry: the next
  request sends this prompt plus something else), and the end of the prompt minus its last
  token (what a resend of the same prompt matches);
- the last multiple of `grid` before it (traces whose sharing is block granular, e.g.
  Mooncake's 512-token blocks: the next turn shares the whole blocks only);
- the full-KV match end when the usable match stopped short of it: the tree knows a branch
  starts there (`mamba_branching_seqlen` and its SWA equivalent).

Positions at or below the usable match are left out (the tree has them already). The SWA
component does not free the window ending at a listed position (`free_out_of_window`); the
scheduler ends a prefill chunk at each one on a Mamba cache, so the state is taken there.

Example (alignment 16, grid 512, prompt of 1300 tokens, nothing matched): (1024, 1296, 1296)
deduplicated to (1024, 1296): a state and a window at the last block boundary and at the
prompt end.

Decode outputs are checkpointed only while they pay (extra-buffer Mamba caches): tracking the
state past the prompt holds a second Mamba slot for the whole decode, and the finished request
publishes its outputs with a *finish state*. Where the next requests send the outputs back
(a chat's next turn) a match resumes from finish states; where they do not (the Mooncake
trace: none of its 3,203 finish states was ever resumed from), the slot and the state only
push out states that would be. So after `OUTPUT_WARMUP` finish states the cache's counts
decide (`MambaComponent.reuse_counts`): outputs are tracked while the share of finish states
a match resumed from is at least `OUTPUT_MIN_SHARE` times that of all states; else only
every `OUTPUT_SAMPLE`-th request tracks its outputs, which keeps the count current.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from uniradix.cache.mamba_requests import MambaRequests
from uniradix.types import ComponentType, MatchResult

# Finish states counted before their reuse is judged; below this share of the resumed-from
# share of all states, decode outputs are not checkpointed (but by every OUTPUT_SAMPLE-th
# request, to keep counting).
OUTPUT_WARMUP = 32
OUTPUT_MIN_SHARE = 0.25
OUTPUT_SAMPLE = 8

if TYPE_CHECKING:
    from uniradix.cache.controller import UnifiedRadixCache
    from uniradix.sim.batch import ForwardEntry, RunningRequest


def checkpoint_seqlens(
    prompt_len: int, align: int, grid: int | None, match: MatchResult
) -> tuple[int, ...]:
    """Ascending positions (multiples of `align`) past `match`'s usable length where the
    request should leave a checkpoint; `grid=None` places none on a grid."""
    if align < 1 or (grid is not None and grid < 1):
        raise ValueError(f"align={align} and grid={grid} must be >= 1")
    hit = match.device_prefix_len
    points = {prompt_len // align * align, (prompt_len - 1) // align * align}
    if grid is not None:
        step = math.lcm(grid, align)
        points.add(prompt_len // step * step)
    if match.full_kv_hit_length > hit:
        points.add(match.full_kv_hit_length // align * align)
    return tuple(sorted(p for p in points if p > hit))


class CheckpointPlan:
    """Where one scheduler leaves checkpoints on its cache. The alignment is the Mamba grid on
    a Mamba cache (chunks end at checkpoints), the page on an SWA cache, and none on a
    full-only cache or with placement off (then only the tree's own branch points count)."""

    def __init__(self, cache: UnifiedRadixCache, placement: bool, grid: int | None) -> None:
        mamba = cache.mamba_requests
        self.mamba = mamba if isinstance(mamba, MambaRequests) else None
        self.grid = grid
        self.mamba_align = (
            self.mamba.component.checkpoint_grid if self.mamba and placement else None
        )
        self.align = self.mamba_align or (
            cache.page_size if len(cache.components) > 1 and placement else None
        )
        self.free_before_publish = self.align is not None and any(
            c.component_type == ComponentType.SWA for c in cache.components
        )
        # Whether any pass tracks a Mamba state (extra-buffer mode); else the track
        # positions are all None
        self.tracks = self.mamba is not None and self.mamba.pool.extra_buffer

    def seqlens(self, prompt_len: int, match: MatchResult) -> tuple[int, ...]:
        """`Req.checkpoint_seqlens` for a request admitted with `match`."""
        if self.align is None:
            return ()
        return checkpoint_seqlens(prompt_len, self.align, self.grid, match)

    def chunk_end(self, request: RunningRequest, start: int, end: int) -> int:
        """Stops the chunk `[start, end)` at the match's `mamba_branching_seqlen`, and on a
        Mamba cache at the first checkpoint inside it, so the `cache_unfinished_req` after
        it saves a state there."""
        branch = request.mamba_branch
        end = branch if branch is not None and start < branch < end else end
        if self.mamba_align is not None:
            for c in request.req.checkpoint_seqlens:
                if start < c < end:
                    return c
        return end

    def track_seqlen(self, start: int, end: int) -> int | None:
        """The position whose state an extra-buffer Mamba cache tracks in `[start, end)`."""
        if self.mamba is None or not self.mamba.pool.extra_buffer:
            return None
        return self.mamba.checkpoint_seqlen(start, end)

    def output_track_seqlen(self, request: RunningRequest, start: int, end: int) -> int | None:
        """`track_seqlen` of a decode step of `request`: None while its outputs are not
        checkpointed (placement on and finish states not resumed from often enough)."""
        if not self.tracks:
            return None
        assert self.mamba is not None
        seqlen = self.mamba.checkpoint_seqlen(start, end)  # None within a page: most steps
        if seqlen is None or self.mamba_align is None or self.tracks_outputs(request):
            return seqlen
        return None

    def tracks_outputs(self, request: RunningRequest) -> bool:
        """Whether `request` checkpoints its decode outputs now (see the module docstring)."""
        assert self.mamba is not None
        counts = self.mamba.component.reuse_counts
        if counts.finish_stored < OUTPUT_WARMUP or request.spec.rid % OUTPUT_SAMPLE == 0:
            return True
        # finish_resumed / finish_stored >= OUTPUT_MIN_SHARE * resumed / stored
        finish_share = counts.finish_resumed * counts.stored
        return finish_share >= OUTPUT_MIN_SHARE * counts.resumed * counts.finish_stored

    def commit_tracks(self, entries: list[ForwardEntry]) -> None:
        if self.mamba is None:
            return
        for e in entries:
            if e.track_seqlen is not None:
                self.mamba.commit_track(e.request.req, e.track_seqlen)
