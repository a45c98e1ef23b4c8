"""Lost hybrid hits: the cause named at the full-KV boundary of a match, with exact tokens,
and the replay's JSON and report."""

import json
from pathlib import Path

import pytest
import torch

from benchmarks.studies.retired_orders import GREEDY_DUAL
from uniradix import (
    CacheConfig,
    EvictParams,
    InsertParams,
    MatchPrefixParams,
    RadixKey,
    build_cache,
)
from uniradix.cache.controller import UnifiedRadixCache
from uniradix.cli import main
from uniradix.memory.swa_allocator import SWASlotAllocator
from uniradix.sim.lost_hits import LostHits


def swa_cache(window: int = 4) -> UnifiedRadixCache:
    # `greedy_dual` credits each node by its own end, so the test names the victim (the
    # older, shallower window); `greedy_dual_window` would credit it with the newer leaf.
    return build_cache(
        CacheConfig.of(
            full_tokens=64,
            swa_tokens=32,
            sliding_window=window,
            max_context_len=64,
            swa_eviction_policy=GREEDY_DUAL,
        )
    )


def put_swa(cache: UnifiedRadixCache, tokens: list[int], cursor: int) -> None:
    """Inserts `tokens` with fresh slots whose SWA below `cursor` was freed (the running
    request's out-of-window frees)."""
    a = cache.pools.kv_allocator
    assert isinstance(a, SWASlotAllocator)
    value = a.alloc(len(tokens))
    assert value is not None
    if cursor:
        a.free_swa(value[:cursor])
    cache.insert(InsertParams(RadixKey(tokens), value, swa_evicted_seqlen=cursor))


def observe(cache: UnifiedRadixCache, lost: LostHits, tokens: list[int]) -> tuple[str, ...]:
    key = RadixKey(tokens)
    hit = lost.observe(key, cache.match_prefix(MatchPrefixParams(key)))
    lost.add(hit)
    return hit.causes


def test_swa_window_freed_by_the_request_is_tombstoned_not_evicted() -> None:
    cache = swa_cache()
    lost = LostHits(cache)
    # 12 tokens, cursor 8: [0, 8) tombstone, [8, 12) live. A request sharing 8 tokens
    # (branching at 8) matches 8 of full KV but cannot end there: the window before is gone.
    put_swa(cache, list(range(12)), cursor=8)
    assert observe(cache, lost, [*range(8), 99]) == ("swa_tombstoned",)
    assert lost.summary()["lost_tokens"] == 8
    assert lost.summary()["causes"]["swa_tombstoned"] == 8
    # The whole sequence again: usable, nothing lost.
    assert observe(cache, lost, [*range(12), 5]) == ()
    assert lost.summary()["full_kv_hit_tokens"] == 8 + 12
    assert lost.summary()["usable_hit_tokens"] == 12


def test_swa_window_evicted_by_the_tree() -> None:
    cache = swa_cache()
    lost = LostHits(cache)
    put_swa(cache, list(range(8)), cursor=0)
    put_swa(cache, [*range(8), 50, 51, 52, 53], cursor=8)
    # Evict the SWA of the older node [0, 8) (internal: it becomes a tombstone).
    cache.evict(EvictParams(swa_num_tokens=8))
    assert observe(cache, lost, [*range(8), 77]) == ("swa_evicted",)
    assert lost.summary()["causes"] == {
        "swa_tombstoned": 0,
        "swa_evicted": 8,
        "mamba_missing": 0,
        "mamba_evicted": 0,
    }


def mamba_cache() -> UnifiedRadixCache:
    # LRU order, so the test names the victim (the least recent state).
    return build_cache(
        CacheConfig.of(full_tokens=64, mamba_slots=8, max_context_len=64, aux_eviction_policy="lru")
    )


def put_mamba(cache: UnifiedRadixCache, tokens: list[int], with_state: bool) -> None:
    value = cache.pools.kv_allocator.alloc(len(tokens))
    assert value is not None and cache.pools.mamba is not None
    state = None
    if with_state:
        slot = cache.pools.mamba.allocator.alloc_one()
        assert slot is not None
        state = torch.tensor([slot], dtype=torch.int64)
    cache.insert(InsertParams(RadixKey(tokens), value, mamba_value=state))


def test_mamba_state_missing_then_evicted() -> None:
    cache = mamba_cache()
    lost = LostHits(cache)
    put_mamba(cache, list(range(6)), with_state=False)
    put_mamba(cache, [*range(6), 7, 8], with_state=True)
    put_mamba(cache, [*range(6), 7, 8, 9, 10], with_state=True)
    # Branching at 6: full KV matches 6, no state was ever kept there.
    assert observe(cache, lost, [*range(6), 40]) == ("mamba_missing",)
    # The (least recent) state at 8 is evicted, leaving a tombstone on the internal node: a
    # request sharing 8 tokens loses them to the eviction.
    assert cache.evict(EvictParams(mamba_num=1)).mamba_num_evicted == 1
    assert observe(cache, lost, [*range(6), 7, 8, 40]) == ("mamba_evicted",)
    s = lost.summary()
    assert (s["lost_tokens"], s["lost_requests"]) == (14, 2)
    assert s["causes"]["mamba_missing"] == 6 and s["causes"]["mamba_evicted"] == 8


def test_full_only_cache_has_no_lost_hits() -> None:
    assert not LostHits(build_cache(CacheConfig.of(full_tokens=64))).enabled


def test_replay_json_and_report_carry_lost_hits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["replay", "--workload", "multi_turn", "--config", "hybrid", "--page-size", "16"]
    argv += ["--full-tokens", "8192", "--swa-tokens", "2048", "--mamba-slots", "128"]
    assert main([*argv, "--max-requests", "60", "--json", "--check-invariants"]) == 0
    lost = json.loads(capsys.readouterr().out)["lost_hits"]
    assert lost["full_kv_hit_tokens"] == lost["usable_hit_tokens"] + lost["lost_tokens"]
    assert lost["lost_tokens"] > 0
    assert sum(lost["causes"].values()) >= lost["lost_tokens"]
    assert main([*argv, "--max-requests", "60", "--report", str(tmp_path)]) == 0
    capsys.readouterr()
    assert (tmp_path / "lost_hits.png").stat().st_size > 0
    assert "| swa_evicted |" in (tmp_path / "summary.md").read_text()
    full = ["replay", "--workload", "multi_turn", "--config", "full", "--json"]
    assert main([*full, "--max-requests", "10"]) == 0
    assert json.loads(capsys.readouterr().out)["lost_hits"] is None
