"""Lost hybrid hits: why a match usable by every component stopped short of the full-KV match.

On a hybrid cache a match is usable only where every component accepts the boundary: SWA
needs the `W` tokens before it live, Mamba a state on the node ending there. The full-KV
match length (`full_kv_hit_length`) is what a full-attention-only cache would have reused;
the difference to the usable length (`device_prefix_len`) is a *lost* hit. This module looks
at the tree right after the match, at the node ending the full-KV match, and names the cause:

=================  ============================================================================
swa_tombstoned     a tombstone within the window before the boundary, never evicted: the
                   running request freed those SWA slots out of its window and the tree
                   never held them live
swa_evicted        a tombstone within that window left by the tree's SWA eviction
mamba_missing      no state on the boundary node, and none was ever evicted there
mamba_evicted      the boundary node held a state that the tree's Mamba eviction dropped
=================  ============================================================================

Evicted values are told apart from never-kept ones by the components' eviction mark
(`uniradix.components.base.EVICTED_MARK`). On full+SWA+Mamba both components may fail at one
boundary: the lost tokens are then counted under both causes, so the per-cause sums may
exceed `lost_tokens` (`both_tokens` says by how much).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from uniradix.cache.controller import UnifiedRadixCache
from uniradix.components.base import EVICTED_MARK
from uniradix.components.swa import SWAComponent
from uniradix.key import UNIT_BYTES, RadixKey
from uniradix.tree.node import ComponentData, TreeNode
from uniradix.types import ComponentType, MatchResult

CAUSES = ("swa_tombstoned", "swa_evicted", "mamba_missing", "mamba_evicted")


class LostHit(NamedTuple):
    full_tokens: int  # the full-KV match
    usable_tokens: int  # the match every component accepted
    causes: tuple[str, ...]  # why it stopped short (empty when it did not)


def _evicted(data: ComponentData) -> bool:
    return bool(data.metadata) and EVICTED_MARK in data.metadata  # type: ignore[operator]


class LostHits:
    """Counts lost hit tokens per cause over the matches given to `add`."""

    def __init__(self, cache: UnifiedRadixCache) -> None:
        self.cache = cache
        self.full_tokens = 0
        self.usable_tokens = 0
        self.lost_tokens = 0
        self.both_tokens = 0
        self.lost_requests = 0
        self.causes = dict.fromkeys(CAUSES, 0)
        self._swa: SWAComponent | None = None
        self._mamba: int | None = None
        for c in cache.components:
            if isinstance(c, SWAComponent):
                self._swa = c
            elif c.component_type == ComponentType.MAMBA:
                self._mamba = c.index

    @property
    def enabled(self) -> bool:
        return self._swa is not None or self._mamba is not None

    def observe(self, key: RadixKey, match: MatchResult) -> LostHit:
        """Classifies one match of `key` made just now (the tree unchanged since); `add`
        counts it (a scheduler counts only the match that admitted a request)."""
        full, usable = match.full_kv_hit_length, match.device_prefix_len
        if full <= usable:
            return LostHit(full, usable, ())
        boundary = self._node_at(match.last_device_node, usable, key, full)
        if boundary is None:
            # The match's own Mamba slot allocation evicted the path's unlocked leaf there.
            return LostHit(full, usable, ("mamba_evicted",))
        return LostHit(full, usable, self.causes_at(boundary))

    def add(self, hit: LostHit) -> None:
        self.full_tokens += hit.full_tokens
        self.usable_tokens += hit.usable_tokens
        lost = hit.full_tokens - hit.usable_tokens
        if lost <= 0:
            return
        self.lost_tokens += lost
        self.lost_requests += 1
        for cause in hit.causes:
            self.causes[cause] += lost
        if len(hit.causes) > 1:
            self.both_tokens += lost

    def causes_at(self, node: TreeNode) -> tuple[str, ...]:
        """Why a match cannot end at `node` (empty if it could)."""
        causes: list[str] = []
        if self._mamba is not None and node is not self.cache.tree.root:
            d = node.data[self._mamba]
            if d.value is None:
                causes.append("mamba_evicted" if _evicted(d) else "mamba_missing")
        swa = self._swa
        if swa is not None:
            covered, gaps = 0, []
            for n in self.cache.tree.path_to_root(node):
                if covered >= swa.window:
                    break
                if n.data[swa.index].value is None:
                    gaps.append(n.data[swa.index])
                covered += n.num_tokens
            if gaps:
                causes.append("swa_evicted" if any(map(_evicted, gaps)) else "swa_tombstoned")
        return tuple(causes)

    def _node_at(self, node: TreeNode, offset: int, key: RadixKey, end: int) -> TreeNode | None:
        """The node ending key unit `end`, walking down from `node` (ending unit `offset`);
        the match split the tree at `end`, so every edge on the way ends on a page. None if
        the path is gone (a Mamba eviction inside the match removed an unlocked leaf)."""
        units, ns, ps = key.units, key.extra_key, self.cache.page_size
        while offset < end:
            page = units[offset * UNIT_BYTES : (offset + ps) * UNIT_BYTES]
            child = node.children.get(page if ns is None else (ns, page))
            if child is None:
                return None
            node = child
            offset += node.num_tokens
        assert offset == end, f"the match boundary {end} is not a node end ({offset})"
        return node

    def summary(self) -> dict[str, Any]:
        return {
            "full_kv_hit_tokens": self.full_tokens,
            "usable_hit_tokens": self.usable_tokens,
            "lost_tokens": self.lost_tokens,
            "lost_requests": self.lost_requests,
            "both_tokens": self.both_tokens,
            "causes": dict(self.causes),
        }
