"""The scheduling walks of SGLang's TreeCore interface on the uniradix core, against SGLang's
Python core on the same request stream: `dfs_weight_order` (SGLang's `dfs-weight` schedule
policy orders its waiting queue by it) gives the same order, and `collect_path_info` the same
root paths, for waiting queues of requests' last matched nodes taken all along the stream
(full attention at pages 1 and 16, FULL+SWA and FULL+Mamba at page 1)."""

from __future__ import annotations

import random
from array import array

import pytest

from tests.integrations.sglang_env import load_sglang

load_sglang()

import torch  # noqa: E402
from sglang.srt.mem_cache.base_prefix_cache import InsertParams, MatchPrefixParams  # noqa: E402
from sglang.srt.mem_cache.radix_cache import RadixKey  # noqa: E402

from tests.integrations.sglang_hybrid_stream import Pools, _alloc  # noqa: E402
from tests.integrations.test_sglang_core import build, stream  # noqa: E402


def play(cache, page_size: int, n: int = 90, seed: int = 3) -> list[tuple]:
    """Serves the stream; every 6 requests, a waiting queue of 10 earlier keys (repeats
    included) is matched and ordered, and its nodes' root paths are read."""
    pools, core = Pools(cache), cache.tree_core
    rng = random.Random(seed)
    seen: list[list[int]] = []
    out: list[tuple] = []
    for i, tokens in enumerate(stream(page_size, n, seed)):
        seen.append(tokens)
        key = RadixKey(array("q", tokens))
        m = cache.match_prefix(MatchPrefixParams(key=key))
        prefix = cache.path_device_indices(m.last_device_node)[: m.device_prefix_len]
        lock = cache.inc_lock_ref(m.last_device_node)
        need = len(tokens) - m.device_prefix_len
        pools.make_room(cache, need)
        new = _alloc(pools.kv, need, page_size)
        state = None if pools.mamba is None or new is None else pools.mamba.alloc(1)
        if new is not None and (pools.mamba is None or state is not None):
            value = torch.cat([prefix, new])
            params = InsertParams(
                key=key, value=value, prev_prefix_len=m.device_prefix_len, mamba_value=state
            )
            r = cache.insert(params)
            if state is not None and r.mamba_exist:  # the node kept its own state
                pools.mamba.free(state)
        elif new is not None:
            pools.kv.free(new)
        cache.dec_lock_ref(m.last_device_node, lock.to_dec_params())
        if i % 6 == 5:
            queue = [rng.choice(seen) for _ in range(10)]
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


@pytest.mark.parametrize(
    ("config", "page_size"),
    [("full", 1), ("full", 16), ("full+swa", 1), ("full+mamba", 1)],
)
def test_scheduling_walks_agree_with_the_python_core(config: str, page_size: int) -> None:
    expected = play(build("python", page_size, config), page_size)
    got = play(build("uniradix", page_size, config), page_size)
    assert len(expected) == 15
    # The queues share prefixes: orders that are not the input order, paths of several nodes.
    assert any(order != sorted(order) for order, _ in expected)
    assert any(len(path) > 1 for _, shapes in expected for path in shapes)
    assert got == expected


def test_unknown_node_is_a_key_error() -> None:
    core = build("uniradix", 1).tree_core
    with pytest.raises(KeyError):
        core.dfs_weight_order([10_000])
    with pytest.raises(KeyError):
        core.collect_path_info([10_000])
    assert core.collect_path_info([core.root_node_handle()]) == ((),)
    assert core.dfs_weight_order([core.root_node_handle()] * 3) == [0, 1, 2]
