"""Checkpoint placement: the positions chosen, SWA windows kept there by a running request,
and Mamba chunks cut there so a state is taken."""

import numpy as np
import pytest
import torch

from tests.sim.specs import small_cache, spec
from uniradix import CacheConfig, build_cache
from uniradix.components.mamba import MambaComponent
from uniradix.sim.placement import OUTPUT_SAMPLE, OUTPUT_WARMUP, checkpoint_seqlens
from uniradix.sim.replay import NullRunner
from uniradix.sim.scheduler import Scheduler, SchedulerConfig
from uniradix.types import ComponentType, MatchResult


def result(hit: int, full: int) -> MatchResult:
    return MatchResult(torch.empty(0, dtype=torch.int64), hit, None, full)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("prompt_len", "align", "grid", "hit", "full", "expected"),
    [
        (1300, 16, 512, 0, 0, (1024, 1296)),  # the docstring's example
        (1296, 16, 512, 0, 0, (1024, 1280, 1296)),  # a page-aligned prompt: its resend ends at 1280
        (1300, 16, None, 0, 0, (1296,)),
        (1300, 16, 512, 1024, 1024, (1296,)),  # at or below the usable match: left out
        (1300, 16, 512, 256, 700, (688, 1024, 1296)),  # the tree's branch point (full-KV end)
        (1300, 16, 24, 0, 0, (1296,)),  # grid 24 on pages of 16: lcm 48 -> 1296
        (10, 4, 6, 0, 0, (8,)),  # lcm(6, 4) = 12 > 10: nothing on the grid
    ],
)
def test_checkpoint_positions(
    prompt_len: int, align: int, grid: int | None, hit: int, full: int, expected: tuple[int, ...]
) -> None:
    assert checkpoint_seqlens(prompt_len, align, grid, result(hit, full)) == expected


def test_bad_alignment_is_rejected() -> None:
    with pytest.raises(ValueError, match="align=0"):
        checkpoint_seqlens(10, 0, None, result(0, 0))
    with pytest.raises(ValueError, match="checkpoint_grid=0"):
        SchedulerConfig(checkpoint_grid=0)


@pytest.mark.parametrize("placement", [False, True])
def test_mamba_state_at_the_grid_point_serves_the_next_branch(placement: bool) -> None:
    """Page 1, chunks of 64: request 0 (30 tokens) is one chunk, so without placement its
    states are at its prompt end and its sequence end only. Request 1 shares its first 24
    tokens (the last grid point before the prompt end, grid 8): with placement request 0 cut
    its chunk at 24 and left a state there, so request 1 resumes at 24, not from nothing."""
    hits: list[int] = []
    base = list(range(100, 130))
    config = CacheConfig.of(full_tokens=256, mamba_slots=16, max_context_len=64)
    cache = build_cache(config)
    specs = [spec(0, base, [7, 7]), spec(1, [*base[:24], 1, 2, 3], [7], after=0)]

    sched = Scheduler(
        cache,
        NullRunner(),
        specs,
        SchedulerConfig(
            max_running=1,
            chunk_size=64,
            check_invariants=True,
            checkpoint_placement=placement,
            checkpoint_grid=8,
        ),
    )
    orig = sched.listener.on_admit
    sched.listener.on_admit = lambda r, m: (hits.append(m.device_prefix_len), orig(r, m))  # type: ignore[method-assign]
    sched.run()
    assert hits == ([0, 24] if placement else [0, 0])


@pytest.mark.parametrize("placement", [False, True])
def test_swa_window_at_a_middle_chunks_grid_point_survives(placement: bool) -> None:
    """Window 4, page 1, chunks of 8, grid 8; request 0 has 20 tokens. With placement the
    middle chunks are published with only their last window live, plus the window before each
    grid point; without it, whole chunks go in live. Either way request 1, which shares 16
    tokens, must hit 16: the window [12, 16) is live."""
    base = list(range(100, 120))
    config = CacheConfig.of(full_tokens=128, swa_tokens=64, sliding_window=4, max_context_len=64)
    cache = build_cache(config)
    hits: list[int] = []
    specs = [spec(0, base, [7]), spec(1, [*base[:16], 1, 2], [7], after=0)]
    sched = Scheduler(
        cache,
        NullRunner(),
        specs,
        SchedulerConfig(
            max_running=1,
            chunk_size=8,
            check_invariants=True,
            checkpoint_placement=placement,
            checkpoint_grid=8,
        ),
    )
    orig = sched.listener.on_admit
    sched.listener.on_admit = lambda r, m: (hits.append(m.device_prefix_len), orig(r, m))  # type: ignore[method-assign]
    sched.run()
    assert hits == [0, 16]
    live = sum(1 for n in cache.tree.nodes() if n.data[1].value is not None)
    tombstones = sum(1 for n in cache.tree.nodes() if n.data[1].value is None)
    # Published chunks lost their out-of-window SWA only with placement.
    assert (tombstones > 0) == placement
    assert live > 0
    assert np.all(np.asarray(list(cache.pools.available().values())) >= 0)


def _finish_states_stored(prompts: list[list[int]], chat: bool) -> int:
    """Replays `prompts` one at a time (page 2, extra-buffer Mamba) with 4 outputs each; with
    `chat`, request i sends request i-1's prompt and outputs back before its own."""
    cache = small_cache("mamba", 4096, 2, 4, mamba_slots=64)
    specs, previous = [], [] if chat else None
    for i, prompt in enumerate(prompts):
        if previous is not None:
            prompt = previous + prompt
            previous = prompt + [7] * 4
        specs.append(spec(i, prompt, [7] * 4, after=i - 1 if i else None))
    config = SchedulerConfig(max_running=1, chunk_size=256, check_invariants=True)
    Scheduler(cache, NullRunner(), specs, config).run()
    mamba = cache.component(ComponentType.MAMBA)
    assert isinstance(mamba, MambaComponent)
    counts = mamba.reuse_counts
    assert counts.resumed > 0 and counts.finish_stored <= counts.stored
    cache.check_invariants()
    return counts.finish_stored


def test_outputs_no_request_sends_back_stop_being_checkpointed() -> None:
    """64 requests sharing a 20-token prefix, none sending outputs back: the first
    OUTPUT_WARMUP leave a finish state each; no match resumes from one, so afterwards only
    every OUTPUT_SAMPLE-th request (rids 32, 40, 48, 56) still tracks its outputs."""
    assert (OUTPUT_WARMUP, OUTPUT_SAMPLE) == (32, 8)
    prompts = [[*range(100, 120), i, i + 1000] for i in range(64)]
    assert _finish_states_stored(prompts, chat=False) == 32 + 4


def test_outputs_a_chat_sends_back_stay_checkpointed() -> None:
    """One chat of 48 turns (each resends the previous turn's prompt and outputs, then one
    token): every turn resumes from the previous finish state, so all 48 leave one."""
    prompts = [[i + 1000] for i in range(48)]
    assert _finish_states_stored(prompts, chat=True) == 48
