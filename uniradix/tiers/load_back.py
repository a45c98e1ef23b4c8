"""Load-back (H->D): bring a matched host hit back to the device.

`init_load_back(tier, node, mem_quota, req)`, for the match ending at `node` on the host
tier (the host-only full segment `[a, b, node]` below the deepest device node `d`)::

    root ... d | a  b  node        device | host-only full KV
                 ^ pinned against host eviction while device room is made

plus, with auxiliary components, what `node` needs of them from the host: SWA the window
nodes before `node`'s end whose SWA is host-only (`HostSWAComponent.load_plan`: only the
window, nodes further up stay SWA tombstones), Mamba `node`'s state when host-only.

1. skip (nothing changes) when there is no auxiliary part and the segment is shorter than
   `load_back_threshold` units, or when it is longer than `mem_quota`;
2. pin the host data to load and lock `d`, so making room can evict neither;
3. allocate device slots: full slots for the segment, SWA slots for the window plan (mapped
   to the plan nodes' full slots), one Mamba slot; each evicting its device component first
   when short. Still short: release everything and fail (the request recomputes);
4. give the nodes their device slots, submit one H->D batch (full, SWA, Mamba: the state
   into the node's new slot *and* `req`'s own slot) and lock `node` until `loading_check`
   sees the ack.

The caller must not read the loaded slots before the ack (`wait_loads`). `load_back` (the
match-level call the scheduler uses) waits for the ack itself, so that a copy that raised
is undone at once and the request gets its device-only hit: no failure reaches the caller.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import torch

from uniradix.components.aux_host import AuxHostComponent, LoadRoom
from uniradix.event_sink import MEDIUM_GPU
from uniradix.memory.allocator import to_numpy
from uniradix.memory.swa_allocator import SWASlotAllocator
from uniradix.tiers.transfer import CopyOp, Direction
from uniradix.tree.node import TreeNode
from uniradix.types import EvictParams, FreeSlots, MatchResult, Req, Slots

if TYPE_CHECKING:
    from uniradix.tiers.views import HostTierView


class LoadBackResult(NamedTuple):
    """`new_indices`: device slots of the loaded full units (empty when nothing was loaded);
    `last_device_node`: `node` on success, else the deepest device node above it;
    `ticket`: the H->D batch to wait for, None when nothing was loaded."""

    new_indices: torch.Tensor
    last_device_node: TreeNode
    ticket: int | None
    # what auxiliary data loaded
    aux_plans: tuple[tuple[AuxHostComponent, tuple[TreeNode, ...]], ...] = ()


class _Reserved:
    """Device slots taken for one load-back, released together if it fails."""

    def __init__(self) -> None:
        self.full: Slots | None = None
        self.swa_of: list[Slots] = []  # full slots given SWA peers
        self.states: list[int] = []  # Mamba state slots
        self.aux: list[Slots] = []  # each plan's device slots, in plan order


def _concat(values: list[Any]) -> Slots:
    return np.concatenate(values) if len(values) > 1 else values[0]


def init_load_back(
    tier: HostTierView, node: TreeNode, mem_quota: int | None, req: Req | None = None
) -> LoadBackResult:
    cache, full = tier.cache, tier.full
    if not isinstance(node, TreeNode) or not cache.tree.in_tree(node):
        raise ValueError(f"init_load_back: {node!r} is not a node of this cache's tree")
    if mem_quota is not None and (not isinstance(mem_quota, int) or mem_quota < 0):
        raise ValueError(f"init_load_back: mem_quota must be a non-negative int, got {mem_quota!r}")
    segment = full.host_segment(node)
    device_parent = segment[0].parent if segment else node
    assert device_parent is not None
    empty = cache.to_device(np.empty(0, np.int64))
    found = [(c, c.load_plan(node)) for c in tier.aux]
    if any(plan is None for _, plan in found):  # the match is stale: recompute instead
        tier.stats.load_failed += 1
        return LoadBackResult(empty, device_parent, None)
    plans = [(c, plan) for c, plan in found if plan]
    num = sum(n.num_tokens for n in segment)
    if num == 0 and not plans:
        return LoadBackResult(empty, node, None)
    if (num < tier.load_back_threshold and not plans) or (
        mem_quota is not None and num > mem_quota
    ):
        tier.stats.load_skipped += 1
        return LoadBackResult(empty, device_parent, None)
    full.inc_host_lock_ref(node)
    for c, plan in plans:
        for n in plan:
            c.host.pin(n)
    parent_lock = None if device_parent is cache.tree.root else cache.inc_lock_ref(device_parent)
    reserved = _Reserved()
    ok = _reserve(tier, segment, num, plans, reserved)
    full.dec_host_lock_ref(node)
    for c, plan in plans:
        for n in plan:
            c.host.unpin(n)
    if not ok:
        _release(tier, reserved)
        if parent_lock is not None:
            cache.dec_lock_ref(device_parent, parent_lock)
        tier.stats.load_failed += 1
        return LoadBackResult(empty, device_parent, None)
    ops = _commit(tier, node, segment, plans, reserved, req)
    if cache.event_sink is not None:
        # Announced at submit, as the tree now holds it: the slots are locked until the data
        # lands, and a child inserted meanwhile then has its parent on the device already.
        for n in segment:
            cache.event_sink.on_stored(n, MEDIUM_GPU)
    ticket = tier.engine.submit(ops)
    for n in segment:
        n.data[0].metadata = {"load": ticket}
    tier.loads[ticket] = (node, cache.inc_lock_ref(node))
    if parent_lock is not None:
        cache.dec_lock_ref(device_parent, parent_lock)
    tier.stats.loaded_tokens += num
    new = reserved.full if reserved.full is not None else np.empty(0, np.int64)
    done = tuple((c, tuple(plan)) for c, plan in plans)
    return LoadBackResult(cache.to_device(new), node, ticket, done)


Plans = list[tuple[AuxHostComponent, list[TreeNode]]]


def _reserve(
    tier: HostTierView, segment: list[TreeNode], num: int, plans: Plans, out: _Reserved
) -> bool:
    """Takes the device slots of the load (evicting each component first when short);
    False when one is still short (what was taken stays in `out` for `_release`)."""
    cache = tier.cache
    allocator = cache.pools.kv_allocator
    swa = allocator if isinstance(allocator, SWASlotAllocator) else None
    if num:
        pool = allocator if swa is None else swa.full  # SWA peers only where planned
        if pool.available_size() < num:
            cache.evict(EvictParams(num_tokens=num - pool.available_size()))
        slots = pool.alloc(num)
        if slots is None:
            return False
        out.full = to_numpy(slots)
    new_full: dict[TreeNode, Slots] = {}
    start = 0
    for n in segment:
        assert out.full is not None
        new_full[n] = out.full[start : start + n.num_tokens]
        start += n.num_tokens
    for c, plan in plans:
        device = _reserve_room(tier, swa, c.load_room(plan, new_full), out)
        if device is None:
            return False
        out.aux.append(device)
    return True


def _reserve_room(
    tier: HostTierView, swa: SWASlotAllocator | None, room: LoadRoom, out: _Reserved
) -> Slots | None:
    """The device slots of one component's `room`, or None when its pool stays short."""
    cache = tier.cache
    taken: list[Slots] = []
    if room.swa_of is not None:
        assert swa is not None
        short = room.swa_of.shape[0] - swa.swa_available_size()
        if short > 0:
            cache.evict(EvictParams(swa_num_tokens=short))
        if swa.alloc_swa_for(room.swa_of) is None:
            return None
        out.swa_of.append(room.swa_of)
        taken.append(swa.peers_of(room.swa_of))
    if room.states:
        mamba = cache.pools.mamba
        assert mamba is not None
        short = room.states - mamba.allocator.available_size()
        if short > 0:
            cache.evict(EvictParams(mamba_num=short))
        for _ in range(room.states):
            slot = mamba.allocator.alloc_one()
            if slot is None:
                return None
            out.states.append(slot)
        taken.append(np.array(out.states[-room.states :], np.int64))
    return _concat(taken) if taken else np.empty(0, np.int64)


