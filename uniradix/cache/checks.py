"""Whole-cache invariant checks, insert-value validation and the tree dump, kept apart from
the controller's logic."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from uniradix.errors import InvariantError
from uniradix.key import UNIT_BYTES
from uniradix.memory.swa_allocator import SWASlotAllocator
from uniradix.tree.node import TreeNode
from uniradix.types import ComponentKey, ComponentType, Slots

if TYPE_CHECKING:
    from uniradix.cache.view import ControllerView


def raise_if_broken(cache: ControllerView, held_by_requests: Mapping[str, int] | None) -> None:
    """`UnifiedRadixCache.check_invariants`: the tree, the pools, the host tier, sessions."""
    errors = check_cache_invariants(cache, held_by_requests)
    cache.host_tier.check_invariants(errors)
    cache.sessions.check_invariants(errors)
    if errors:
        raise InvariantError("cache invariants violated:\n  " + "\n  ".join(errors))


def check_cache_invariants(
    cache: ControllerView, held_by_requests: Mapping[str, int] | None
) -> list[str]:
    errors: list[str] = []
    tree, ps = cache.tree, cache.page_size
    root = tree.root
    if root.parent is not None or root.data[0].value is None:
        errors.append("root must have no parent and an (empty) full value")
    leaves = set()
    for node in tree.nodes():
        parent = node.parent
        if parent is None or parent.children.get(node.child_key(ps)) is not node:
            errors.append(f"{node} is not registered under its parent")
        if node.num_tokens != len(node.key) // UNIT_BYTES:
            errors.append(f"{node} num_tokens disagrees with its key ({len(node.key)} bytes)")
        if node.num_tokens == 0 or node.num_tokens % ps:
            errors.append(f"{node} has {node.num_tokens} units, not a positive multiple of {ps}")
        for child in node.children.values():
            if child.parent is not node:
                errors.append(f"{child} lists {child.parent} as parent, not {node}")
        if tree.is_evictable_leaf(node):
            leaves.add(node)
    if leaves != tree.leaves.members:
        errors.append(
            "evictable leaf set differs: "
            f"missing {sorted(n.id for n in leaves - tree.leaves.members)}, "
            f"extra {sorted(n.id for n in tree.leaves.members - leaves)}"
        )
    lost = tree.leaves.unreachable()
    if lost:
        errors.append(f"evictable leaves eviction can never pick: {sorted(n.id for n in lost)}")
    for c in cache.components:
        c.check_invariants(errors)
    if not errors:
        _check_pools(cache, held_by_requests, errors)
        _check_req_rows(cache, held_by_requests, errors)
    return errors


def _check_pools(
    cache: ControllerView, held_by_requests: Mapping[str, int] | None, errors: list[str]
) -> None:
    """Per pool: tree slots are distinct and allocated, and (given what requests hold)
    `free + evictable + protected + held == capacity`."""
    capacities, available = cache.pools.capacities(), cache.pools.available()
    allocator = cache.pools.kv_allocator
    checks: dict[str, tuple[ComponentKey, Callable[[Slots], npt.NDArray[np.bool_]]]] = {
        "full": (ComponentType.FULL, allocator.is_allocated)
    }
    if isinstance(allocator, SWASlotAllocator):
        checks["swa"] = (ComponentType.SWA, allocator.swa.is_allocated)
    if cache.pools.mamba is not None:
        checks["mamba"] = (ComponentType.MAMBA, cache.pools.mamba.allocator.is_allocated)
    for name, extra_pool in cache.pools.extra.items():  # a component from outside: same name
        checks[name] = (name, extra_pool.is_allocated)
    has = {c.component_type for c in cache.components}
    for pool, (ct, is_allocated) in checks.items():
        if ct not in has:
            errors.append(f"{pool}: the cache has a {pool} pool but no {pool} component")
            continue
        component = cache.component(ct)
        i = component.index
        values = [v for n in cache.tree.nodes() if (v := n.data[i].value) is not None]
        slots = np.concatenate(values) if values else np.empty(0, np.int64)
        # A count per slot id (linear in the pool), not np.unique's sort of every slot.
        if slots.size and slots.min() < 0:
            errors.append(f"{pool}: the tree holds a negative slot {int(slots.min())}")
        elif slots.size and np.bincount(slots).max() > 1:
            errors.append(f"{pool}: a slot is held by two tree nodes")
        if not is_allocated(slots).all():
            errors.append(f"{pool}: the tree holds slots the allocator considers free")
        free, capacity = available[pool], capacities[pool]
        held = component.evictable_tokens + component.protected_tokens
        if held > capacity - free:
            errors.append(f"{pool}: tree holds {held} slots but only {capacity - free} are in use")
        if held_by_requests is not None and pool in held_by_requests:
            total = free + held + held_by_requests[pool]
            if total != capacity:
                errors.append(
                    f"{pool}: free {free} + tree {held} + requests {held_by_requests[pool]} "
                    f"= {total} != capacity {capacity}"
                )


def format_tree(cache: ControllerView) -> str:
    lines = []
    names = [c.name for c in cache.components]

    def visit(node: TreeNode, depth: int) -> None:
        if node is not cache.tree.root:
            units = np.frombuffer(node.key, dtype="<i8").tolist()
            shown = str(units[:8])[:-1] + (", ...]" if len(units) > 8 else "]")
            parts = []
            for name, d in zip(names, node.data, strict=True):
                v = "-" if d.value is None else str(d.value.tolist()[:8])
                parts.append(f"{name}={v} lock={d.lock_ref}")
            lines.append(f"{'  ' * depth}#{node.id} {shown} ({node.num_tokens}) " + " ".join(parts))
        for child in node.children.values():
            visit(child, depth + 1)

    visit(cache.tree.root, -1)
    return "\n".join(lines) if lines else "(empty tree)"


def _check_req_rows(
    cache: ControllerView, held_by_requests: Mapping[str, int] | None, errors: list[str]
) -> None:
    rows = cache.pools.req_to_token_pool
    if held_by_requests is not None and "req" in held_by_requests:
        total = rows.available_size() + held_by_requests["req"]
        if total != rows.size:
            errors.append(
                f"req: free rows {rows.available_size()} + requests {held_by_requests['req']} "
                f"= {total} != {rows.size}"
            )
