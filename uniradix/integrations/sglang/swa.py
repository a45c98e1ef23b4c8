"""The tree side of SGLang's SWA component, on uniradix's tree (component index 1).

SGLang's `SWAComponent` keeps its pools and translations on the controller side; what it keeps
on tree nodes is done here, with SGLang's semantics, so the uniradix core answers as SGLang's
Python core does on the same calls:

- a node's SWA value (SWA pool slots) may be dropped while its full KV stays: a tombstone;
- a match may end at a node only when the `window` tokens before its end hold SWA (a
  tombstone resets the run; with `gates` off a tombstone still ends a match);
- a lock covers the window only: from the anchor up until `window` tokens are covered,
  tombstones included; the topmost node carries a uuid where the release stops;
- the SWA LRU is refreshed, at the end of a match or an insert, for the node and the
  ancestors within `window + page` tokens (deepest most recent); a split puts the new parent
  right behind its child;
- an insert over a tombstone inside the request's live window recovers it from the request's
  slots; a new leaf keeps SWA from the window start on, its in-window part capped at one
  page-rounded window (the older part split off into a parent), so a lock pins one window;
- SWA eviction walks the LRU (`walk.py`): an evictable leaf is handed to the controller (it
  evicts the whole node), any other node is tombstoned, its Mamba state with it.

SWA values are SWA pool slots the controller computes (`SWARebuild` and the recover actions)
and hands back through `set_value`; the node keeps that tensor, as SGLang's cores do (the
controller hands it over; a host copy per call cost more than the rest of the call). Freeing
a node's SWA frees it by the node's full slots, which SGLang's allocator maps to their SWA
peers.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator
from typing import Any

import torch
from sglang.srt.mem_cache.unified_cache.cache_action import (
    FreeDeviceKV,
    FreeDeviceKVFullOnly,
    RecoverSWAWithLockedFull,
    SWARebuild,
)
from sglang.srt.mem_cache.unified_cache.component_type import ComponentType

from uniradix.integrations.sglang.keys import to_slots, to_tensor
from uniradix.integrations.sglang.ledger import ComponentLedger
from uniradix.integrations.sglang.mamba import MAMBA, MambaTree
from uniradix.integrations.sglang.walk import LruEvictionWalk
from uniradix.tree.acceptance import Validator
from uniradix.tree.core import OverlapHook, TreeCore
from uniradix.tree.lru import LRUList
from uniradix.tree.node import ComponentData, TreeNode

FULL_INDEX, SWA_INDEX = 0, 1
SWA = ComponentType.SWA
FULL = ComponentType.FULL
_UUID = "uuid"


def lock_window(
    node: TreeNode,
    window: int,
    pin: Callable[[TreeNode, ComponentData], None],
    tag: str,
    uuids: Iterator[int],
) -> int | None:
    """Pins (`pin`) the SWA data of `node` and its ancestors up to `window` tokens, tombstones
    included; the topmost node carries a boundary uuid under `tag` (drawn from `uuids`, kept
    if it has one) where a release stops. Returns it (None: the root came first). Shared by
    the device lock and the host tier's, which differ only in what a pin does."""
    covered, boundary = 0, None
    while node.parent is not None and covered < window:
        data = node.data[SWA_INDEX]
        pin(node, data)
        covered += node.num_tokens
        if covered >= window:
            if data.metadata is None:
                data.metadata = {}
            boundary = data.metadata.get(tag)
            if boundary is None:
                boundary = data.metadata[tag] = next(uuids)
        node = node.parent
    return boundary


