"""Invariant checks of the host tier: host pool identity, host data rules, transfer marks."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from uniradix.tiers.write_policy import WritePolicy

if TYPE_CHECKING:
    from uniradix.tiers.views import HostTierView


def check_host_tier(tier: HostTierView, errors: list[str]) -> None:
    """Appends a message per broken rule:

    - every host pool (full, SWA, Mamba): tree host slots distinct and allocated,
      `free + held by the tree (+ reserved by L3 prefetches, full KV) == capacity` (a host
      slot belongs to a node or a prefetch from allocation to free);
    - write-through policies: a node with host data has a parent with host data;
    - a node is marked by at most one transfer, and only by one in flight: a write mark on a
      device node, a load mark on a device node; each in-flight anchor is in the tree and
      device-locked.
    """
    tree, pool = tier.cache.tree, tier.host_pools.full
    host = tier.full.host_values()
    if np.unique(host).size != host.size:
        errors.append("host_full: a host slot is held by two tree nodes")
    if host.size and not pool.is_allocated(host).all():
        errors.append("host_full: the tree holds host slots the host allocator considers free")
    free = pool.available_size()
    reserved = 0 if tier.storage is None else tier.storage.reserved_tokens  # L3 prefetches
    if free + host.size + reserved != pool.capacity:
        errors.append(
            f"host_full: free {free} + tree {host.size} + prefetch-reserved {reserved} = "
            f"{free + host.size + reserved} != capacity {pool.capacity}"
        )
    for c in tier.aux:
        _check_aux_pool(tier, c, errors)
    strict = tier.policy is not WritePolicy.WRITE_BACK
    for node in tree.nodes():
        d, parent = node.data[0], node.parent
        if (
            strict
            and d.host_value is not None
            and parent is not None
            and parent is not tree.root
            and parent.data[0].host_value is None
        ):
            errors.append(f"host_full: {node} has host data but its parent {parent} has none")
        meta = d.metadata
        if meta is None:
            continue
        if "write" in meta and "load" in meta:
            errors.append(f"host_full: {node} is pending a write and a load")
        for kind, pending in (("write", tier.writes), ("load", tier.loads)):
            if kind in meta and meta[kind] not in pending:
                errors.append(f"host_full: {node} marked by {kind} {meta[kind]}, not in flight")
        if d.value is None:
            errors.append(f"host_full: host-only {node} carries a transfer mark {meta}")
    for kind, pending in (("write", tier.writes), ("load", tier.loads)):
        for ticket, (anchor, _) in pending.items():
            if not tree.in_tree(anchor) or anchor.data[0].lock_ref == 0:
                errors.append(f"host_full: {kind} {ticket} anchor {anchor} not in tree or unlocked")
    for ticket, locks in tier.aux_locks.items():
        for node, _ in locks:
            if ticket not in tier.writes or not tree.in_tree(node) or node.data[0].lock_ref == 0:
                errors.append(f"host_full: write {ticket} holds {node}, not in flight or unlocked")


def _check_aux_pool(tier: HostTierView, component: Any, errors: list[str]) -> None:
    """The auxiliary host pool's identity: `free + held by the tree == capacity`, every
    tree host slot distinct and allocated (the per-node rules are the component's)."""
    name, i = component.name, component.index
    pool = tier.host_pools.aux[name]
    values = [v for n in tier.cache.tree.nodes() if (v := n.data[i].host_value) is not None]
    host = np.concatenate(values) if values else np.empty(0, np.int64)
    if np.unique(host).size != host.size:
        errors.append(f"host_{name}: a host slot is held by two tree nodes")
    if host.size and not pool.is_allocated(host).all():
        errors.append(f"host_{name}: the tree holds host slots the host allocator considers free")
    free = pool.available_size()
    if free + host.size != pool.capacity:
        errors.append(
            f"host_{name}: free {free} + tree {host.size} = {free + host.size} "
            f"!= capacity {pool.capacity}"
        )


def host_usage(tier: HostTierView) -> dict[str, int]:
    """`HostTier.host_usage`: host full slots free, evictable, protected and in flight."""
    usage = {"free": tier.host_pools.full.available_size(), "evictable": 0}
    usage |= {"protected": 0, "in_flight": 0}
    for n in tier.cache.tree.nodes():
        d = n.data[0]
        if d.host_value is None:
            continue
        if d.metadata is not None and "write" in d.metadata:
            usage["in_flight"] += n.num_tokens
        elif d.host_lock_ref:
            usage["protected"] += n.num_tokens
        else:
            usage["evictable"] += n.num_tokens
    return usage
