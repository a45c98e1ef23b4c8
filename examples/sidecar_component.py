"""A cache type added from outside the package: a *sidecar* component.

Some models keep, next to the full KV, one compressed entry per block of 128 tokens (a
compressed-attention summary, an indexer key). Such an entry exists only once its block is
complete and lives in its own pool. This module adds it to uniradix as a component, without
touching the tree:

- value of a node: the pool slots of the entries of the blocks that *end* inside the node's
  span `(start, end]` (an empty array when none ends there; `None`: dropped, a tombstone);
- match: a boundary only at a multiple of 128 tokens, with every entry up to it present;
- split: the entries go to the side their block ends in;
- insert: a new leaf takes the caller's entries for its blocks (`InsertParams.extra_values`);
  a dropped node is recovered from them; entries the tree already has are freed as duplicates;
- lock: the whole path (attention over the compressed blocks reads all of them);
- evict: its own LRU list; internal priority 0.5, between SWA (1) and Mamba (0): evicting SWA
  on a node drops its entries too, evicting entries drops the node's Mamba state.

    pool = TokenSlotAllocator(256)                       # 256 entries
    cache = build_cache(CacheConfig.of(...), extra_components=[("sidecar", pool)])
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from uniradix.components.base import TreeComponent
from uniradix.components.registry import register_component
from uniradix.memory.allocator import to_numpy
from uniradix.tree.acceptance import Validator
from uniradix.tree.core import TreeCore
from uniradix.tree.lru import LRUList
from uniradix.tree.node import TreeNode
from uniradix.types import CacheSettings, FreeSlots, InsertContext, InsertParams, Slots

BLOCK = 128
NAME = "sidecar"


@register_component
class SidecarComponent(TreeComponent):
    component_type = NAME

    def __init__(self, index: int, tree: TreeCore, settings: CacheSettings) -> None:
        super().__init__(index, tree, settings)
        if BLOCK % settings.page_size:
            raise ValueError(f"page_size={settings.page_size} must divide the block ({BLOCK})")
        self.lru = LRUList(index, tree.num_components)

    def reset(self) -> None:
        super().reset()
        self.lru = LRUList(self.index, self.tree.num_components)

    def _span(self, node: TreeNode) -> tuple[int, int]:
        end = self.tree.prefix_len(node)
        return end - node.num_tokens, end

    def has_value(self, node: TreeNode) -> bool:
        value = node.data[self.index].value  # a node holding no entry has nothing to evict
        return value is not None and value.shape[0] > 0

    def match_validator(self) -> Validator:
        i, pos, intact = self.index, 0, True

        def validate(node: TreeNode) -> bool:
            nonlocal pos, intact
            pos += node.num_tokens
            intact = intact and node.data[i].value is not None
            return intact and pos % BLOCK == 0

        return validate

    def redistribute_on_split(self, parent: TreeNode, child: TreeNode, split_len: int) -> None:
        c, p = child.data[self.index], parent.data[self.index]
        p.lock_ref = c.lock_ref
        if c.value is None:
            return
        start, _ = self._span(parent)
        num = (start + split_len) // BLOCK - start // BLOCK
        p.value, c.value = c.value[:num], c.value[num:]
        for node in (parent, child):
            if node in self.lru and not self.has_value(node):
                self.lru.remove(node)
        if self.has_value(parent):
            self.lru.insert_after(child if child in self.lru else self.lru.head, parent)

    # ------------------------------------------------------------------ insert
    def _incoming(self, params: InsertParams) -> Slots | None:
        value = (params.extra_values or {}).get(NAME)
        return None if value is None else to_numpy(value)

    def check_insert(self, ins: InsertContext) -> None:
        incoming, value = self._incoming(ins.params), ins.value
        if incoming is not None and incoming.shape[0] != value.shape[0] // BLOCK:
            raise ValueError(
                f"{NAME}: {incoming.shape[0]} entries for {value.shape[0]} tokens "
                f"(one per {BLOCK}-token block: {value.shape[0] // BLOCK})"
            )

    def insert_overlap(
        self, ins: InsertContext, node: TreeNode, offset: int, num_tokens: int
    ) -> int:
        params = ins.params
        incoming = self._incoming(params)
        if incoming is None:
            return num_tokens
        # An earlier hook (SWA) may have split the span: `node` is its deeper part.
        end = offset + num_tokens
        start = end - node.num_tokens
        owned_from = max(offset, params.prev_prefix_len)  # below: the tree's own entries
        if node.data[self.index].value is None and start >= params.prev_prefix_len:
            self._publish(node, incoming[start // BLOCK : end // BLOCK].copy())  # recover
            end = start
        duplicates = incoming[owned_from // BLOCK : end // BLOCK] if owned_from < end else None
        if duplicates is not None and duplicates.shape[0]:
            ins.actions.append(FreeSlots(NAME, duplicates))  # the tree has these entries already
        return num_tokens

    def commit_insert(self, ins: InsertContext, node: TreeNode) -> None:
        """Gives the new leaf's part of the key (which SWA may have split into several nodes)
        its entries, then splits it at every block boundary, so a match can stop there."""
        leaf_value = ins.leaf_value
        if leaf_value is None:
            return
        end = self.tree.prefix_len(node)
        start = end - leaf_value.shape[0]
        incoming = self._incoming(ins.params)
        pieces, n, covered = [], node, 0
        while covered < end - start:
            pieces.append(n)
            covered += n.num_tokens
            assert n.parent is not None
            n = n.parent
        for piece in reversed(pieces):  # root side first: the leaf ends most recent
            lo, hi = self._span(piece)
            if incoming is not None:
                self._publish(piece, incoming[lo // BLOCK : hi // BLOCK].copy())
            elif hi // BLOCK == lo // BLOCK:
                piece.data[self.index].value = np.empty(0, np.int64)  # no block ends here
        for piece in pieces:
            lo, hi = self._span(piece)
            for boundary in range(lo // BLOCK * BLOCK + BLOCK, hi, BLOCK):
                self.tree.split(piece, boundary - lo)  # `piece` keeps the deeper part
                lo = boundary

    def _publish(self, node: TreeNode, entries: Slots) -> None:
        node.data[self.index].value = entries
        self._credit(node, int(entries.shape[0]))
        if entries.shape[0]:
            self.lru.insert_mru(node)

    # ------------------------------------------------------------------ evict
    def eviction_priority(self, is_leaf: bool) -> float:
        return 0 if is_leaf else 0.5

    def eviction_candidates(self) -> Iterator[TreeNode]:
        while (node := self.lru.least_recent_unlocked()) is not None:
            yield node

    def evict_node(self, node: TreeNode, actions: list[FreeSlots]) -> int:
        d = node.data[self.index]
        assert d.value is not None and d.lock_ref == 0, f"{NAME}: eviction of locked {node}"
        num = int(d.value.shape[0])
        if num:
            actions.append(FreeSlots(NAME, d.value, node_value=True))
            self.lru.remove(node)
        self.evictable_tokens -= num
        d.value = None
        return num

    # ------------------------------------------------------------------ lock
    def lock(self, node: TreeNode) -> tuple[int, int | None]:
        moved = 0
        for n in self.tree.path_to_root(node):
            d = n.data[self.index]
            if d.lock_ref == 0 and d.value is not None:
                moved += int(d.value.shape[0])
            d.lock_ref += 1
        self._protect(moved)
        return moved, None

    def unlock(self, node: TreeNode, marker: int | None) -> None:
        moved = 0
        for n in self.tree.path_to_root(node):
            d = n.data[self.index]
            assert d.lock_ref > 0, f"{NAME}: unlock of {n} with lock_ref=0"
            d.lock_ref -= 1
            if d.lock_ref == 0 and d.value is not None:
                moved += int(d.value.shape[0])
        self._protect(-moved)

    # ------------------------------------------------------------------ checks
    def check_invariants(self, errors: list[str]) -> None:
        super().check_invariants(errors)
        holders = set()
        for node in self.tree.nodes():
            value = node.data[self.index].value
            if value is None:
                continue
            start, end = self._span(node)
            if value.shape[0] != end // BLOCK - start // BLOCK:
                errors.append(f"{NAME}: {node} holds {value.shape[0]} entries for ({start}, {end}]")
            if value.shape[0]:
                holders.add(node)
        if set(self.lru) != holders or len(self.lru) != len(holders):
            errors.append(f"{NAME}: LRU list differs from the nodes holding entries")
