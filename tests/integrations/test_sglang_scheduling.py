"""The tree walks of SGLang's TreeCore interface on the uniradix core, against SGLang's Python
core on the same request stream: `dfs_weight_order` (SGLang's `dfs-weight` schedule policy
orders its waiting queue by it) gives the same order, and `collect_path_info` the same root
paths, for waiting queues of requests' last matched nodes taken all along the stream; the
KV canary's sweep (`walk_for_kv_canary`) the same rows under each of its filters, taken
while a request holds its prefix, and the read-only device-prefix match
(`match_full_device_prefix`) the same tokens matched and pinned (full attention at pages 1
and 16, FULL+SWA and FULL+Mamba at page 1)."""

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

from benchmarks.peer.sglang_driver import SWA_WINDOW, build_cache  # noqa: E402
from tests.integrations.sglang_hybrid_stream import Pools, _alloc, stream  # noqa: E402
from tests.integrations.test_sglang_core import build  # noqa: E402

# Requests of up to several SWA windows (locks of the full KV reach above the window's),
# on a pool that a third of the stream fills: evictions run.
POOL_TOKENS = 4096


def play(cache, page_size: int, n: int = 90, seed: int = 3) -> list[tuple]:
    """Serves the stream; every 6 requests, the KV canary sweeps the tree while the request
    holds its prefix, then a waiting queue of 10 earlier keys (repeats included) is matched
    and ordered, and its nodes' root paths are read."""
    pools, core = Pools(cache), cache.tree_core
    rng = random.Random(seed)
    seen: list[list[int]] = []
    out: list[tuple] = []
    for i, tokens in enumerate(stream(page_size, SWA_WINDOW, n, seed)):
        seen.append(tokens)
        if pools.swa and i % 5 == 4:  # SWA leaves inner nodes: tombstones the canary skips
            cache.evict(EvictParams(swa_num_tokens=page_size * rng.randint(8, 64)))
        key = RadixKey(array("q", tokens))
        m = cache.match_prefix(MatchPrefixParams(key=key))
        prefix = cache.path_device_indices(m.last_device_node)[: m.device_prefix_len]
        lock = cache.inc_lock_ref(m.last_device_node)
        need = len(tokens) - m.device_prefix_len
        pools.make_room(cache, need)
        new = _alloc(pools.kv, need, page_size)
        state = None if pools.mamba is None or new is None else pools.mamba.alloc(1)
        inserted = new is not None and (pools.mamba is None or state is not None)
        if inserted:
            value = torch.cat([prefix, new])
            params = InsertParams(
                key=key, value=value, prev_prefix_len=m.device_prefix_len, mamba_value=state
            )
            r = cache.insert(params)
            if state is not None and r.mamba_exist:  # the node kept its own state
                pools.mamba.free(state)
        elif new is not None:
            pools.kv.free(new)
        if i % 6 == 5:  # while this request holds its prefix and what it inserted
            held = cache.inc_lock_ref(r.last_device_node) if inserted else None
            out.append(canary_walks(core))
            if held is not None:
                cache.dec_lock_ref(r.last_device_node, held.to_dec_params())
        cache.dec_lock_ref(m.last_device_node, lock.to_dec_params())
        if i % 6 == 5:
            queue = [rng.choice(seen) for _ in range(10)]
            # Read only, before the queue's matches split nodes: tokens matched and pinned.
            device = [core.match_full_device_prefix(RadixKey(array("q", q))) for q in queue]
            out.append(tuple((matched, pinned) for matched, _, pinned in device))
            nodes = [
                cache.match_prefix(MatchPrefixParams(key=RadixKey(array("q", q)))).last_device_node
                for q in queue
            ]
            paths = core.collect_path_info(nodes)
            # Node ids are each core's own: a path is compared by its spans, slots and
            # fan-out, and checked to chain parent to child from the root.
            for path in paths:
                parents = [core.root_node_handle(), *(info.node_id for info in path)]
                assert [info.parent_id for info in path] == parents[: len(path)]
            shapes = tuple(
                tuple(
                    (info.path_start, info.path_end, info.full_value_len, info.num_children)
                    for info in path
                )
                for path in paths
            )
            out.append((cache.dfs_weight_order(nodes), shapes))
    return out


def cache(core: str, config: str, page_size: int):
    os.environ["SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND"] = core
    try:
        return build_cache(config, page_size, POOL_TOKENS)
    finally:
        os.environ["SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND"] = "python"


def canary_walks(core) -> tuple:
    """The KV-canary walk under each of its filters (unlocked only: the last two), as lists
    (slots, positions, previous slots)."""
    walks = []
    for unlocked_only in (False, True):
        for swa_resident_only in (False, True):
            w = core.walk_for_kv_canary(unlocked_only, swa_resident_only)
            walks.append(
                (w.slot_indices.tolist(), w.positions.tolist(), w.prev_slot_indices.tolist())
            )
    return tuple(walks)


@pytest.mark.parametrize(
    ("config", "page_size"),
    [("full", 1), ("full", 16), ("full+swa", 1), ("full+mamba", 1)],
)
def test_tree_walks_agree_with_the_python_core(config: str, page_size: int) -> None:
    expected = play(cache("python", config, page_size), page_size)
    got = play(cache("uniradix", config, page_size), page_size)
    walks, device, queues = expected[0::3], expected[1::3], expected[2::3]
    assert len(queues) == 15
    # The queues share prefixes: orders that are not the input order, paths of several nodes.
    assert any(order != sorted(order) for order, _ in queues)
    assert any(len(path) > 1 for _, shapes in queues for path in shapes)
    # Some sweeps leave out locked nodes (fewer rows than the full sweep); all find slots.
    assert any(len(w[2][0]) < len(w[0][0]) for w in walks) and all(w[0][0] for w in walks)
    # Device-prefix matches that end inside a node (pinned past matched) and at its end.
    pairs = [pair for probe in device for pair in probe]
    assert any(p > m > 0 for m, p in pairs) and any(p == m > 0 for m, p in pairs)
    if config == "full+swa":  # and some leave out SWA tombstones
        assert any(len(w[1][0]) < len(w[0][0]) for w in walks)
    assert got == expected


def test_device_prefix_match_leaves_the_tree_as_it_is() -> None:
    cache = build("uniradix", 1)
    core = cache.tree_core
    play(cache, 1, n=30)
    nodes, time = dict(core._nodes), core.tree._time
    for tokens in stream(1, SWA_WINDOW, 30, seed=3):
        matched, node_id, pinned = core.match_full_device_prefix(RadixKey(array("q", tokens)))
        assert 0 <= matched <= pinned <= len(tokens) + core._node(node_id).num_tokens
    assert core._nodes == nodes and core.tree._time == time


def test_unknown_node_is_a_key_error() -> None:
    core = build("uniradix", 1).tree_core
    with pytest.raises(KeyError):
        core.dfs_weight_order([10_000])
    with pytest.raises(KeyError):
        core.collect_path_info([10_000])
    assert core.collect_path_info([core.root_node_handle()]) == ((),)
    assert core.dfs_weight_order([core.root_node_handle()] * 3) == [0, 1, 2]
