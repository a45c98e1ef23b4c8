"""Hand-built request lists for the sim tests."""

from __future__ import annotations

from typing import Any

import numpy as np

from uniradix import CacheConfig, EvictParams, UnifiedRadixCache, build_cache
from uniradix.sim.request_spec import RequestSpec, TokenPrompt


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
        CacheConfig(
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
