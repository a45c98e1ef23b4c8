"""Whole-cache invariant checks, insert-value validation and the tree dump, kept apart from
the controller's logic."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np
import torch

from uniradix.memory.allocator import to_numpy
from uniradix.tree.node import TreeNode
from uniradix.types import ComponentType, InsertParams, Slots

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
        _check_mamba_pool(cache, held_by_requests, errors)
        _check_req_rows(cache, held_by_requests, errors)
    return errors


def checked_insert_value(params: InsertParams, page_size: int) -> Slots:
    """A copy of `params.value` (or the key's tokens when None) as host slots, after checking
    it is whole pages and that `params.mamba_value`, if any, is one state slot. The copy makes
    the tree own its slots rather than view the caller's request row."""
    mamba = params.mamba_value
    if mamba is not None and (
        not isinstance(mamba, torch.Tensor) or mamba.dtype != torch.int64 or mamba.shape != (1,)
    ):
        raise TypeError(f"mamba_value must be a [1] int64 tensor, got {mamba!r:.80}")
    if params.value is None:
        return np.array(params.key.tolist(), dtype=np.int64)
    if not isinstance(params.value, torch.Tensor) or params.value.dtype != torch.int64:
        raise TypeError(f"value must be a 1-D int64 tensor, got {params.value!r:.80}")
    value = to_numpy(params.value).copy()
    if value.shape[0] != len(params.key):
        raise ValueError(f"value has {value.shape[0]} slots for a key of {len(params.key)} units")
    n = len(params.key) // page_size * page_size
    if page_size > 1 and n:
        pages = value[:n].reshape(-1, page_size)
        starts = pages[:, :1]
        if (starts % page_size).any() or (pages - starts != _offsets(page_size)).any():
            raise ValueError(
                f"value is not made of whole pages of {page_size} slots: {value[:n].tolist()[:32]}"
            )
    return value


@functools.cache
def _offsets(page_size: int) -> Slots:
    return np.arange(page_size, dtype=np.int64)


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


def _check_mamba_pool(
    cache: UnifiedRadixCache, held_by_requests: Mapping[str, int] | None, errors: list[str]
) -> None:
    pool = cache.pools.mamba
    if ComponentType.MAMBA not in {c.component_type for c in cache.components}:
        return
    component = cache.component(ComponentType.MAMBA)
    if pool is None:
        errors.append("mamba: the cache has a Mamba component but no Mamba pool")
        return
    allocator, i = pool.allocator, component.index
    values = [v for n in cache.tree.nodes() if (v := n.data[i].value) is not None]
    slots = np.concatenate(values) if values else np.empty(0, np.int64)
    if np.unique(slots).size != slots.size:
        errors.append("mamba: a state slot is held by two tree nodes")
    if not allocator.is_allocated(slots).all():
        errors.append("mamba: the tree holds state slots the allocator considers free")
    held = component.evictable_tokens + component.protected_tokens
    if held > allocator.used_size():
        errors.append(f"mamba: tree holds {held} slots but only {allocator.used_size()} in use")
    if held_by_requests is not None and "mamba" in held_by_requests:
        total = allocator.available_size() + held + held_by_requests["mamba"]
        if total != allocator.capacity:
            errors.append(
                f"mamba: free {allocator.available_size()} + tree {held} + requests "
                f"{held_by_requests['mamba']} = {total} != capacity {allocator.capacity}"
            )


def _check_req_rows(
    cache: UnifiedRadixCache, held_by_requests: Mapping[str, int] | None, errors: list[str]
) -> None:
    rows = cache.pools.req_to_token_pool
    if held_by_requests is not None and "req" in held_by_requests:
        total = rows.available_size() + held_by_requests["req"]
        if total != rows.size:
            errors.append(
                f"req: free rows {rows.available_size()} + requests {held_by_requests['req']} "
                f"= {total} != {rows.size}"
            )
