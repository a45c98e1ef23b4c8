"""SWAComponent: sliding-window-attention KV, which a prefix needs only for its last window.

A SWA layer reads only the last `W = sliding_window` tokens, so the cache keeps SWA KV where a
request may resume, not along whole prefixes. A node's SWA value (slots of the SWA pool, the
mapped peers of its full slots) may be dropped while its full KV stays: a *tombstone*. Then:

- a match may end at a node only if the `W` tokens before its end have live SWA (or the path
  has no tombstone at all), so it may pass old tombstones but stops in a gap;
- a lock protects only the window: it walks up from the anchor until `W` tokens are covered
  (tombstones count) and marks the topmost node with a uuid where its release stops;
- internal SWA eviction tombstones a node (priority 1, below full's 2), LRU order;
- a new leaf keeps live SWA for one page-rounded window at its end (`window_tail`); a longer
  live part is split off into a parent, so locking the leaf pins one window, not more;
- an insert over a tombstone recovers it from the request's live SWA slots;
- a running request frees the SWA slots of its positions that left the window
  (`free_out_of_window`), moving `req.swa_evicted_seqlen`, and may release its window lock
  early (`release_window_lock`) while its full lock stays.

Worked example (W=4, page 1): a request of 12 computed tokens whose cursor is 8 inserts into
an empty tree: root -> [0,8) tombstone -> [8,12) live. Matching the 12 tokens succeeds (4 live
tokens before the end); matching the first 8 gives 0 (the boundary sits in a gap).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from uniradix.components.base import EVICTED_MARK, TreeComponent, mark_evicted
from uniradix.eviction.orders import swa_order
from uniradix.memory.pools import CachePools
from uniradix.memory.swa_allocator import SWASlotAllocator
from uniradix.tree.core import MatchWalk, TreeCore
from uniradix.tree.lru import LRUList
from uniradix.tree.node import TreeNode
from uniradix.types import (
    CacheSettings,
    ComponentType,
    FreeKind,
    FreeSlots,
    InsertContext,
    InsertParams,
    MatchPrefixParams,
    Req,
    Slots,
)

_UUID = "uuid"


class SWAComponent(TreeComponent):
    component_type = ComponentType.SWA

    def __init__(self, index: int, tree: TreeCore, settings: CacheSettings) -> None:
        super().__init__(index, tree, settings)
        window = settings.sliding_window
        if not isinstance(window, int) or isinstance(window, bool) or window < 1:
            raise ValueError(f"SWA needs settings.sliding_window >= 1, got {window!r}")
        ps = settings.page_size
        self.window = window
        self.match_window = window  # a match ends under `window` live units (or no tombstone)
        self.window_tail = -(-window // ps) * ps
        self.lru = LRUList(index, tree.num_components)
        self._uuids = itertools.count(1)
        self._allocator: SWASlotAllocator | None = None
        self._reuse = swa_order(self, settings.swa_eviction_policy, self.window_tail)

    def reset(self) -> None:
        super().reset()
        self.lru = LRUList(self.index, self.tree.num_components)
        if self._reuse is not None:
            self._reuse.reset()

    def attach_pools(self, pools: CachePools) -> None:
        if not isinstance(pools.kv_allocator, SWASlotAllocator):
            raise TypeError(
                "an SWA component needs an SWASlotAllocator as kv_allocator, got "
                f"{type(pools.kv_allocator).__name__}"
            )
        self._allocator = pools.kv_allocator

    @property
    def allocator(self) -> SWASlotAllocator:
        assert self._allocator is not None, "SWA component used before attach_pools"
        return self._allocator

    def _page_floor(self, n: int) -> int:
        return n - n % self.settings.page_size

    def _page_ceil(self, n: int) -> int:
        return -(-n // self.settings.page_size) * self.settings.page_size

    # ------------------------------------------------------------------ match
    def finalize_match(self, walk: MatchWalk, params: MatchPrefixParams) -> dict[str, Any]:
        path, k = walk.path, walk.num_accepted
        if k:  # the accepted end's depth: the walk's, less the units past it (usually none)
            depth = walk.matched_len - (sum(n.num_tokens for n in path[k:]) if k < len(path) else 0)
            self._refresh_window(path[k - 1], depth, served=True)
        return {}

    def _refresh_window(self, node: TreeNode, depth: int, served: bool = False) -> None:
        """Moves `node` (ending `depth` units from the root) and its listed ancestors within
        one window (plus a page) to the most recent end, in path order, so a prefix's older
        parts are evicted first; `served`: a match ended at `node` (these windows served)."""
        n, i, lru = node, self.index, self.lru
        prev, covered = lru.head, 0
        limit = self.window + self.settings.page_size
        order = self._reuse
        mark = None if order is None else order.served if served else order.refreshed
        while n.parent is not None and covered < limit:
            if n.data[i].lru_prev is not None:  # `n in lru`, inline: runs per match and insert
                lru.place_after(prev, n)
                prev = n
                if mark is not None:
                    mark(n, depth - covered, depth)
            covered += n.num_tokens
            n = n.parent

    # ------------------------------------------------------------------ split
    def redistribute_on_split(self, parent: TreeNode, child: TreeNode, split_len: int) -> None:
        c, p = child.data[self.index], parent.data[self.index]
        p.lock_ref = c.lock_ref
        if c.value is not None:
            p.value, c.value = c.value[:split_len], c.value[split_len:]
            self.lru.insert_after(child, parent)
            if self._reuse is not None:
                self._reuse.split(parent, child)
        # A lock boundary marks the topmost locked node, which is now the parent.
        if c.metadata and _UUID in c.metadata:
            p.metadata = {_UUID: c.metadata.pop(_UUID)}
        if c.metadata and EVICTED_MARK in c.metadata:
            mark_evicted(p)

    # ------------------------------------------------------------------ insert
    def check_insert(self, ins: InsertContext) -> None:
        value, params = ins.value, ins.params
        ps, cursor = self.settings.page_size, params.swa_evicted_seqlen
        if not isinstance(cursor, int) or cursor < 0 or cursor % ps:
            raise ValueError(
                f"swa_evicted_seqlen must be a non-negative multiple of page_size={ps}, "
                f"got {cursor!r}"
            )
        lo = min(params.prev_prefix_len, value.shape[0])
        mid = min(max(lo, cursor), value.shape[0])
        peers = self.allocator.translate(value[lo:])
        if bool((peers[: mid - lo] > 0).any()):
            raise ValueError(
                f"value slots of positions [{lo}, {mid}), below swa_evicted_seqlen={cursor}, "
                "still have SWA slots"
            )
        if bool((peers[mid - lo :] == 0).any()):
            raise ValueError(
                f"value slots of positions [{mid}, {value.shape[0]}) must all have SWA slots "
                f"(positions below swa_evicted_seqlen={cursor} may not)"
            )

    def insert_overlap(
        self, ins: InsertContext, node: TreeNode, offset: int, num_tokens: int
    ) -> int:
        """Recovers a tombstoned `node` from the incoming slots whose SWA is still live."""
        if node.data[self.index].value is not None:
            return num_tokens
        end = offset + num_tokens
        start = self._live_start(ins, node, offset, end)
        if start < end:
            self._recover(node, ins.value[start:end], end, ins.actions)
        return start - offset

    def _live_start(self, ins: InsertContext, node: TreeNode, offset: int, end: int) -> int:
        """Where the incoming SWA over `node`'s units `[offset, end)` is live: from the
        request's SWA cursor and past the prefix it shares with the tree. `node` is split
        there (the part below stays a tombstone, as the parent); `end` when nothing is live."""
        params = ins.params
        start = max(offset, params.swa_evicted_seqlen, self._page_ceil(params.prev_prefix_len))
        if start >= end:
            return end
        if start > offset:
            self.tree.split(node, start - offset)
        return start

    def _recover(self, node: TreeNode, incoming: Slots, end: int, actions: list[FreeSlots]) -> None:
        full = node.data[0]
        assert full.value is not None
        if full.lock_ref == 0:
            # Adopt the incoming slots whole; the old full slots lost their peers long ago.
            actions.append(FreeSlots(FreeKind.KV_FULL_ONLY, full.value, node_value=True))
            full.value = incoming.copy()
            self.tree.slot_tensors.pop(node, None)  # holds the freed slots' array
        else:
            # Running requests read the locked full slots: they stay, taking over the peers.
            actions.append(FreeSlots(FreeKind.SWA_MOVE, np.stack([full.value, incoming])))
        self._publish(node, self.allocator.peers_of(incoming), end)  # checked by check_insert

    def _publish(self, node: TreeNode, swa: Slots, depth: int) -> None:
        node.data[self.index].value = swa
        self._credit(node, int(swa.shape[0]))
        self.lru.insert_mru(node)
        if self._reuse is not None:
            self._reuse.refreshed(node, depth, depth)

    def commit_insert(self, ins: InsertContext, node: TreeNode) -> None:
        if node.parent is None:
            return
        params = ins.params
        end = self._page_floor(len(params.key))  # the units the insert walked: `node`'s depth
        if ins.leaf_value is not None:
            self._commit_leaf(node, end, params)
        self._refresh_window(node, end)
        if self._reuse is not None and params.checkpoint_seqlens:
            walked = end - self.window - self.settings.page_size  # nodes ending above: refreshed
            self._reuse.inserted_past_checkpoints(node, end, params.checkpoint_seqlens, walked)

    def _commit_leaf(self, leaf: TreeNode, end: int, params: InsertParams) -> None:
        """Gives the new leaf live SWA from the request's cursor on, as at most one
        page-rounded window; the rest becomes parents (live ones, then a tombstone)::

            key:   [ ...... prefix ...... | below cursor | live ............ | window_tail ]
            nodes:  (existing)              tombstone      live parent         leaf
        """
        start = end - leaf.num_tokens
        live = min(end, max(start, params.swa_evicted_seqlen))
        if live == end:
            return
        if live > start:
            self.tree.split(leaf, live - start)
        if end - live > self.window_tail:
            parent = self.tree.split(leaf, end - live - self.window_tail)
            self._publish(parent, self._peers_of(parent), end - leaf.num_tokens)
        self._publish(leaf, self._peers_of(leaf), end)

    def _peers_of(self, node: TreeNode) -> Slots:
        full = node.data[0].value
        assert full is not None
        return self.allocator.peers_of(full)

    # ------------------------------------------------------------------ evict
    def eviction_priority(self, is_leaf: bool) -> int:
        return 0 if is_leaf else 1

    def eviction_candidates(self) -> Iterator[TreeNode]:
        order = self._reuse
        return self.lru.evict_oldest_unlocked() if order is None else order.candidates()

    def evict_node(self, node: TreeNode, actions: list[FreeSlots]) -> int:
        d, full = node.data[self.index], node.data[0].value
        assert d.value is not None and d.lock_ref == 0, f"SWA eviction of locked {node}"
        assert full is not None
        # Freed through the full slots: the allocator frees their peers and clears the map.
        actions.append(FreeSlots(FreeKind.SWA, full, node_value=True))
        num = int(d.value.shape[0])
        self.evictable_tokens -= num
        d.value = None
        mark_evicted(d)
        self.lru.remove(node)
        if self._reuse is not None:
            self._reuse.forget(node)
        return num

    # ------------------------------------------------------------------ lock
    def lock(self, node: TreeNode) -> tuple[int, int | None]:
        i, moved, covered = self.index, 0, 0
        marker: int | None = None
        for n in self.tree.path_to_root(node):
            d = n.data[i]
            if d.lock_ref == 0 and d.value is not None:
                moved += int(d.value.shape[0])
            d.lock_ref += 1
            covered += n.num_tokens
            if covered >= self.window:
                if d.metadata is None:
                    d.metadata = {}
                if _UUID not in d.metadata:
                    d.metadata[_UUID] = next(self._uuids)
                marker = d.metadata[_UUID]
                break
        self._protect(moved)
        return moved, marker

    def unlock(self, node: TreeNode, marker: int | None) -> None:
        """Walks up from `node` to the node carrying `marker` (to the root when None)."""
        i, moved = self.index, 0
        for n in self.tree.path_to_root(node):
            d = n.data[i]
            assert d.lock_ref > 0, f"SWA unlock of {n} with lock_ref=0"
            meta = d.metadata
            at_boundary = marker is not None and meta is not None and meta.get(_UUID) == marker
            d.lock_ref -= 1
            if d.lock_ref == 0:
                if d.value is not None:
                    moved += int(d.value.shape[0])
                if meta:
                    meta.pop(_UUID, None)
            if at_boundary:
                break
        self._protect(-moved)

    def release_window_lock(self, req: Req, node: TreeNode, marker: int | None) -> bool:
        """Releases the window lock once every cached position of `req` has left its window
        (the full lock stays); before that it does nothing, so calling it each step is fine."""
        if self._window_start(req) < req.cache_protected_len:
            return False
        self.unlock(node, marker)
        return True

    # ------------------------------------------------------------------ requests
    def _window_start(self, req: Req) -> int:
        """First position whose SWA KV `req` may still read: the next token's window, and the
        last window of the page-aligned key `req` will be cached under, stay live; so does
        the window ending at each of `req.checkpoint_seqlens` within one window back."""
        committed = req.kv_committed_len  # inline page floor: runs twice per request per step
        end = committed - committed % self.settings.page_size
        start = end - self.window_tail
        for c in req.checkpoint_seqlens:
            # The window ending at a checkpoint stays while it is at most one window back.
            if start <= c <= end and c - self.window_tail < start:
                start = c - self.window_tail
        return start

    def free_out_of_window(self, req: Req, row: Slots, actions: list[FreeSlots]) -> int:
        """Frees the SWA slots of `req`'s own positions `[cursor, window start)` and moves the
        cursor there (positions below `cache_protected_len` are the tree's to evict).

        Example (W=4, page 1): 20 computed tokens, 8 cached, cursor 0 -> positions [8, 16)
        lose their SWA slots and the cursor becomes 16."""
        if self._reuse is not None:
            self._reuse.request_step(req)
        start, cursor = self._window_start(req), req.swa_evicted_seqlen
        if start <= cursor:
            return 0
        req.swa_evicted_seqlen = start
        lo = max(cursor, req.cache_protected_len)
        if start <= lo:
            return 0
        actions.append(FreeSlots(FreeKind.SWA, row[lo:start]))
        return start - lo

    # ------------------------------------------------------------------ sessions
    def session_coverage(self, leaf: TreeNode) -> Iterable[TreeNode]:
        """The window the next turn reads, plus one page before the leaf."""
        limit, covered = self.window + self.settings.page_size, 0
        for n in self.tree.path_to_root(leaf):
            if covered >= limit:
                break
            yield n
            covered += n.num_tokens

    def check_invariants(self, errors: list[str]) -> None:
        super().check_invariants(errors)
        i, listed = self.index, 0
        for node in self.tree.nodes():
            d, full = node.data[i], node.data[0].value
            peers = None if full is None else self.allocator.translate(full)
            if d.value is None:
                if node in self.lru:
                    errors.append(f"swa: tombstone {node} is in the SWA LRU")
                if peers is not None and bool((peers > 0).any()):
                    errors.append(f"swa: tombstone {node} has full slots with SWA peers")
            else:
                listed += 1
                if d.value.shape[0] != node.num_tokens:
                    errors.append(f"swa: {node} holds {d.value.shape[0]} slots")
                if node not in self.lru:
                    errors.append(f"swa: {node} has SWA KV but is not in the SWA LRU")
                if peers is not None and not np.array_equal(peers, d.value):
                    errors.append(f"swa: {node} SWA slots are not its full slots' peers")
            if d.lock_ref == 0 and d.metadata and _UUID in d.metadata:
                errors.append(f"swa: unlocked {node} keeps a lock boundary uuid")
        if listed != len(self.lru):
            errors.append(f"swa: LRU lists {len(self.lru)} nodes, {listed} have SWA KV")
        if self._reuse is not None:
            self._reuse.check_invariants(errors)
