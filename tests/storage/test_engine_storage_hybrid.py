"""Real SWA window and Mamba state bytes through L3: the tiny engine on a full+SWA+Mamba
model backs its host pages, windows and states up to the store; a second engine (a new
cache, as a second process would have) on the same directory hits what the first wrote,
through L3, and generates exactly what the no-cache run does."""

from __future__ import annotations

from pathlib import Path

from tests.engine.test_engine_equal_output import (
    MAX_NEW_TOKENS,
    assert_equal_to_no_cache,
    engine_config,
    model_for,
    shared_prompts,
)
from uniradix.engine.engine import Engine, GenerateResult
from uniradix.engine.model import TinyHybridModel
from uniradix.tiers.controller import HostTier
from uniradix.tiers.storage_tier import StorageTier

PAGE = 4


def _generate(
    model: TinyHybridModel, url: str, prompts: list[list[int]]
) -> tuple[GenerateResult, StorageTier]:
    config = engine_config(
        "hybrid",
        PAGE,
        full_tokens=96,
        swa_tokens=96,
        mamba_slots=40,
        host_tokens=256,
        storage_url=url,
        prefetch_threshold=PAGE,
    )
    engine = Engine(model, config)
    result = engine.generate(prompts, MAX_NEW_TOKENS)
    tier = engine.cache.host_tier
    assert isinstance(tier, HostTier) and tier.storage is not None
    engine.cache.check_invariants()
    tier.close()
    return result, tier.storage


def test_a_second_hybrid_cache_on_the_same_directory_hits_through_l3(
    tmp_path: Path, device: str
) -> None:
    model = model_for("hybrid", device)
    url = f"file://{tmp_path / 'l3'}"
    prompts = shared_prompts()
    first, written = _generate(model, url, prompts)
    assert_equal_to_no_cache(model, prompts, first)
    assert written.aux is not None
    stored = written.stats.aux_stored_pages
    assert written.stats.stored_pages > 0 and stored["swa"] > 0 and stored["mamba"] > 0
    swa_bytes = written.aux.host_swa.page_nbytes()  # type: ignore[union-attr]
    state_bytes = written.aux.host_states.state_nbytes()  # type: ignore[union-attr]
    assert swa_bytes > 0 and state_bytes > 0
    assert written.backend.stats().bytes_written >= (
        written.stats.stored_pages * written.page_nbytes
        + stored["swa"] * swa_bytes
        + stored["mamba"] * state_bytes
    )
    second, read = _generate(model, url, prompts)
    assert_equal_to_no_cache(model, prompts, second)
    assert read.stats.fetched_tokens > 0 and read.stats.hit_tokens > 0
    assert second.hit_lengths[0] > 0 and first.hit_lengths[0] == 0
    assert read.backend.stats().pages_read > 0
