"""SGLang's own `UnifiedRadixCache` on the "uniradix" TreeCore gives the same results as on
SGLang's Python core: the same request stream (match, lock, allocate with eviction, insert,
unlock) through both, compared call by call (prefix lengths, prefix slots, evictions, pool
and tree sizes), for every FULL page size of SGLang's conformance configs."""

from __future__ import annotations

import os
import random
from array import array

import pytest

from tests.integrations.sglang_env import load_sglang

load_sglang()

import torch  # noqa: E402
from sglang.srt.mem_cache.base_prefix_cache import (  # noqa: E402
    EvictParams,
    InsertParams,
    MatchPrefixParams,
)
from sglang.srt.mem_cache.radix_cache import RadixKey  # noqa: E402

import uniradix.integrations.sglang as integration  # noqa: E402
from benchmarks.peer.sglang_driver import build_cache  # noqa: E402

# The page sizes of the FULL configs of SGLang's conformance kit
# (sglang/test/kits/unified_radix_cache/config.py; importing it needs SGLang's benchmark deps).
FULL_PAGE_SIZES = (1, 4, 16, 64, 128)
POOL_PAGES = 24


def build(core: str, page_size: int, config: str = "full"):
    """SGLang reads the core's name from the environment when it builds the cache."""
    os.environ["SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND"] = core
    try:
        return build_cache(config, page_size, POOL_PAGES * page_size)
    finally:
        os.environ["SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND"] = "python"


def stream(page_size: int, n: int, seed: int):
    """Requests sharing a few prefixes, with fresh tails; lengths in whole pages."""
    rng = random.Random(seed)
    prefixes = [
        [rng.randrange(1000) for _ in range(page_size * rng.randint(1, 4))] for _ in range(4)
    ]
    for _ in range(n):
        tail = [rng.randrange(1000) for _ in range(page_size * rng.randint(1, 3))]
        yield rng.choice(prefixes) + tail


def make_room(cache, allocator, need: int) -> tuple:
    """Evicts what `need` slots lack, as SGLang's scheduler does, then allocates them:
    (the slots, or None where the rest is locked, and the tokens evicted)."""
    evicted = 0
    if allocator.available_size() < need:
        evicted = cache.evict(EvictParams(num_tokens=need - allocator.available_size()))
        evicted = evicted.num_tokens_evicted
    return allocator.alloc(need), evicted


def play(cache, page_size: int, n: int = 120, seed: int = 0) -> list[tuple]:
    allocator = cache.token_to_kv_pool_allocator
    trace = []
    for tokens in stream(page_size, n, seed):
        key = RadixKey(array("q", tokens))
        m = cache.match_prefix(MatchPrefixParams(key=key))
        prefix = cache.path_device_indices(m.last_device_node)[: m.device_prefix_len]
        lock = cache.inc_lock_ref(m.last_device_node)
        need = len(tokens) - m.device_prefix_len
        new, evicted = make_room(cache, allocator, need)
        if new is None:  # everything else is locked or the pool is too small: skip
            cache.dec_lock_ref(m.last_device_node, lock.to_dec_params())
            trace.append(("skip", m.device_prefix_len))
            continue
        value = torch.cat([prefix, new])
        r = cache.insert(InsertParams(key=key, value=value, prev_prefix_len=m.device_prefix_len))
        cache.dec_lock_ref(m.last_device_node, lock.to_dec_params())
        cache.tree_core.sanity_check([], [])
        trace.append(
            (
                m.device_prefix_len,
                prefix.tolist(),
                lock.delta,
                evicted,
                r.prefix_len,
                allocator.available_size(),
                cache.evictable_size(),
                cache.protected_size(),
            )
        )
    return trace


@pytest.mark.parametrize("page_size", FULL_PAGE_SIZES)
def test_uniradix_core_matches_the_python_core_call_by_call(page_size):
    python_cache, uniradix_cache = build("python", page_size), build("uniradix", page_size)
    assert type(uniradix_cache.tree_core) is integration.UniradixTreeCore
    assert type(python_cache.tree_core).__name__ == "UnifiedTreeCore"
    expected = play(python_cache, page_size)
    assert any(step[0] > 0 for step in expected) and any(step[3] > 0 for step in expected)
    assert play(uniradix_cache, page_size) == expected


