"""Hand-built request lists for the sim tests."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from hypothesis import strategies as st

from uniradix import CacheConfig, EvictParams, UnifiedRadixCache, build_cache
from uniradix.sim.replay import NullRunner
from uniradix.sim.request_spec import RequestSpec, TokenPrompt
from uniradix.sim.scheduler import Scheduler, SchedulerConfig


def spec(rid: int, prompt: list[int], outputs: list[int], after: int | None = None) -> RequestSpec:
    return RequestSpec(rid, TokenPrompt(prompt), np.array(outputs, dtype=np.int64), rid, after)


def fitting_specs(prompts: list[list[int]], outputs: list[int], limit: int) -> list[RequestSpec]:
    """A request per prompt whose prompt plus `outputs[i]` output tokens fit in `limit`
    tokens (random traffic's filter), or one tiny request when none does."""
    fitting = [(p, n) for p, n in zip(prompts, outputs, strict=False) if len(p) + n <= limit]
    return [spec(i, p, [7] * n) for i, (p, n) in enumerate(fitting)] or [spec(0, [1], [1])]


def drain_and_check(cache: UnifiedRadixCache, full_tokens: int, mamba_slots: int = 64) -> None:
    """Evicts everything the tree holds, then proves every pool exact and every slot back."""
    cache.evict(
        EvictParams(num_tokens=full_tokens, swa_num_tokens=full_tokens, mamba_num=mamba_slots)
    )
    cache.check_invariants({"full": 0, "swa": 0, "mamba": 0, "req": 0})
    assert cache.pools.available() == cache.pools.capacities()


def specs_from(prompts: list[list[int]], outputs: list[list[int]]) -> list[RequestSpec]:
    return [spec(i, p, o) for i, (p, o) in enumerate(zip(prompts, outputs, strict=True))]


def small_cache(
    config: str,
    full_tokens: int,
    page_size: int,
    window: int,
    mamba_slots: int = 12,
    **extra: Any,
) -> UnifiedRadixCache:
    """A small cache of shape `config` ("full", "swa", "mamba" or "hybrid") for random
    traffic: SWA pool half the full pool, extra-buffer Mamba above page size 1."""
    swa, mamba = config in ("swa", "hybrid"), config in ("mamba", "hybrid")
    return build_cache(
        CacheConfig.of(
            full_tokens=full_tokens,
            page_size=page_size,
            max_context_len=256,
            sliding_window=window if swa else None,
            swa_tokens=full_tokens // 2 if swa else None,
            mamba_slots=mamba_slots if mamba else None,
            mamba_extra_buffer=mamba and page_size > 1,
            **extra,
        )
    )


@dataclass(frozen=True)
class ChunkedTraffic:
    """Random chunked traffic with checkpoint placement: prompts built from a few shared stems
    (so windows are served, split and evicted while others run), each prompt several chunks
    long, on a small full+SWA or full+SWA+Mamba cache."""

    config: str
    grid: int | None
    stems: list[list[int]]
    tails: list[list[int]]
    outputs: list[int]
    page_size: int
    full_pages: int
    window: int
    max_running: int
    chunk_pages: int

    @property
    def full_tokens(self) -> int:
        return self.full_pages * self.page_size

    def cache(self, **extra: Any) -> UnifiedRadixCache:
        return small_cache(self.config, self.full_tokens, self.page_size, self.window, **extra)

    def scheduler(self, cache: UnifiedRadixCache) -> Scheduler:
        """The traffic on `cache`, checking every invariant after every step."""
        stems = self.stems
        prompts = [stems[i % len(stems)] + tail for i, tail in enumerate(self.tails)]
        specs = fitting_specs(prompts, self.outputs, self.full_tokens // 2)
        config = SchedulerConfig(
            self.max_running,
            self.chunk_pages * self.page_size,
            0.0,
            check_invariants=True,
            checkpoint_placement=True,
            checkpoint_grid=self.grid,
        )
        return Scheduler(cache, NullRunner(), specs, config=config)


CHUNKED_TRAFFIC = st.builds(
    ChunkedTraffic,
    config=st.sampled_from(["swa", "hybrid"]),
    grid=st.sampled_from([None, 4, 8]),
    stems=st.lists(st.lists(st.integers(0, 2), min_size=4, max_size=12), min_size=1, max_size=3),
    tails=st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=24), min_size=2, max_size=8),
    outputs=st.lists(st.integers(1, 6), min_size=8, max_size=8),
    page_size=st.sampled_from([1, 2]),
    full_pages=st.integers(40, 72),
    window=st.integers(1, 4),
    max_running=st.integers(1, 3),
    chunk_pages=st.integers(1, 3),
)