def _release(tier: HostTierView, reserved: _Reserved) -> None:
    pools = tier.cache.pools
    allocator = pools.kv_allocator
    for swa_of in reserved.swa_of:
        assert isinstance(allocator, SWASlotAllocator)
        allocator.free_swa(swa_of)
    if reserved.full is not None:
        allocator.free(reserved.full)
    if reserved.states:
        assert pools.mamba is not None
        pools.mamba.allocator.free(np.array(reserved.states, np.int64))


def _commit(
    tier: HostTierView,
    anchor: TreeNode,
    segment: list[TreeNode],
    plans: Plans,
    reserved: _Reserved,
    req: Req | None,
) -> list[CopyOp]:
    """Gives the nodes their device slots; returns the H->D copies."""
    ops = []
    if segment:
        assert reserved.full is not None
        src = _concat([n.data[0].host_value for n in segment])
        tier.full.commit_load_back(segment, reserved.full)
        ops.append(CopyOp("full", Direction.H2D, src, reserved.full))
    for (c, plan), device in zip(plans, reserved.aux, strict=True):
        host = _concat([n.data[c.index].host_value for n in plan])
        c.commit_load_plan(plan, device)
        own = c.request_slot(req)
        if own is not None:
            # The request resumes from this state: its own slot gets a copy too.
            host = np.concatenate([host, host])
            device = np.concatenate([device, np.array([own], np.int64)])
        ops.append(CopyOp(c.name, Direction.H2D, host, device))
        tier.stats.aux_loaded[c.name] += int(host.shape[0])
    loaded = {c for c, _ in plans}
    for c in tier.aux:
        own = c.request_slot(req)
        if own is None or c in loaded:
            continue
        source = c.request_source(anchor)
        if source is not None:
            # The state at the host boundary is on the device already, but the request's
            # slot holds the (shallower) device match's copy: it resumes from the boundary's.
            _copy_state(tier, source, own)
    return ops


