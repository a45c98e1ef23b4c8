"""Hand-built request lists for the sim tests."""

from __future__ import annotations

from typing import Any

import numpy as np

from uniradix import CacheConfig, UnifiedRadixCache, build_cache
from uniradix.sim.request_spec import RequestSpec, TokenPrompt


def spec(rid: int, prompt: list[int], outputs: list[int], after: int | None = None) -> RequestSpec:
    return RequestSpec(rid, TokenPrompt(prompt), np.array(outputs, dtype=np.int64), rid, after)


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
