"""The disabled cache: the scheduler runs unchanged on it, every config and page size, with
no hit, nothing kept and nothing leaked; the library calls match nothing and free what they
are given."""

from __future__ import annotations

import pytest

from tests.sim.specs import spec
from uniradix import CacheConfig, EvictParams, InsertParams, MatchPrefixParams, RadixKey
from uniradix.cache.disabled import DisabledRadixCache
from uniradix.factory import build_cache
from uniradix.sim.metrics import ReplayMetrics
from uniradix.sim.replay import NullRunner
from uniradix.sim.scheduler import Scheduler, SchedulerConfig


def make(config: str = "full", page_size: int = 1) -> DisabledRadixCache:
    swa, mamba = config in ("swa", "hybrid"), config in ("mamba", "hybrid")
    cache = build_cache(
        CacheConfig.of(
            full_tokens=64 * page_size,
            page_size=page_size,
            max_context_len=256,
            sliding_window=4 if swa else None,
            mamba_slots=12 if mamba else None,
            mamba_extra_buffer=mamba and page_size > 1,
            disable_radix_cache=True,
        )
    )
    assert isinstance(cache, DisabledRadixCache)
    return cache


@pytest.mark.parametrize("page_size", [1, 4])
@pytest.mark.parametrize("config", ["full", "swa", "mamba", "hybrid"])
def test_the_scheduler_runs_unchanged_and_nothing_is_kept(config: str, page_size: int) -> None:
    cache = make(config, page_size)
    prompts = [[1, 2, 3, 4, 5, 6, 7, 8, 9, 10], [1, 2, 3, 4, 5, 6, 7, 8, 11], [1, 2, 3, 4, 5]]
    specs = [spec(i, p * 2, [7] * 6) for i, p in enumerate(prompts * 3)]
    metrics = ReplayMetrics(cache, len(specs), progress=False)
    config = SchedulerConfig(2, 2 * page_size, 0.0, check_invariants=True)
    scheduler = Scheduler(cache, NullRunner(), specs, config, metrics)
    scheduler.run()
    assert scheduler.num_invariant_checks == scheduler.num_steps > 0
    assert metrics.finished == len(specs) and metrics.prompt_tokens > 0
    assert metrics.hit_tokens == 0
    assert cache.total_size() == 0 and not cache.tree.root.children
    assert cache.pools.available() == cache.pools.capacities()


def test_insert_frees_what_it_is_given_and_match_finds_nothing() -> None:
    cache = make("mamba")
    assert cache.pools.mamba is not None
    value = cache.pools.kv_allocator.alloc(8)
    state = cache.pools.mamba.allocator.alloc(1)
    result = cache.insert(InsertParams(RadixKey(list(range(8))), value, mamba_value=state))
    assert (result.prefix_len, result.last_device_node) == (0, cache.tree.root)
    match = cache.match_prefix(MatchPrefixParams(RadixKey(list(range(8)))))
    assert (match.device_prefix_len, match.full_kv_hit_length) == (0, 0)
    assert cache.evict(EvictParams(num_tokens=8)).num_tokens_evicted == 0
    assert cache.pools.available() == cache.pools.capacities()
    cache.check_invariants({"full": 0, "mamba": 0, "req": 0})
    with pytest.raises(TypeError, match="RadixKey"):
        cache.match_prefix(MatchPrefixParams([1, 2]))  # type: ignore[arg-type]
