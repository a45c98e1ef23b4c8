"""The cache's event hook: what a KV-event sink is told when full-attention KV enters or
leaves a tier. The cache reports only what it executed; a sink (see `uniradix.events`)
turns that into router events. The tree and the components never call it.

A cache has no sink by default (`cache.event_sink is None`): each hook site then costs one
attribute check. The `medium` argument names the tier: the host tier's controller reports
`MEDIUM_CPU_PINNED` (backup acks, host eviction) and device moves (demotion, load-back)
through the same sink.
"""

from __future__ import annotations

from typing import Protocol

from uniradix.tree.node import TreeNode

MEDIUM_GPU = "GPU"
MEDIUM_CPU_PINNED = "CPU_PINNED"
MEDIUM_DISK = "DISK"
MEDIA = (MEDIUM_GPU, MEDIUM_CPU_PINNED, MEDIUM_DISK)


class CacheEventSink(Protocol):
    """Told, in execution order, of every full-KV value entering or leaving a tier.

    Contract: `on_stored(node)` comes after `node`'s parent was stored on some medium (the
    same one, except where write-back backs up a leaf whose parent is on the device only)
    and not removed from all of them; `on_removed(node)` comes while `node` is still
    attached, and once `node` is on no medium no descendant is stored anywhere. The host
    tier reports only committed copies: a load-back when it lands, a backup when acked.
    A split is reported only through `redistribute_on_split` (the cache registers the sink
    as a split hook), never as a remove and a store.
    """

    def on_stored(self, node: TreeNode, medium: str) -> None: ...

    def on_removed(self, node: TreeNode, medium: str) -> None: ...

    def on_aux_stored(self, node: TreeNode, component: int, pages: int, medium: str) -> None:
        """Auxiliary component `component` (its index) of `node` (its last `pages` pages:
        SWA window pages, or 1 for a Mamba state) entered `medium`. L3 only: the device and
        host copies are read from the tree (`uniradix.events.groups`)."""

    def on_cleared(self) -> None: ...

    def redistribute_on_split(self, parent: TreeNode, child: TreeNode, split_len: int) -> None:
        """`parent` (new) took the first `split_len` units of `child`'s edge."""
