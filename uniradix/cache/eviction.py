"""Eviction: each component drives its own victims; the cache cascades and frees.

For each component asked for units, in tree order, its `eviction_candidates` give victims
one at a time. An evictable leaf goes whole (every component, auxiliary ones first, since SWA
frees read the full slots); any other victim loses only that component, plus the unlocked
auxiliary components of lower or equal internal priority (cascade: SWA 1 > Mamba 0; the base
component never cascades from an internal node). Frees are applied after every victim, so
pool availability is always current.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING

from uniradix.event_sink import MEDIUM_GPU
from uniradix.types import ComponentType, EvictParams, EvictResult, FreeSlots

if TYPE_CHECKING:
    from uniradix.cache.view import ControllerView
    from uniradix.components.base import TreeComponent
    from uniradix.tree.node import TreeNode


_BUILT_IN = tuple(ComponentType)  # iterating the enum class itself costs ~1.5 µs per call
_NONE_WANTED: Mapping[str, int] = MappingProxyType({})


def evict_components(cache: ControllerView, params: EvictParams) -> EvictResult:
    wanted = (params.num_tokens, params.swa_num_tokens, params.mamba_num)  # by ComponentType
    for ct, num in zip(_BUILT_IN, wanted, strict=True):
        if not isinstance(num, int) or num < 0:
            raise ValueError(f"EvictParams for {ct.name} must be a non-negative int, got {num!r}")
    extra_wanted = params.extra or _NONE_WANTED
    if extra_wanted:
        for name, num in extra_wanted.items():
            if not isinstance(num, int) or num < 0:
                raise ValueError(
                    f"EvictParams.extra[{name!r}] must be a non-negative int, got {num!r}"
                )
            cache.component(name)  # raises for a component the cache does not have
    tracker = [0] * len(cache.components)
    leaves = cache.tree.leaves
    # Looked up once, not per victim: a cache without a host tier, sessions or an event sink
    # pays next to nothing for them here (benchmarks/against_ref.py).
    host, sessions, sink = cache.host_tier, cache.sessions, cache.event_sink
    demote = host.evict_leaf if host.enabled else None
    for c in cache.components:
        key = c.component_type
        want = extra_wanted.get(key, 0) if isinstance(key, str) else wanted[key]
        if want == 0:
            continue
        # with sessions, covered data last
        candidates = (
            sessions.eviction_candidates(c) if sessions.enabled else c.eviction_candidates()
        )
        while tracker[c.index] < want:
            victim = next(candidates, None)
            if victim is None:
                break
            actions: list[FreeSlots] = []
            if victim in leaves:
                if demote is not None and (demoted := demote(victim, actions, tracker)):
                    tracker[0] += demoted  # backed up: the node stays, host-only
                    if sink is not None:
                        sink.on_removed(victim, MEDIUM_GPU)
                else:
                    if sink is not None:
                        sink.on_removed(victim, MEDIUM_GPU)
                    _evict_leaf(cache, victim, actions, tracker)
            else:
                if demote is not None:
                    host.before_internal_eviction(victim)
                _evict_internal(cache, victim, c, actions, tracker)
            cache.apply(actions)
    done, extra = [0, 0, 0], None
    for c in cache.components:
        key = c.component_type
        if isinstance(key, str):
            extra = extra or {}
            extra[key] = tracker[c.index]
        else:
            done[key] = tracker[c.index]
    return EvictResult(done[0], done[1], done[2], extra)


def _evict_leaf(
    cache: ControllerView, node: TreeNode, actions: list[FreeSlots], tracker: list[int]
) -> None:
    for c in reversed(cache.components):
        if c.has_value(node):
            tracker[c.index] += c.evict_node(node, actions)
    cache.tree.remove_leaf(node)


def _evict_internal(
    cache: ControllerView,
    node: TreeNode,
    trigger: TreeComponent,
    actions: list[FreeSlots],
    tracker: list[int],
) -> None:
    """Tombstones `trigger` on `node` and cascades to the unlocked components of lower or
    equal priority (never to a locked one, never to the base component; with sessions, never
    to session-covered data when the trigger's is not covered)."""
    limit = trigger.eviction_priority(is_leaf=False)
    sessions = cache.sessions
    spare = sessions.enabled and not sessions.is_covered(node, trigger.index)
    for c in reversed(cache.components[1:]):
        if c is trigger or (
            c.has_value(node)
            and node.data[c.index].lock_ref == 0
            and c.eviction_priority(is_leaf=False) <= limit
            and not (spare and sessions.is_covered(node, c.index))
        ):
            tracker[c.index] += c.evict_node(node, actions)
    cache.tree.update_leaf(node)
