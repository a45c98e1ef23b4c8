"""`benchmarks.swa_oracle`'s next use of an SWA node: the first request from the clock
on whose full-only match ends within one window below the node's end (or inside the node),
holding the node's prefix."""

from benchmarks.swa_oracle import NEVER, SWAOracle
from uniradix import CacheConfig, InsertParams, RadixKey, build_cache
from uniradix.sim.replay import ReplayOptions, load_specs
from uniradix.tree.node import TreeNode

OPTIONS = ReplayOptions.of(workload="random", page_size=16, max_requests=3)


def node_ending_at(leaf: TreeNode, end: int) -> TreeNode:
    node, prefix = leaf, sum(n.num_tokens for n in _path(leaf))
    while prefix != end:
        prefix -= node.num_tokens
        assert node.parent is not None
        node = node.parent
    return node


def _path(node: TreeNode) -> list[TreeNode]:
    out = []
    while node.parent is not None:
        out.append(node)
        node = node.parent
    return out


def test_next_use_is_the_request_whose_window_holds_the_node() -> None:
    """Request 2's match ends at 64 (window 32): the nodes ending at 48 and 64 on its path
    are used by it, the one ending at 96 (past the match end) and the one ending at 16 (more
    than a window below) are not; once the clock passes request 2, nothing is."""
    tokens = [int(t) for t in load_specs(OPTIONS)[2].prompt.token_ids()[:96]]
    cache = build_cache(CacheConfig.of(full_tokens=512))
    value = cache.pools.kv_allocator.alloc(96)
    assert value is not None
    leaf = cache.insert(InsertParams(RadixKey(tokens), value)).last_device_node
    for end in (16, 48, 64):  # split the path there
        other = cache.pools.kv_allocator.alloc(end + 16)
        assert other is not None
        cache.insert(InsertParams(RadixKey([*tokens[:end], -1 - end] + [0] * 15), other))
    oracle = SWAOracle(OPTIONS, {2: 64}, window=32)
    uses = {end: oracle.next_use(node_ending_at(leaf, end)) for end in (16, 48, 64, 96)}
    assert uses == {16: NEVER, 48: 2, 64: 2, 96: NEVER}
    oracle.clock = 3
    assert oracle.next_use(node_ending_at(leaf, 64)) == NEVER


def test_a_match_ending_inside_a_node_uses_it() -> None:
    """Request 1's match ends at 48 (window 16), inside the node [32, 96): that node is used,
    the one ending at 32 (its window is [32, 48)) is not."""
    tokens = [int(t) for t in load_specs(OPTIONS)[1].prompt.token_ids()[:96]]
    cache = build_cache(CacheConfig.of(full_tokens=512))
    value = cache.pools.kv_allocator.alloc(96)
    assert value is not None
    leaf = cache.insert(InsertParams(RadixKey(tokens), value)).last_device_node
    other = cache.pools.kv_allocator.alloc(48)
    assert other is not None
    cache.insert(InsertParams(RadixKey([*tokens[:32], -7] + [0] * 15), other))
    oracle = SWAOracle(OPTIONS, {1: 48}, window=16)
    assert oracle.next_use(leaf) == 1
    assert oracle.next_use(node_ending_at(leaf, 32)) == NEVER
