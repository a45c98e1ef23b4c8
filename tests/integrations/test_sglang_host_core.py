"""The host-tier TreeCore methods SGLang's stream test does not reach on its own, called in
lock step on SGLang's Python core and on the uniradix core (both under SGLang's cache with
HiCache on, see `sglang_hicache`): host locks against host eviction, `insert_host` (storage
prefetch: new host-only leaves, refills, splits, refusal below an unbacked node) and the
load-back of what it hung, backups failing for want of host memory (write-back drops the
leaf); the results and the trees compared after every call."""

from __future__ import annotations

from array import array

import pytest

from tests.integrations.sglang_env import load_sglang

load_sglang(kits=True)

from sglang.srt.mem_cache.base_prefix_cache import (  # noqa: E402
    EvictParams,
    InsertParams,
    MatchPrefixParams,
)
from sglang.srt.mem_cache.radix_cache import RadixKey  # noqa: E402
from sglang.test.kits.unified_radix_cache.config import CONFIGS  # noqa: E402

from tests.integrations.sglang_hicache import (  # noqa: E402
    build_hicache_cache,
    cpu_hicache,
    insert_and_evict_with_host_full,
    load_back,
    scripted_in_lock_step,
)
from tests.integrations.test_sglang_hicache import tree_state  # noqa: E402

CFG = next(c for c in CONFIGS if c.label == "FULL_ps4")
PS = CFG.page_size


def seq(start: int, pages: int) -> list[int]:
    return list(range(start, start + pages * PS))


def insert(cache, allocator, tokens: list[int]) -> int:
    key = RadixKey(array("q", tokens))
    return cache.insert(InsertParams(key=key, value=allocator.alloc(len(tokens)))).prefix_len


def best(cache, tokens: list[int]):
    return cache.match_prefix(MatchPrefixParams(key=RadixKey(array("q", tokens))))


def host_insert(cache, anchor_tokens: list[int], tokens: list[int]) -> tuple:
    """SGLang's storage prefetch hands the tree a host copy of `tokens` below the node that
    ends `anchor_tokens` (the root when empty)."""
    node = best(cache, anchor_tokens).best_match_node if anchor_tokens else cache.root_node_handle()
    host = cache.cache_controller.mem_pool_host.alloc(len(tokens))
    hashes = [f"page{t}" for t in tokens[::PS]]
    r = cache.tree_core.insert_host(node, RadixKey(array("q", tokens)), host, hashes)
    if r.host_insert_dropped:
        cache.cache_controller.mem_pool_host.free(host)
    return r.prefix_len, r.total_len, r.inserted_host_node is not None, r.host_insert_dropped


def script(cache, allocator) -> list:
    """One call sequence; every step's result and the tree after it, free of node ids."""
    a, b = seq(100, 3), seq(100, 2) + seq(500, 2)
    out = []

    def step(name, result):
        out.append((name, result, tree_state(cache)))

    for tokens in (a, b, a, b):  # twice: a second hit backs up under the selective policy
        step("insert", insert(cache, allocator, tokens))
    cache.check_hicache_events()  # the backups acked: every node is on the host
    step("evict all", cache.evict(EvictParams(num_tokens=10**6)).num_tokens_evicted)
    m = best(cache, a)
    step("match a", (m.device_prefix_len, m.host_hit_length))
    lock = cache.inc_host_lock_ref(m.best_match_node)
    step("host evict, a pinned", cache.evict_host(10**6))
    cache.dec_host_lock_ref(m.best_match_node, lock.to_dec_params())
    step("host prefetch below a", host_insert(cache, a, seq(900, 2)))
    step("prefetch over a, split", host_insert(cache, [], seq(100, 2) + seq(700, 1)))
    step("prefetch refills nothing", host_insert(cache, [], a))
    m = best(cache, a + seq(900, 2))
    step("match prefetched", (m.device_prefix_len, m.host_hit_length))
    loaded = load_back(cache, m.best_match_node)
    m = best(cache, a + seq(900, 2))
    step("load back prefetched", (loaded, m.device_prefix_len))
    step("host evict all", cache.evict_host(10**6))
    step("insert c (unbacked)", insert(cache, allocator, seq(300, 2)))
    step("prefetch below unbacked c", host_insert(cache, seq(300, 2), seq(800, 1)))
    d = seq(600, 2)
    evict = EvictParams(num_tokens=10**6)
    insert_and_evict_with_host_full(cache, step, lambda: insert(cache, allocator, d), evict)
    return out


@pytest.mark.parametrize("write_policy", ["write_through", "write_through_selective", "write_back"])
def test_host_methods_in_lock_step(write_policy):
    trace = scripted_in_lock_step(CFG, write_policy, script, tree_state)
    steps = dict((name, result) for name, result, _ in trace)
    assert steps["host evict, a pinned"] > 0 and steps["match a"][1] > 0
    assert steps["load back prefetched"][0]
    if write_policy == "write_through_selective":
        assert steps["prefetch below unbacked c"][3]  # dropped: its anchor has no host copy
    evicted, _, drops = steps["evict all, host full"]
    assert evicted > 0 and (drops > 0) == (write_policy == "write_back")


@pytest.mark.parametrize("label", ["FULL_SWA_ps4_sw4", "FULL_SWA_MAMBA_ps64_sw64"])
def test_swa_write_back_starts_and_what_it_does_not_cover_is_refused_by_name(label):
    """SWA host windows under write-back are covered (`test_sglang_hicache_swa.py`); the
    buffer-mode SWA steps still are not."""
    cfg = next(c for c in CONFIGS if c.label == label)
    with cpu_hicache():
        cache, _, _ = build_hicache_cache(cfg, "uniradix", "write_back")
        try:
            core = cache.tree_core
            assert core.is_write_back and core.enable_hicache
            for method in ("attach_swa_window", "swa_tombstone_ranges"):
                with pytest.raises(NotImplementedError, match=method):
                    getattr(core, method)(cache.root_node_handle())
        finally:
            cache.release_host_resources()


def test_swa_host_setting_not_covered_is_refused_by_name():
    """SGLang's device-only SWA ring, set on a live core (L3 storage of an SWA cache is
    covered: `test_sglang_hicache_aux_storage.py`)."""
    cfg = next(c for c in CONFIGS if c.label == "FULL_SWA_ps4_sw4")
    with cpu_hicache():
        cache, _, _ = build_hicache_cache(cfg, "uniradix", "write_through")
        try:
            core = cache.tree_core
            assert core.has_swa_host_pool  # SGLang's cache gave the core its SWA host pool
            with pytest.raises(NotImplementedError, match="device-only SWA ring"):
                core.has_swa_host_pool = False
        finally:
            cache.release_host_resources()
