"""Load-back (H->D): bring a matched host-only segment back to the device.

`init_load_back(tier, node, mem_quota)`, for the host-only segment ending at `node`
(root-first `[a, b, node]` below the deepest device node `d`)::

    root ... d | a  b  node        device | host-only
                 ^ pinned against host eviction while device room is made

1. skip (nothing changes) when the segment is shorter than `load_back_threshold` units or
   longer than `mem_quota`;
2. pin the segment (`inc_host_lock_ref`) and lock `d`, so making room can neither evict the
   host copies nor the device parent;
3. allocate device slots for the segment, evicting device data first when short; when
   still short, release everything and fail (the request recomputes);
4. give the nodes their new device slots (root-first slices; they are backed now), submit
   one H->D batch and lock `node` until `loading_check` sees the ack.

The caller must not read the loaded slots before the ack (`wait_loads`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import torch

from uniradix.event_sink import MEDIUM_GPU
from uniradix.memory.allocator import to_numpy
from uniradix.tiers.transfer import CopyOp, Direction
from uniradix.tree.node import TreeNode
from uniradix.types import EvictParams, MatchResult

if TYPE_CHECKING:
    from uniradix.tiers.views import HostTierView


class LoadBackResult(NamedTuple):
    """`new_indices`: device slots of the loaded units (empty when nothing was loaded);
    `last_device_node`: `node` on success, else the deepest device node above it;
    `ticket`: the H->D batch to wait for, None when nothing was loaded."""

    new_indices: torch.Tensor
    last_device_node: TreeNode
    ticket: int | None


def init_load_back(tier: HostTierView, node: TreeNode, mem_quota: int | None) -> LoadBackResult:
    cache, full = tier.cache, tier.full
    if not isinstance(node, TreeNode) or not cache.tree.in_tree(node):
        raise ValueError(f"init_load_back: {node!r} is not a node of this cache's tree")
    if mem_quota is not None and (not isinstance(mem_quota, int) or mem_quota < 0):
        raise ValueError(f"init_load_back: mem_quota must be a non-negative int, got {mem_quota!r}")
    segment = full.host_segment(node)
    device_parent = segment[0].parent if segment else node
    assert device_parent is not None
    empty = cache.to_device(np.empty(0, np.int64))
    num = sum(n.num_tokens for n in segment)
    if num == 0:
        return LoadBackResult(empty, node, None)
    if num < tier.load_back_threshold or (mem_quota is not None and num > mem_quota):
        tier.stats.load_skipped += 1
        return LoadBackResult(empty, device_parent, None)
    full.inc_host_lock_ref(node)
    parent_lock = None if device_parent is cache.tree.root else cache.inc_lock_ref(device_parent)
    allocator = cache.pools.kv_allocator
    slots = allocator.alloc(num)
    if slots is None:
        cache.evict(EvictParams(num_tokens=num - allocator.available_size()))
        slots = allocator.alloc(num)
    full.dec_host_lock_ref(node)
    if slots is None:
        if parent_lock is not None:
            cache.dec_lock_ref(device_parent, parent_lock)
        tier.stats.load_failed += 1
        return LoadBackResult(empty, device_parent, None)
    device_slots = to_numpy(slots)
    host_values = [n.data[0].host_value for n in segment]
    src = np.concatenate(host_values) if len(host_values) > 1 else host_values[0]  # type: ignore[arg-type]
    assert src is not None
    full.commit_load_back(segment, device_slots)
    if cache.event_sink is not None:
        # Announced at submit, as the tree now holds it: the slots are locked until the data
        # lands, and a child inserted meanwhile then has its parent on the device already.
        for n in segment:
            cache.event_sink.on_stored(n, MEDIUM_GPU)
    ticket = tier.engine.submit([CopyOp("full", Direction.H2D, src, device_slots)])
    for n in segment:
        n.data[0].metadata = {"load": ticket}
    tier.loads[ticket] = (node, cache.inc_lock_ref(node))
    if parent_lock is not None:
        cache.dec_lock_ref(device_parent, parent_lock)
    tier.stats.loaded_tokens += num
    return LoadBackResult(cache.to_device(device_slots), node, ticket)


def load_back(tier: HostTierView, match: MatchResult, mem_quota: int | None) -> MatchResult:
    """`match` extended by its host hit when the load-back succeeds, else `match`."""
    if match.host_hit_length == 0 or match.last_host_node is None:
        return match
    result = init_load_back(tier, match.last_host_node, mem_quota)
    if result.ticket is None:
        return match
    indices = torch.cat([match.device_indices, result.new_indices])
    return match._replace(
        device_indices=indices,
        device_prefix_len=match.device_prefix_len + int(result.new_indices.shape[0]),
        last_device_node=result.last_device_node,
        host_hit_length=0,
    )