class SwaTree(ComponentLedger, LruEvictionWalk):
    def __init__(self, window: int, page_size: int, gates: bool, device: torch.device) -> None:
        self.index = SWA_INDEX
        self.window = window
        self.page_size = page_size
        self.gates = gates
        self.device = device
        # The in-window part of a new leaf: the smallest whole number of pages covering it.
        self.window_tail = -(-window // page_size) * page_size
        self._uuids = itertools.count(1)
        self.mamba: MambaTree | None = None  # set by the core of a FULL+SWA+Mamba cache
        # The host tier's hooks (`host_swa.py`): a node's SWA left / reached the device; the
        # walk's `backup_first` (write-back) is set there too.
        self.on_drop: Callable[[TreeNode], None] | None = None
        self.on_store: Callable[[TreeNode], None] | None = None

    def reset(self, tree: TreeCore) -> None:
        self.tree = tree
        self.lru = LRUList(SWA_INDEX, tree.num_components)
        self.evictable = 0
        self.protected = 0
        self.evict_end()

    def _full_tensor(self, node: TreeNode) -> torch.Tensor:
        value = node.data[FULL_INDEX].value
        assert value is not None, f"{node} has no full value"
        return to_tensor(value, self.device)

    # ------------------------------------------------------------------ match
    def match_windows(self) -> tuple[tuple[int, int], ...]:
        """With gates on, the rule `validator` applies, as the tree walk's inline `windows`
        check; with gates off a tombstone does not end a match, which needs the validator."""
        return ((SWA_INDEX, self.window),) if self.gates else ()

    def validator(self) -> Validator:
        run = math.inf  # live SWA tokens ending at the node; no tombstone seen yet: unbounded

        def validate(node: TreeNode) -> bool:
            nonlocal run
            if node.data[SWA_INDEX].value is None:
                run = 0
                return not self.gates
            run += node.num_tokens
            return run >= self.window

        return validate

    def refresh_window(self, node: TreeNode) -> None:
        """The node and its ancestors within `window + page` tokens that hold SWA become the
        most recent, the deepest first."""
        lru, prev, covered = self.lru, self.lru.head, 0
        limit = self.window + self.page_size
        while node.parent is not None and covered < limit:
            data = node.data[SWA_INDEX]
            if data.value is not None:
                # Mostly in place already (the window was refreshed last): no call then.
                if data.lru_prev is not prev:
                    lru.place_after(prev, node)
                prev = node
            covered += node.num_tokens
            node = node.parent

    # ------------------------------------------------------------------ values
    def set_value(self, node: TreeNode, value: torch.Tensor) -> None:
        if node.data[SWA_INDEX].value is not None:
            raise ValueError(f"node {node.id} already holds an SWA value")
        if self.on_store is not None:
            self.on_store(node)
        self.store(node, value)

    def redistribute_on_split(self, parent: TreeNode, child: TreeNode, split_len: int) -> None:
        old, new = child.data[SWA_INDEX], parent.data[SWA_INDEX]
        new.lock_ref = old.lock_ref
        if old.value is not None:
            new.value, old.value = old.value[:split_len], old.value[split_len:]
            self.lru.insert_after(child, parent)
        # The lock boundary marks the segment's older edge, which moves to the parent.
        if old.metadata and _UUID in old.metadata:
            new.metadata = {_UUID: old.metadata.pop(_UUID)}

    def drop(self, node: TreeNode, device_frees: dict[Any, list[torch.Tensor]]) -> int:
        """Tombstones the node's SWA (unlocked); its full slots name the SWA peers to free."""
        size = self.release(node, self._full_tensor(node), SWA, device_frees)
        if self.on_drop is not None:
            self.on_drop(node)
        return size

    # ------------------------------------------------------------------ locks
    def lock(self, node: TreeNode) -> int | None:
        """Locks the window ending at `node`; returns the boundary uuid (None: the root)."""
        return lock_window(node, self.window, self.pin, _UUID, self._uuids)

    def unlock(self, node: TreeNode, boundary: int | None) -> None:
        while node.parent is not None:
            data = node.data[SWA_INDEX]
            self.unpin(node, data, "SWA")
            if boundary and data.metadata and data.metadata.get(_UUID) == boundary:
                return
            node = node.parent

    def release_window(
        self, node: TreeNode, boundary: int | None, device_frees: dict[Any, list[torch.Tensor]]
    ) -> None:
        """SGLang's early SWA release: as `unlock`, and a node left an evictable leaf loses its
        SWA at once (its request has moved past it)."""
        while node.parent is not None:
            data = node.data[SWA_INDEX]
            self.unpin(node, data, "SWA window")
            if data.lock_ref == 0 and data.value is not None and self.tree.is_evictable_leaf(node):
                self.drop(node, device_frees)
            if boundary and data.metadata and data.metadata.get(_UUID) == boundary:
                return
            node = node.parent

    # ------------------------------------------------------------------ insert
    def overlap_hook(
        self, value: torch.Tensor, params: Any, result: Any, actions: list[Any]
    ) -> OverlapHook:
        """For each node an insert's key already covers: tombstone recovery, then the
        request's duplicate slots past `prev_prefix_len` handed back; below the request's SWA
        eviction floor their SWA side is already free, so only their full side goes."""
        floor, swa_freed = params.prev_prefix_len, params.get_evicted_seqlen(SWA)

        def on_overlap(node: TreeNode, offset: int, units: int) -> None:
            if offset + units <= floor:  # inside the request's prefix: nothing to recover or free
                return
            consumed = self.recover_overlap(node, offset, value, params, result, actions)
            start, stop = max(offset, floor), offset + consumed
            if start < stop:
                duplicate = value[start:stop]
                full_only = min(max(swa_freed - start, 0), stop - start)
                if full_only > 0:
                    actions.append(FreeDeviceKVFullOnly([duplicate[:full_only]]))
                if full_only < stop - start:
                    actions.append(FreeDeviceKV([duplicate[full_only:]]))

        return on_overlap

    def recover_overlap(
        self,
        node: TreeNode,
        start: int,
        value: torch.Tensor,
        params: Any,
        result: Any,
        actions: list[Any],
    ) -> int:
        """An insert passes `node` (tokens `start:` of the key): a tombstone inside the
        request's live window takes the request's slots. Returns the offset in the node from
        which the request's slots were adopted (its length: none)."""
        units = node.num_tokens
        end = start + units
        if params.prev_prefix_len >= end or node.data[SWA_INDEX].value is not None:
            return units
        live = max(start, params.get_evicted_seqlen(SWA))
        if live >= end:
            return units
        if live > start:
            upper = self.tree.split(node, live - start)
            if end > params.inserted_len:  # the hit counts on the fragment walked, not above
                upper.hit_count -= 1
        result.record_adopted_range(SWA, live, end)
        incoming = value[live:end]
        full = node.data[FULL_INDEX]
        if full.lock_ref > 0:
            # A locked full value stays; the request's SWA pages move onto it.
            actions.append(RecoverSWAWithLockedFull(node.id, self._full_tensor(node), incoming))
        else:
            result.record_adopted_range(FULL, live, end)
            old = self._full_tensor(node)
            full.value = to_slots(incoming)
            actions.append(FreeDeviceKVFullOnly([old]))
            actions.append(SWARebuild(node.id, self._full_tensor(node)))
        return int(live) - start

    def commit_leaf(
        self,
        leaf: TreeNode,
        start: int,
        params: Any,
        result: Any,
        actions: list[Any],
        upper: TreeNode | None = None,
    ) -> None:
        """A new leaf (tokens `start:` of the key) gets SWA from the window start on.
        `upper`: its parent, new too, when the tree built the leaf capped already (the
        request's SWA all live: `TreeCore.insert`'s `leaf_tail`); the two hold tokens `start:`."""
        if upper is not None:
            older: TreeNode | None = upper
            live, end = start, start + upper.num_tokens + leaf.num_tokens
        else:
            end = start + leaf.num_tokens
            live = max(start, params.get_evicted_seqlen(SWA))
            if live >= end:
                return
            if live > start:
                self.tree.split(leaf, live - start)
            older = self._cap_leaf(leaf)
        # The older part publishes first, so the leaf ends the more recent.
        if older is not None:
            actions.append(SWARebuild(older.id, self._full_tensor(older)))
        actions.append(SWARebuild(leaf.id, self._full_tensor(leaf)))
        result.record_adopted_range(SWA, live, end)

    def _cap_leaf(self, leaf: TreeNode) -> TreeNode | None:
        if leaf.data[SWA_INDEX].lock_ref > 0 or leaf.num_tokens <= self.window_tail:
            return None
        return self.tree.split(leaf, leaf.num_tokens - self.window_tail)

    # ------------------------------------------------------------------ eviction
    def tombstone(
        self, node: TreeNode, device_frees: dict[Any, list[torch.Tensor]], tracker: dict[Any, int]
    ) -> None:
        tracker[SWA] += self.drop(node, device_frees)
        # Without its window a node's Mamba state can never be matched: it goes too.
        mamba = self.mamba
        if mamba is not None and node.data[mamba.index].value is not None:
            tracker[MAMBA] += mamba.drop(node, device_frees)

    def check(self, nodes: list[TreeNode]) -> None:
        """SGLang's sanity check, SWA part: ledgers and LRU membership match the nodes, and
        a window covers its whole node."""
        for node in nodes:
            value = node.data[SWA_INDEX].value
            assert value is None or len(value) == node.num_tokens, node
        self.check_ledger(nodes, "SWA")
