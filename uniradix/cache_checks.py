"""Whole-cache invariant checks and the tree dump, kept apart from the controller's logic."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from uniradix.tree.node import TreeNode

if TYPE_CHECKING:
    from uniradix.cache import UnifiedRadixCache


def check_cache_invariants(
    cache: UnifiedRadixCache, held_by_requests: Mapping[str, int] | None
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
    for c in cache.components:
        c.check_invariants(errors)
    if not errors:
        _check_full_pool(cache, held_by_requests, errors)
    return errors


def _check_full_pool(
    cache: UnifiedRadixCache, held_by_requests: Mapping[str, int] | None, errors: list[str]
) -> None:
    allocator = cache.pools.kv_allocator
    values = [n.data[0].value for n in cache.tree.nodes() if n.data[0].value is not None]
    slots = np.concatenate(values) if values else np.empty(0, np.int64)
    if np.unique(slots).size != slots.size:
        errors.append("full: a slot is held by two tree nodes")
    if not allocator.is_allocated(slots).all():
        errors.append("full: the tree holds slots the allocator considers free")
    held = cache.evictable_size() + cache.protected_size()
    private = allocator.used_size() - held
    if private < 0:
        errors.append(
            f"full: tree holds {held} slots but only {allocator.used_size()} are allocated"
        )
    if held_by_requests is not None and "full" in held_by_requests:
        total = allocator.available_size() + held + held_by_requests["full"]
        if total != allocator.capacity:
            errors.append(
                f"full: free {allocator.available_size()} + tree {held} + requests "
                f"{held_by_requests['full']} = {total} != capacity {allocator.capacity}"
            )


def format_tree(cache: UnifiedRadixCache) -> str:
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
