"""Eviction: each component drives its own victims; the cache cascades and frees.

For each component asked for units, in tree order, its `eviction_candidates` give victims
one at a time. An evictable leaf goes whole (every component, auxiliary ones first, since SWA
frees read the full slots); any other victim loses only that component, plus the unlocked
auxiliary components of lower or equal internal priority (cascade: SWA 1 > Mamba 0; the base
component never cascades from an internal node). Frees are applied after every victim, so
pool availability is always current.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from uniradix.event_sink import MEDIUM_GPU
from uniradix.types import ComponentType, EvictParams, EvictResult, FreeSlots

if TYPE_CHECKING:
    from uniradix.cache import UnifiedRadixCache
    from uniradix.components.base import TreeComponent
    from uniradix.tree.node import TreeNode


def evict_components(cache: UnifiedRadixCache, params: EvictParams) -> EvictResult:
    wanted = (params.num_tokens, params.swa_num_tokens, params.mamba_num)  # by ComponentType
    for ct, num in zip(ComponentType, wanted, strict=True):
        if not isinstance(num, int) or num < 0:
            raise ValueError(f"EvictParams for {ct.name} must be a non-negative int, got {num!r}")
    tracker = [0] * len(cache.components)
    leaves = cache.tree.leaves
    for c in cache.components:
        want = wanted[c.component_type]
        if want == 0:
            continue
        candidates = c.eviction_candidates()
        while tracker[c.index] < want:
            victim = next(candidates, None)
            if victim is None:
                break
            actions: list[FreeSlots] = []
            if victim in leaves:
                _evict_leaf(cache, victim, actions, tracker)
            else:
                _evict_internal(cache, victim, c, actions, tracker)
            cache.apply(actions)
    done = [0, 0, 0]
    for c in cache.components:
        done[c.component_type] = tracker[c.index]
    return EvictResult(*done)


def _evict_leaf(
    cache: UnifiedRadixCache, node: TreeNode, actions: list[FreeSlots], tracker: list[int]
) -> None:
    if cache.event_sink is not None:
        cache.event_sink.on_removed(node, MEDIUM_GPU)
    for c in reversed(cache.components):
        if c.has_value(node):
            tracker[c.index] += c.evict_node(node, actions)
    cache.tree.remove_leaf(node)


def _evict_internal(
    cache: UnifiedRadixCache,
    node: TreeNode,
    trigger: TreeComponent,
    actions: list[FreeSlots],
    tracker: list[int],
) -> None:
    """Tombstones `trigger` on `node` and cascades to the unlocked components of lower or
    equal priority (never to a locked one, never to the base component)."""
    limit = trigger.eviction_priority(is_leaf=False)
    for c in reversed(cache.components[1:]):
        if c is trigger or (
            c.has_value(node)
            and node.data[c.index].lock_ref == 0
            and c.eviction_priority(is_leaf=False) <= limit
        ):
            tracker[c.index] += c.evict_node(node, actions)
    cache.tree.update_leaf(node)
