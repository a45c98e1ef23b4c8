"""Generation through a cache with an L2 host tier equals generation with no cache: the
device pool is small enough that prefixes are demoted to the host and loaded back, and the
KV bytes make the round trip through real host tensors (both layouts, every CPU engine)."""

from __future__ import annotations

import pytest

from tests.engine.test_engine_equal_output import (
    MAX_NEW_TOKENS,
    assert_equal_to_no_cache,
    engine_config,
    model_for,
    shared_prompts,
)
from uniradix.engine.engine import Engine
from uniradix.tiers.controller import HostTier


@pytest.mark.parametrize(
    ("page_size", "layout", "engine", "policy"),
    [
        (1, "layer_first", "sync", "write_through"),
        (1, "page_first", "thread", "write_back"),
        (4, "page_first", "sync", "write_through_selective"),
        (4, "layer_first", "thread", "write_through"),
    ],
)
def test_generation_with_a_host_tier_equals_no_cache(
    page_size: int, layout: str, engine: str, policy: str, device: str
) -> None:
    if device == "cuda":
        engine = "cuda"
    model = model_for("full", device)
    prompts = shared_prompts()
    config = engine_config(
        "full",
        page_size,
        full_tokens=64,
        host_tokens=256,
        host_layout=layout,
        host_engine=engine,
        write_policy=policy,
    )
    eng = Engine(model, config)
    result = eng.generate(prompts, MAX_NEW_TOKENS)
    assert_equal_to_no_cache(model, prompts, result)
    tier = eng.cache.host_tier
    assert isinstance(tier, HostTier)
    assert tier.stats.demoted_tokens > 0 and tier.stats.loaded_tokens > 0
    assert result.host_hit_tokens > 0
    assert tier.engine.bytes_moved[next(iter(tier.engine.bytes_moved))] > 0
    eng.cache.check_invariants()
    tier.close()


@pytest.mark.parametrize("host_engine", ["sync", "thread"])
@pytest.mark.parametrize("page_size", [1, 4])
@pytest.mark.parametrize(
    ("config", "policy"),
    [
        ("swa", "write_through"),
        ("mamba", "write_back"),
        ("hybrid", "write_through"),
        ("hybrid", "write_back"),
    ],
)
def test_hybrid_generation_with_a_host_tier_equals_no_cache(
    config: str, policy: str, page_size: int, host_engine: str, device: str
) -> None:
    """SWA windows and Mamba states make the round trip through the host too: a small
    device pool demotes them, and load-backs bring them (and the full KV) back; with the
    thread engine the copies run while the scheduler goes on evicting."""
    if device == "cuda" and host_engine == "thread":
        pytest.skip("on CUDA the engine is the stream engine")
    model = model_for(config, device)
    prompts = shared_prompts()
    engine = "cuda" if device == "cuda" else host_engine
    sizes: dict[str, object] = {"full_tokens": 48, "host_tokens": 256}
    if config != "mamba":
        sizes["swa_tokens"] = 24
    cfg = engine_config(config, page_size, host_engine=engine, write_policy=policy, **sizes)
    eng = Engine(model, cfg)
    result = eng.generate(prompts, MAX_NEW_TOKENS)
    assert_equal_to_no_cache(model, prompts, result)
    tier = eng.cache.host_tier
    assert isinstance(tier, HostTier)
    assert tier.stats.demoted_tokens > 0 and tier.stats.loaded_tokens > 0
    for c in tier.aux:  # every auxiliary component's data went to the host and came back
        assert tier.stats.aux_written[c.name] > 0 and tier.stats.aux_loaded[c.name] > 0, c.name
    assert set(tier.engine.copiers) == {"full", *(c.name for c in tier.aux)}
    eng.cache.check_invariants()
    tier.close()
