"""The host tier's work on the auxiliary components (SWA window KV, Mamba states).

The controller (`uniradix.tiers.controller`) drives the full KV; these steps ride along so
that one node chain moves in one batch and every auxiliary host copy sits beside a full
host copy (a node whose full host copy goes loses its auxiliary host copies with it):

- `backup_ops`: with a chain's full backup, the chain's device SWA KV and Mamba states
  without a host copy get host slots (evicting that component's host-only data first when
  short; still short: that component's part of the backup is skipped and counted);
- `lacks_host_copy`: a node backed up before its window or state came back to the device
  (an insert revived an SWA tombstone, or published a state on a backed-up fragment):
  write-through backs that up too, in the batch of the insert's backup;
- `drop_failed_copies`: the auxiliary host copies of a batch whose copy raised go;
- `demote_aux`: a demoted node's device SWA KV and state go (host copies stay);
- `drop_aux_host`: a node's auxiliary host copies go with its full host copy;
- `evict_aux_host`: host eviction of one component, oldest host-only data first, leaving
  host tombstones (the node and its full KV stay);
- `backup_internal`: write-back's backup of an internal node's window or state right before
  its device tombstone (the reference's `InternalStateBackup`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from uniradix.memory.allocator import to_numpy
from uniradix.tiers.transfer import AuxCopy, CopyOp, Direction
from uniradix.tree.node import TreeNode
from uniradix.types import FreeSlots, Slots

if TYPE_CHECKING:
    from uniradix.tiers.views import HostTierView


def aux_name(component: Any) -> str:
    name: str = component.name
    return name


def alloc_aux_host(tier: HostTierView, component: Any, num: int) -> Slots | None:
    """`num` host slots of `component`'s pool, evicting its host-only data when short."""
    pool = tier.host_pools.aux[aux_name(component)]
    short = num - pool.available_size()
    if short > 0:
        evict_aux_host(tier, component, short)
    slots = pool.alloc(num)
    return None if slots is None else to_numpy(slots)


def lacks_host_copy(node: TreeNode, indices: tuple[int, ...]) -> bool:
    """Whether `node` holds device auxiliary data (at component `indices`) with no host copy."""
    data = node.data
    return any(data[i].value is not None and data[i].host_value is None for i in indices)


def backup_ops(
    tier: HostTierView, chain: list[TreeNode], committed: list[AuxCopy] | None = None
) -> list[CopyOp]:
    """Host copies (committed now, bytes moved by the returned ops) of the chain's device
    auxiliary data that has none; each copy is also appended to `committed` when given."""
    ops = []
    for c in tier.aux:
        i = c.index
        nodes = [n for n in chain if n.data[i].value is not None and n.data[i].host_value is None]
        if not nodes:
            continue
        values: list[Slots] = [v for n in nodes if (v := n.data[i].value) is not None]
        src = np.concatenate(values) if len(values) > 1 else values[0]
        host = alloc_aux_host(tier, c, int(src.shape[0]))
        if host is None:
            tier.stats.aux_write_skipped[aux_name(c)] += int(src.shape[0])
            continue
        start = 0
        for n, v in zip(nodes, values, strict=True):
            copy = host[start : start + v.shape[0]]
            c.host.commit_backup(n, copy)
            if committed is not None:
                committed.append((n, c, copy))
            start += int(v.shape[0])
        ops.append(CopyOp(aux_name(c), Direction.D2H, src, host))
        tier.stats.aux_written[aux_name(c)] += int(src.shape[0])
    return ops


def drop_failed_copies(tier: HostTierView, copies: list[AuxCopy]) -> None:
    """A batch whose copy raised: the auxiliary host copies it was filling hold garbage,
    so those still in place go (the device data stays, unbacked)."""
    for node, c, slots in copies:
        if tier.cache.tree.in_tree(node) and node.data[c.index].host_value is slots:
            tier.host_pools.aux[aux_name(c)].free(c.host.drop(node), node_value=True)


def demote_aux(
    tier: HostTierView, node: TreeNode, actions: list[FreeSlots], tracker: list[int]
) -> None:
    """Drops `node`'s device auxiliary data before its full KV is demoted (SWA frees read
    the full slots, so they come first); host copies stay and join the host LRU lists."""
    for c in reversed(tier.aux):
        if c.has_value(node):
            tracker[c.index] += c.evict_node(node, actions)


def drop_aux_host(tier: HostTierView, node: TreeNode) -> None:
    for c in tier.aux:
        if node.data[c.index].host_value is not None:
            tier.host_pools.aux[aux_name(c)].free(c.host.drop(node), node_value=True)


def evict_aux_host(tier: HostTierView, component: Any, num: int) -> int:
    """Frees at least `num` host units of `component` where host-only data allows."""
    freed = 0
    pool = tier.host_pools.aux[aux_name(component)]
    for node in component.host.oldest():
        if freed >= num:
            break
        slots = component.host.drop(node)
        pool.free(slots, node_value=True)
        freed += int(slots.shape[0])
        tier.stats.aux_host_evicted[aux_name(component)] += int(slots.shape[0])
    return freed


def backup_internal(tier: HostTierView, node: TreeNode) -> None:
    """Host copies of `node`'s device auxiliary data (an internal node about to be
    tombstoned, or a leaf about to be demoted), written and waited for now (its full KV
    too when it has no host copy: an auxiliary host copy needs one)."""
    if not any(c.has_value(node) and node.data[c.index].host_value is None for c in tier.aux):
        return
    if node.data[0].host_value is None:
        tier.write_now(node)
        return
    ops = backup_ops(tier, [node])
    if not ops:
        return
    ticket = tier.engine.submit(ops)
    tier.tickets.wait(tier.engine, ticket)
    if tier.tickets.settle(ticket):
        for c in tier.aux:  # garbage on the host: the copies go, the tombstone is a loss
            if c.has_value(node) and node.data[c.index].host_value is not None:
                tier.host_pools.aux[aux_name(c)].free(c.host.drop(node), node_value=True)