def test_unsupported_configurations_are_refused_with_the_reason():
    from types import SimpleNamespace

    from sglang.srt.mem_cache.unified_cache.component_type import ComponentType as CT

    from uniradix.integrations.sglang.refused import check_supported

    with pytest.raises(
        ValueError, match=r"SWA and/or MAMBA, in that order, got \['FULL', 'C128'\]"
    ):
        check_supported(SimpleNamespace(tree_components=(CT.FULL, CT.C128)))
    session = SimpleNamespace(tree_components=(CT.FULL,), enable_session_radix_cache=True)
    with pytest.raises(ValueError, match=r"session-aware caching \(enable_session_radix_cache"):
        check_supported(session)
    with pytest.raises(ValueError, match=r"EAGLE bigram keys \(is_eagle=True\)"):
        check_supported(SimpleNamespace(tree_components=(CT.FULL, CT.SWA), is_eagle=True))
    # As SGLang's cores do, a Mamba cache keys EAGLE requests by tokens: accepted.
    check_supported(SimpleNamespace(tree_components=(CT.FULL, CT.MAMBA), is_eagle=True))
    cache = build("uniradix", 1)
    with pytest.raises(NotImplementedError, match="snapshot_buffer_backup needs SGLang's buffer"):
        cache.tree_core.snapshot_buffer_backup(cache.root_node_handle(), False)


def test_sglang_plugin_entry_point_registers_the_backend():
    from importlib.metadata import entry_points

    from sglang.srt.mem_cache.unified_cache.tree_core_registry import registered_tree_core_backends

    (ep,) = [e for e in entry_points(group="sglang.srt.plugins") if e.name == "uniradix"]
    ep.load()()  # what SGLang's load_plugins does; registering twice is harmless
    assert "uniradix" in registered_tree_core_backends()


def test_sglang_cores_benchmark_runs_and_checks_the_cores_agree(tmp_path):
    """benchmarks/sglang_cores.py at a tiny scale: every core built as asked, equal hit
    rates and KV events (the run exits otherwise) on FULL, FULL+SWA and FULL+Mamba caches,
    a table with every shown op."""
    from benchmarks import sglang_cores

    out = tmp_path / "cores.md"
    sglang_cores.main(["--workloads", "chat", "--configs", "full,full+swa,full+mamba",
                       "--scale", "0.05", "--pool-tokens", "2048", "--out", str(out)])  # fmt: skip
    text = out.read_text()
    assert "uniradix=UniradixTreeCore" in text and "python=UnifiedTreeCore" in text
    for config in ("full", "full+swa", "full+mamba"):
        assert all(f"| chat | {config} | 1 | {op} |" in text for op in sglang_cores.SHOWN_OPS)


def test_a_receipt_released_on_another_node_is_refused_as_sglangs_cores_do():
    """SGLang's kit expects a protocol violation (AssertionError or RuntimeError naming the
    anchor); uniradix's rule asks ValueError for bad input: the error is both."""
    cache = build("uniradix", 1)
    allocator = cache.token_to_kv_pool_allocator
    leaves = []
    for tokens in ([1, 2, 3], [7, 8, 9]):
        key = RadixKey(array("q", tokens))
        cache.insert(InsertParams(key=key, value=allocator.alloc(3)))
        leaves.append(cache.match_prefix(MatchPrefixParams(key=key)).last_device_node)
    receipt = cache.inc_lock_ref(leaves[0]).to_dec_params()
    before = (cache.evictable_size(), cache.protected_size())
    for error in (ValueError, RuntimeError):
        with pytest.raises(error, match=f"lock receipt anchored on node {leaves[0]}"):
            cache.dec_lock_ref(leaves[1], receipt)
    assert (cache.evictable_size(), cache.protected_size()) == before
    cache.dec_lock_ref(leaves[0], receipt)
    assert cache.protected_size() == 0
