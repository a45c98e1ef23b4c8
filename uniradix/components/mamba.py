"""MambaComponent: SSM state checkpoints, one slot on some nodes of the tree.

A Mamba layer cannot resume from "the KV of a prefix": it needs the one state the prefix left
behind. So a node's value is a 1-element int64 tensor `[slot]` holding the state after the
whole prefix ending at that node, and only *checkpoint* nodes carry one:

- a match may end only at a node holding a state (the validator); past it the full KV may
  still match, and `mamba_branching_seqlen` tells the engine where to checkpoint next;
- a split gives the new parent nothing (no state exists for the shorter prefix);
- a lock protects the anchor node's state only (a request resumes from that one state);
- eviction takes states in the order `aux_eviction_policy` names (`uniradix.eviction.orders`;
  under `lru` a match refreshes only the state it used, so one session's states do not age
  together), leaving tombstones on internal nodes;
- `mamba_max_states_per_path` caps the states along a path: on each new state the
  shallowest unlocked single-child holders lose theirs (forks are where branches resume);
- states stored and those a match resumed from (once each) are counted, also apart for
  *finish states* (published by a finished request, `note_finish_state`): the two shares
  tell a scheduler whether checkpointing decode outputs pays (`uniradix.sim.placement`).

The ledgers count slots (`value_len` is 1). The slots themselves, and the copy-on-write of a
matched state into a request's own slot, belong to the cache (`uniradix.cache.mamba_requests`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from uniradix.components.base import TreeComponent, mark_evicted
from uniradix.eviction.orders import mamba_order
from uniradix.tree.core import MatchWalk, TreeCore
from uniradix.tree.lru import LRUList
from uniradix.tree.node import TreeNode
from uniradix.types import (
    CacheSettings,
    ComponentType,
    FreeKind,
    FreeSlots,
    InsertContext,
    MatchPrefixParams,
    Slots,
)


@dataclass
class ReuseCounts:
    """States stored and those a match resumed from, in all and for finish states."""

    stored: int = 0
    resumed: int = 0
    finish_stored: int = 0
    finish_resumed: int = 0


class MambaComponent(TreeComponent):
    component_type = ComponentType.MAMBA

    def __init__(self, index: int, tree: TreeCore, settings: CacheSettings) -> None:
        super().__init__(index, tree, settings)
        chunk, cap = settings.mamba_cache_chunk_size, settings.mamba_max_states_per_path
        if not isinstance(chunk, int) or chunk < 1:
            raise ValueError(f"mamba_cache_chunk_size must be an int >= 1, got {chunk!r}")
        if cap is not None and (not isinstance(cap, int) or cap < 1):
            raise ValueError(f"mamba_max_states_per_path must be None or >= 1, got {cap!r}")
        if settings.is_eagle:
            raise ValueError("EAGLE bigram keys are not supported with a Mamba component")
        self.checkpoint_grid = math.lcm(chunk, settings.page_size)
        self._slot_values: dict[int, Slots] = {}
        self.max_states_per_path = cap
        self.lru = LRUList(index, tree.num_components)
        self._unresumed: set[TreeNode] = set()  # live states no match resumed from yet
        self._finish_states: set[TreeNode] = set()  # those of them a finished request stored
        self.reuse_counts = ReuseCounts()
        self._credits = mamba_order(self, settings.aux_eviction_policy)  # None: LRU order

    def attach_peers(self, components: Sequence[TreeComponent]) -> None:
        """Tells the order where the SWA window lives, if the cache has one."""
        for c in components:
            window = getattr(c, "window", None)
            # A peer of SWA type without a window (a test stub) has no window to check.
            is_swa = c.component_type == ComponentType.SWA and isinstance(window, int)
            if self._credits is not None and is_swa:
                assert isinstance(window, int)
                self._credits.swa = (c.index, window)

    def reset(self) -> None:
        super().reset()
        self.lru = LRUList(self.index, self.tree.num_components)
        self._unresumed.clear()
        self._finish_states.clear()
        self.reuse_counts = ReuseCounts()
        if self._credits is not None:
            self._credits.reset()

    def slot(self, node: TreeNode) -> int | None:
        value = node.data[self.index].value
        return None if value is None else int(value[0])

    # ------------------------------------------------------------------ match
    match_requires_value = True  # a match resumes from a state: it ends on a node with one

    def finalize_match(self, walk: MatchWalk, params: MatchPrefixParams) -> dict[str, Any]:
        num_accepted, path = walk.num_accepted, walk.path
        grid = self.checkpoint_grid
        aligned = walk.matched_len // grid * grid
        if not num_accepted:
            return {"mamba_branching_seqlen": aligned or None}
        anchor = path[num_accepted - 1]
        self.lru.move_to_mru(anchor)
        if anchor in self._unresumed:  # its first resume: each state counts once
            self._unresumed.remove(anchor)
            self.reuse_counts.resumed += 1
            if anchor in self._finish_states:
                self._finish_states.remove(anchor)
                self.reuse_counts.finish_resumed += 1
        if self._credits is not None:
            self._credits.touch(anchor, resumed=True)
        if num_accepted == len(path):  # the whole walk is usable: nothing past it to branch at
            return {"mamba_branching_seqlen": None}
        device_len = 0
        for i in range(num_accepted):  # a loop, not a generator: runs per match
            device_len += path[i].num_tokens
        return {"mamba_branching_seqlen": aligned if aligned > device_len else None}

    # ------------------------------------------------------------------ split
    def redistribute_on_split(self, parent: TreeNode, child: TreeNode, split_len: int) -> None:
        """The new parent's data stays empty: no state exists for the shorter prefix."""

    # ------------------------------------------------------------------ insert
    def commit_insert(self, ins: InsertContext, node: TreeNode) -> None:
        """Attaches `ins.params.mamba_value` to `node` unless it holds a state already (then
        the cache reports `mamba_exist` and the caller keeps, and must free, its slot)."""
        value = ins.params.mamba_value
        if value is None or node is self.tree.root:
            return
        d = node.data[self.index]
        fresh = d.value is None
        if fresh:
            d.value = self._state_value(value.tolist()[0])  # checked: one int64 slot
            if d.lock_ref > 0:  # `_credit(node, 1)` inline: runs on every insert
                self.protected_tokens += 1
            else:
                self.evictable_tokens += 1
            self.lru.insert_mru(node)
            self.reuse_counts.stored += 1
            self._unresumed.add(node)
        else:
            self.lru.move_to_mru(node)
        if self._credits is not None:
            self._credits.touch(node)
        if fresh and self.max_states_per_path is not None:
            self._cap_path_states(node, ins.actions)

    def note_finish_state(self, node: TreeNode) -> None:
        """`node`'s state was just stored by a finished request's publish: one more finish
        state, counted as resumed from when a match first resumes from it."""
        if node not in self._unresumed:
            raise ValueError(f"note_finish_state: {node} holds no newly stored Mamba state")
        self._finish_states.add(node)
        self.reuse_counts.finish_stored += 1

    def _state_value(self, slot: int) -> Slots:
        """The node value holding state `slot`: one read-only array per slot, made on first
        use (a slot is on one node at a time; a value is never written, only freed)."""
        value = self._slot_values.get(slot)
        if value is None:
            value = self._slot_values[slot] = np.array([slot], dtype=np.int64)
            value.flags.writeable = False
        return value

    def _cap_path_states(self, tail: TreeNode, actions: list[FreeSlots]) -> None:
        cap = self.max_states_per_path
        assert cap is not None
        holders = [n for n in self.tree.path_to_root(tail) if self.has_value(n)]
        excess = len(holders) - cap
        for node in reversed(holders):
            if excess <= 0:
                break
            if node is tail or node.data[self.index].lock_ref > 0 or len(node.children) != 1:
                continue
            self.evict_node(node, actions)
            excess -= 1

    # ------------------------------------------------------------------ evict
    def eviction_priority(self, is_leaf: bool) -> int:
        return 0

    def eviction_candidates(self) -> Iterator[TreeNode]:
        order = self._credits
        return self.lru.evict_oldest_unlocked() if order is None else order.candidates()

    def evict_node(self, node: TreeNode, actions: list[FreeSlots]) -> int:
        d = node.data[self.index]
        assert d.value is not None and d.lock_ref == 0, f"Mamba eviction of locked {node}"
        actions.append(FreeSlots(FreeKind.MAMBA, d.value))
        self.evictable_tokens -= 1
        d.value = None
        mark_evicted(d)
        self.lru.remove(node)
        self._unresumed.discard(node)
        self._finish_states.discard(node)
        if self._credits is not None:
            self._credits.forget(node)
        return 1

    # ------------------------------------------------------------------ lock
    def lock(self, node: TreeNode) -> tuple[int, int | None]:
        if node is self.tree.root:
            return 0, None
        d = node.data[self.index]
        delta = 0
        if d.lock_ref == 0 and d.value is not None:
            self._protect(1)
            delta = 1
        d.lock_ref += 1
        return delta, None

    def unlock(self, node: TreeNode, marker: int | None) -> None:
        if node is self.tree.root:
            return
        d = node.data[self.index]
        assert d.lock_ref > 0, f"Mamba release of {node} with lock_ref=0"
        d.lock_ref -= 1
        if d.lock_ref == 0 and d.value is not None:
            self._protect(-1)

    # ------------------------------------------------------------------ sessions
    def session_coverage(self, leaf: TreeNode) -> Iterable[TreeNode]:
        """Only the state the next turn resumes from: the leaf's."""
        return () if leaf is self.tree.root else (leaf,)

    # ------------------------------------------------------------------ checks
    def check_invariants(self, errors: list[str]) -> None:
        super().check_invariants(errors)
        i = self.index
        holders = set()
        for node in self.tree.nodes():
            d = node.data[i]
            if d.value is not None:
                holders.add(node)
                if d.value.dtype != np.int64 or d.value.shape != (1,):
                    errors.append(f"mamba: {node} value {d.value!r} is not one int64 slot")
            if d.lock_ref > node.data[0].lock_ref:
                errors.append(f"mamba: {node} lock_ref={d.lock_ref} exceeds its full lock_ref")
        if self._credits is not None:
            self._credits.check_invariants(errors)
        if not self._finish_states <= self._unresumed <= holders:
            stale = sorted(n.id for n in (self._finish_states | self._unresumed) - holders)
            errors.append(f"mamba: unresumed or finish states listed on nodes {stale}")
        counts = self.reuse_counts
        if counts.finish_stored > counts.stored or counts.finish_resumed > counts.resumed:
            errors.append(f"mamba: finish states counted beyond all states: {counts}")
        root = self.tree.root.data[i]
        if root.value is not None or root.lock_ref:
            errors.append("mamba: the root holds a state or a lock")
        listed = list(self.lru)
        if len(listed) != len(self.lru) or set(listed) != holders:
            errors.append(
                f"mamba: LRU lists {sorted(n.id for n in listed)} (size {len(self.lru)}), "
                f"state holders are {sorted(n.id for n in holders)}"
            )