def _copy_state(tier: HostTierView, source: int | None, own: int) -> None:
    """`own` (a request's state slot) gets `source`'s state, or is cleared when None."""
    mamba = tier.cache.pools.mamba
    assert mamba is not None
    if source is None:
        mamba.states.clear(own)
    else:
        mamba.states.copy(source, own)


def load_back(
    tier: HostTierView, match: MatchResult, mem_quota: int | None, req: Req | None = None
) -> MatchResult:
    """`match` extended by its host hit when the load-back succeeds, else `match` (the
    request recomputes the host part). Waits for the copy, so one that raised is undone."""
    anchor = match.last_host_node
    if match.host_hit_length == 0 or anchor is None or anchor is match.last_device_node:
        return match
    if not tier.cache.tree.in_tree(anchor):
        # Evicted from the host since the match (e.g. making room for the request's Mamba
        # slots wrote a victim back and the host pool gave way): the request recomputes.
        tier.stats.load_failed += 1
        return match
    result = init_load_back(tier, anchor, mem_quota, req)
    if result.ticket is None:
        return match
    tier.tickets.wait(tier.engine, result.ticket)
    if tier.tickets.failed(result.ticket):
        _undo(tier, anchor, result, match, req)
        return match
    # The host hit may cross nodes whose full KV stayed on the device (only their SWA
    # window or state was on the host): the path's slots, not the match's plus the new ones.
    return match._replace(
        device_indices=tier.cache.path_indices(anchor),
        device_prefix_len=match.device_prefix_len + match.host_hit_length,
        last_device_node=anchor,
        host_hit_length=0,
        swa_host_hit_length=0,
        mamba_host_hit_length=0,
    )


def _undo(
    tier: HostTierView,
    anchor: TreeNode,
    result: LoadBackResult,
    match: MatchResult,
    req: Req | None,
) -> None:
    """A load-back whose copy raised: the loaded device copies hold garbage, so they go
    again (the nodes are as before the load: host copies kept), and `req`'s own Mamba slot
    gets back the device match's state."""
    cache, ticket = tier.cache, result.ticket
    assert ticket is not None
    _, receipt = tier.loads.pop(ticket)
    tier.tickets.settle(ticket)
    tier.stats.load_copy_failed += 1
    loaded = tier.full.clear_marks(anchor, "load", ticket)  # deepest first
    cache.dec_lock_ref(anchor, receipt)
    actions: list[FreeSlots] = []
    for c, plan in reversed(result.aux_plans):  # SWA frees read the full slots: first
        for n in plan:
            c.unload(n, actions)
    for n in loaded:
        tier.full.demote(n, actions)
    cache.apply(actions)
    tier.stats.loaded_tokens -= sum(n.num_tokens for n in loaded)
    for c in tier.aux:
        own = c.request_slot(req)
        if own is not None:
            _copy_state(tier, c.request_source(match.last_device_node), own)
