"""L3 on hybrid caches (full+SWA+Mamba), exact: which SWA window pages and Mamba states a
backup stores, and the resumable-boundary rule of a prefetch (only up to the deepest page
boundary where every component can resume; the rest is not fetched, and counted), the new
host-only nodes' window and state, and `insert_host`'s checks of its aux argument."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from tests.helpers import alloc
from uniradix import (
    CacheConfig,
    InsertParams,
    MatchPrefixParams,
    RadixKey,
    build_cache,
)
from uniradix.storage.file_backend import FileBackend
from uniradix.tiers.controller import HostTier
from uniradix.tiers.host_aux import HostAux
from uniradix.tiers.storage_tier import StorageTier

PAGE, WINDOW = 4, 4  # the window is 1 page
FULL, SWA, MAMBA = 0, 1, 2


def _cache(directory: Path, **kw: object) -> tuple[HostTier, StorageTier]:
    cache = build_cache(
        CacheConfig.of(
            page_size=PAGE,
            full_tokens=64,
            sliding_window=WINDOW,
            swa_tokens=64,
            mamba_slots=8,
            mamba_extra_buffer=True,
            host_tokens=256,
            max_context_len=64,
            storage_backend=FileBackend(directory),
            prefetch_threshold=PAGE,
            **kw,  # type: ignore[arg-type]
        )
    )
    tier = cache.host_tier
    assert isinstance(tier, HostTier) and tier.storage is not None
    return tier, tier.storage


def _write_chain(directory: Path) -> None:
    """[1..16] (state at 16) -> [17..24] (state at 24), backed up to host and L3."""
    tier, storage = _cache(directory)
    cache = tier.cache
    full = alloc(cache, 24)
    mamba = cache.pools.mamba.allocator
    cache.insert(
        InsertParams(
            RadixKey(list(range(1, 17))), full[:16], mamba_value=torch.tensor([mamba.alloc_one()])
        )
    )
    cache.insert(
        InsertParams(
            RadixKey(list(range(1, 25))),
            full,
            prev_prefix_len=16,
            mamba_value=torch.tensor([mamba.alloc_one()]),
        )
    )
    tier.drain()
    storage.flush()
    cache.check_invariants()
    assert storage.stats.stored_pages == 6
    assert storage.stats.aux_stored_pages == {"swa": 4, "mamba": 2}
    tier.close()


def _stored(storage: StorageTier, pool: str, num_pages: int) -> list[int]:
    """Indices of the pages of [1..num_pages*PAGE] whose `pool` entry is in the store."""
    keys = storage.keyspace.keys_for(RadixKey(list(range(1, num_pages * PAGE + 1))))
    assert storage.aux is not None
    space = {
        "full": storage.keyspace,
        "swa": storage.aux.swa_keyspace,
        "mamba": storage.aux.mamba_keyspace,
    }[pool]
    return [i for i, k in enumerate(keys) if storage.backend.batch_exists(space.same_pages([k]))]


def test_backup_stores_each_nodes_trailing_window_pages_and_its_end_state(tmp_path: Path) -> None:
    _write_chain(tmp_path)
    _tier, storage = _cache(tmp_path)
    assert _stored(storage, "full", 6) == [0, 1, 2, 3, 4, 5]
    # The tree splits where a window starts: [1..12] [13..16] | [17..20] [21..24]; each
    # node's last page (the window) is stored, so not pages 0 and 1 of the 12-token node.
    assert _stored(storage, "swa", 6) == [2, 3, 4, 5]
    assert _stored(storage, "mamba", 6) == [3, 5]  # after page 3 (token 16) and 5 (24)
    _tier.close()


def _host_nodes(tier: HostTier) -> list[tuple[int, bool, bool]]:
    """(tokens, has SWA host copy, has Mamba host copy) of each node on the root's path,
    root-first."""
    out, node = [], tier.cache.tree.root
    while node.children:
        (node,) = node.children.values()
        d = node.data
        assert d[FULL].value is None and d[FULL].host_value is not None
        out.append(
            (node.num_tokens, d[SWA].host_value is not None, d[MAMBA].host_value is not None)
        )
    return out


def test_prefetch_fetches_to_the_deepest_resumable_boundary_with_window_and_state(
    tmp_path: Path,
) -> None:
    _write_chain(tmp_path)
    tier, storage = _cache(tmp_path)
    key = RadixKey(list(range(1, 25)))
    assert storage.prefetch(key) == 24
    # One host-only leaf, split where the window starts: the window and the state at its end.
    assert _host_nodes(tier) == [(20, False, False), (4, True, True)]
    assert tier.host_pools.aux["swa"].used_size() == 4
    assert tier.host_pools.aux["mamba"].used_size() == 1
    m = tier.cache.match_prefix(MatchPrefixParams(key))
    assert m.host_hit_length == 24 and m.mamba_host_hit_length == 1
    assert storage.stats.unresumable_pages == 0
    tier.cache.check_invariants()
    tier.close()


def test_a_boundary_without_its_state_is_not_fetched_and_counted(tmp_path: Path) -> None:
    _write_chain(tmp_path)
    tier, storage = _cache(tmp_path)
    assert storage.aux is not None
    key = storage.keyspace.keys_for(RadixKey(list(range(1, 25))))[5]
    assert storage.backend.delete(storage.aux.mamba_keyspace.same_pages([key])) == 1
    assert storage.prefetch(RadixKey(list(range(1, 25)))) == 16  # resumes at 16 only
    assert storage.stats.unresumable_pages == 2
    assert _host_nodes(tier) == [(12, False, False), (4, True, True)]
    tier.cache.check_invariants()
    tier.close()


def test_a_window_page_missing_below_every_state_leaves_nothing_resumable(
    tmp_path: Path,
) -> None:
    _write_chain(tmp_path)
    tier, storage = _cache(tmp_path)
    assert storage.aux is not None
    keys = storage.keyspace.keys_for(RadixKey(list(range(1, 25))))
    # Page 5 is the window of the state at 24, page 3 that of the state at 16.
    gone = storage.aux.swa_keyspace.same_pages([keys[3], keys[5]])
    assert storage.backend.delete(gone) == 2
    before = tier.host_pools.available()
    assert storage.prefetch(RadixKey(list(range(1, 25)))) == 0
    assert storage.stats.unresumable_pages == 6 and storage.stats.fetched_tokens == 0
    assert tier.host_pools.available() == before and storage.reserved_tokens == 0
    assert not tier.cache.tree.root.children
    tier.cache.check_invariants()
    tier.close()


def test_insert_host_rejects_bad_aux_and_keeps_the_callers_slots(tmp_path: Path) -> None:
    tier, _storage = _cache(tmp_path)
    key = RadixKey(list(range(1, 9)))
    full = tier.alloc_host(8)
    swa_pool, mamba_pool = tier.host_pools.aux["swa"], tier.host_pools.aux["mamba"]
    swa = swa_pool.alloc(4)
    assert full is not None and swa is not None
    bad = [
        (HostAux(swa=np.asarray(swa)[:3]), "whole pages"),  # not whole pages
        (HostAux(mamba=np.asarray([1, 2])), "one state slot"),
        (HostAux(mamba=np.asarray([mamba_pool.capacity])), "not allocated"),
    ]
    for aux, message in bad:
        with pytest.raises(ValueError, match=message):
            tier.insert_host(key, full, 0, aux)
    assert not tier.cache.tree.root.children
    assert swa_pool.is_allocated(np.asarray(swa)).all()  # still the caller's
    # Good input: the leaf splits where the window (its last page) starts and takes it.
    assert tier.insert_host(key, full, 0, HostAux(swa=swa)) == 8
    assert _host_nodes(tier) == [(4, False, False), (4, True, False)]
    tier.cache.check_invariants()
    tier.evict_host(tier.full.host_tokens)
    assert swa_pool.available_size() == swa_pool.capacity
    assert tier.host_pools.full.available_size() == tier.host_pools.full.capacity
    tier.close()
