"""A component from outside the package (`examples/sidecar_component.py`: one entry per 128
tokens in its own pool) takes part in match, split, insert, lock, cascade eviction and the
invariant checks, through the public API, and the package never names it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from examples.sidecar_component import BLOCK, NAME, SidecarComponent
from uniradix import CacheConfig, EvictParams, InsertParams, MatchPrefixParams, RadixKey
from uniradix.cache.controller import UnifiedRadixCache
from uniradix.components.base import TreeComponent
from uniradix.components.full import FullComponent
from uniradix.components.registry import DEFAULT_REGISTRY, ComponentRegistry
from uniradix.factory import build_cache
from uniradix.memory.allocator import TokenSlotAllocator
from uniradix.tree.lru import LRUList
from uniradix.tree.node import TreeNode
from uniradix.types import ComponentType

ENTRIES = 16


def make(
    hybrid: bool = False, entries: int = ENTRIES
) -> tuple[UnifiedRadixCache, TokenSlotAllocator]:
    pool = TokenSlotAllocator(entries)
    # LRU order of SWA windows: the tests pick victims by their place in the LRU list.
    sizes: dict[str, object] = {
        "sliding_window": 64,
        "swa_tokens": 2048,
        "mamba_slots": 8,
        "swa_eviction_policy": "lru",
    }
    sizes = sizes if hybrid else {}
    config = CacheConfig.of(full_tokens=2048, max_context_len=1024, **sizes)  # type: ignore[arg-type]
    return build_cache(config, extra_components=[(NAME, pool)]), pool


def put(
    cache: UnifiedRadixCache, pool: TokenSlotAllocator, tokens: list[int], state: bool = False
) -> tuple[TreeNode, torch.Tensor]:
    """Inserts `tokens` with fresh full slots and fresh entries (one per whole block)."""
    value = cache.pools.kv_allocator.alloc(len(tokens))
    entries = pool.alloc(len(tokens) // BLOCK) if len(tokens) >= BLOCK else torch.empty(0).long()
    assert value is not None and entries is not None
    mamba = cache.pools.mamba.allocator.alloc(1) if state and cache.pools.mamba else None
    params = InsertParams(RadixKey(tokens), value, mamba_value=mamba, extra_values={NAME: entries})
    return cache.insert(params).last_device_node, entries


def entries_of(cache: UnifiedRadixCache, node: TreeNode) -> list[int] | None:
    value = node.data[cache.component(NAME).index].value
    return None if value is None else value.tolist()


def test_match_stops_only_at_multiples_of_the_block() -> None:
    cache, pool = make()
    put(cache, pool, list(range(300)))
    for length, hit in ((300, 256), (256, 256), (200, 128), (100, 0)):
        match = cache.match_prefix(MatchPrefixParams(RadixKey(list(range(length)))))
        assert (match.device_prefix_len, match.full_kv_hit_length) == (hit, length)
    cache.check_invariants({"full": 0, NAME: 0})


def test_insert_splits_at_block_boundaries_and_split_moves_entries() -> None:
    cache, pool = make()
    leaf, entries = put(cache, pool, list(range(300)))
    chain = [leaf, leaf.parent, leaf.parent.parent]  # type: ignore[union-attr]
    assert [n.num_tokens for n in chain] == [44, 128, 128]  # type: ignore[union-attr]
    assert [entries_of(cache, n) for n in chain] == [[], entries[1:].tolist(), entries[:1].tolist()]
    cache.match_prefix(MatchPrefixParams(RadixKey([*range(200), 7])))  # splits (128, 256]
    middle = leaf.parent
    assert middle is not None and middle.num_tokens == 56
    assert entries_of(cache, middle) == entries[1:].tolist()  # block [128, 256) ends here
    assert entries_of(cache, middle.parent) == []  # type: ignore[arg-type]
    cache.check_invariants({"full": 0, NAME: 0})


def test_insert_frees_duplicate_entries_and_recovers_dropped_ones() -> None:
    cache, pool = make()
    put(cache, pool, list(range(256)))
    leaf, _ = put(cache, pool, list(range(384)))
    first = leaf.parent.parent  # type: ignore[union-attr]
    assert first is not None and cache.tree.prefix_len(first) == 128
    free = pool.available_size()
    put(cache, pool, list(range(384)))  # same key: the new entries are duplicates
    assert pool.available_size() == free
    make_least_recent(cache.component(NAME).lru, first)
    assert cache.evict(EvictParams(extra={NAME: 1})).extra_evicted == {NAME: 1}
    assert entries_of(cache, first) is None and first.parent is not None  # KV stays
    assert cache.match_prefix(MatchPrefixParams(RadixKey(list(range(384))))).device_prefix_len == 0
    _, fresh = put(cache, pool, list(range(256)))
    assert entries_of(cache, first) == fresh[:1].tolist()  # recovered from the insert
    # one entry evicted, fresh[0] adopted, fresh[1] freed as a duplicate
    assert pool.available_size() == free
    hit = cache.match_prefix(MatchPrefixParams(RadixKey(list(range(384))))).device_prefix_len
    assert hit == 384
    cache.check_invariants({"full": 0, NAME: 0})


def make_least_recent(lru: LRUList, target: TreeNode) -> None:
    for node in reversed(list(lru)):  # least recent first, each to the front: order kept
        if node is not target:
            lru.move_to_mru(node)


def test_lock_protects_the_entries_of_the_whole_path() -> None:
    cache, pool = make()
    put(cache, pool, list(range(256)))
    leaf, _ = put(cache, pool, [*range(256), *range(1000, 1128)])
    receipt = cache.inc_lock_ref(leaf)
    assert (cache.protected_size(NAME), cache.evictable_size(NAME)) == (3, 0)
    assert cache.evict(EvictParams(extra={NAME: 3})).extra_evicted == {NAME: 0}
    cache.dec_lock_ref(leaf, receipt)
    assert (cache.protected_size(NAME), cache.evictable_size(NAME)) == (0, 3)
    cache.check_invariants({"full": 0, NAME: 0})


def _internal_with_everything(
    cache: UnifiedRadixCache, pool: TokenSlotAllocator, base: int
) -> TreeNode:
    """A node ending at 256 that holds SWA KV, an entry and a Mamba state, with a child."""
    leaf, _ = put(cache, pool, list(range(base, base + 256)), state=True)
    put(cache, pool, [*range(base, base + 256), *range(base + 500, base + 628)], state=True)
    assert leaf.children and cache.tree.prefix_len(leaf) == 256
    return leaf


def test_cascade_swa_drops_entries_entries_drop_mamba_and_leaves_go_whole() -> None:
    cache, pool = make(hybrid=True)
    swa, mamba = cache.component(ComponentType.SWA), cache.component(ComponentType.MAMBA)
    side = cache.component(NAME)
    assert swa.eviction_priority(False) > side.eviction_priority(False)
    assert side.eviction_priority(False) > mamba.eviction_priority(False)
    a = _internal_with_everything(cache, pool, 0)
    assert swa.has_value(a) and side.has_value(a) and mamba.has_value(a)
    make_least_recent(side.lru, a)
    cache.evict(EvictParams(extra={NAME: 1}))  # entries: the Mamba state goes, SWA stays
    assert entries_of(cache, a) is None and not mamba.has_value(a) and swa.has_value(a)
    cache.check_invariants()
    b = _internal_with_everything(cache, pool, 5000)
    make_least_recent(swa.lru, b)
    cache.evict(EvictParams(swa_num_tokens=1))  # SWA: the entries and the state go with it
    assert not swa.has_value(b) and entries_of(cache, b) is None and not mamba.has_value(b)
    assert b.data[0].value is not None  # full KV stays (internal)
    cache.check_invariants()
    cache.evict(EvictParams(num_tokens=2048))  # leaves go whole: every pool comes back
    assert pool.available_size() == pool.capacity and cache.total_size() == 0
    cache.check_invariants({"full": 0, "swa": 0, "mamba": 0, NAME: 0, "req": 0})


def test_check_invariants_sees_the_extra_pool() -> None:
    cache, pool = make()
    put(cache, pool, list(range(256)))
    leaked = pool.alloc(1)
    assert leaked is not None
    with pytest.raises(Exception, match=f"{NAME}: free"):
        cache.check_invariants({"full": 0, NAME: 0})
    cache.check_invariants({"full": 0, NAME: 1})


def test_bad_entry_count_is_rejected_before_anything_changes() -> None:
    cache, pool = make()
    value = cache.pools.kv_allocator.alloc(256)
    entries = pool.alloc(1)
    with pytest.raises(ValueError, match="1 entries for 256 tokens"):
        cache.insert(InsertParams(RadixKey(list(range(256))), value, extra_values={NAME: entries}))
    assert cache.total_size() == 0


def test_registry_by_name_by_object_and_by_class() -> None:
    assert DEFAULT_REGISTRY.resolve(NAME) is SidecarComponent
    own = ComponentRegistry()
    with pytest.raises(ValueError, match="no component registered as 'sidecar'"):
        own.resolve(NAME)
    own.register(SidecarComponent, "compressed")
    assert own.resolve("compressed") is SidecarComponent
    assert own.resolve("swa").component_type is ComponentType.SWA  # built-ins always resolve
    with pytest.raises(ValueError, match="already registered"):
        own.register(FullComponent, "compressed")
    with pytest.raises(ValueError, match="built-in"):
        own.register(SidecarComponent, "mamba")
    with pytest.raises(TypeError, match="subclass TreeComponent"):
        own.register(int, "x")  # type: ignore[type-var]
    cache, _ = make()
    direct = UnifiedRadixCache(cache.pools, cache.settings, (ComponentType.FULL, SidecarComponent))
    assert isinstance(direct.component(NAME), SidecarComponent)
    assert isinstance(direct.component("full"), TreeComponent)


def test_no_file_of_the_package_names_the_example() -> None:
    package = Path(__file__).resolve().parents[2] / "uniradix"
    tree_files = list((package / "tree").glob("*.py"))
    assert tree_files
    for path in package.rglob("*.py"):
        assert NAME not in path.read_text().lower(), path
    assert np.all([NAME not in p.read_text() for p in tree_files])


@pytest.mark.parametrize("with_sessions", [False, True])
def test_cascade_spares_covered_entries_when_the_swa_trigger_is_not_covered(
    with_sessions: bool,
) -> None:
    pool = TokenSlotAllocator(ENTRIES)
    config = CacheConfig.of(
        full_tokens=2048,
        max_context_len=1024,
        sliding_window=16,
        swa_tokens=2048,
        enable_session_cache=with_sessions,
        swa_eviction_policy="lru",  # the victim is picked by its place in the LRU list
    )
    cache = build_cache(config, extra_components=[(NAME, pool)])
    leaf, _ = put(cache, pool, list(range(640)))
    swa = cache.component(ComponentType.SWA)
    x = leaf
    while cache.tree.prefix_len(x) != 256:
        x = x.parent  # type: ignore[assignment]
    assert swa.has_value(x) and entries_of(cache, x)
    if with_sessions:
        cache.sessions.register("agent", leaf)  # Full and entries: the path; SWA: the window
        assert cache.sessions.is_covered(x, cache.component(NAME).index)
        assert not cache.sessions.is_covered(x, swa.index)
    make_least_recent(swa.lru, x)
    cache.evict(EvictParams(swa_num_tokens=1))
    assert not swa.has_value(x)  # the SWA KV far behind the window goes either way
    hit = cache.match_prefix(MatchPrefixParams(RadixKey(list(range(640))))).device_prefix_len
    if with_sessions:
        assert entries_of(cache, x) is not None and hit == 640  # covered entries spared
    else:
        assert entries_of(cache, x) is None and hit == 128  # cascaded: the path is broken
    cache.check_invariants({"full": 0, "swa": 0, NAME: 0})
