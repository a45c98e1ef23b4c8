"""FullComponent: full-attention KV, the base component deciding node liveness.

Every token of a cached prefix keeps its full KV, so a node's value is the KV slots of
exactly its key units. Locks protect the whole path to the root (attention reads all of it).
Eviction takes evictable leaves in eviction-policy order; an internal node's KV cannot go
while a child needs it.
"""

from __future__ import annotations

from collections.abc import Iterator

from uniradix.components.base import TreeComponent
from uniradix.slots import whole_pages
from uniradix.tree.node import TreeNode
from uniradix.types import ComponentType, FreeKind, FreeSlots, InsertContext


class FullComponent(TreeComponent):
    component_type = ComponentType.FULL

    def redistribute_on_split(self, parent: TreeNode, child: TreeNode, split_len: int) -> None:
        i = self.index
        c, p = child.data[i], parent.data[i]
        assert c.value is not None, f"split of {child} without full KV"
        p.value, c.value = c.value[:split_len], c.value[split_len:]
        p.lock_ref = c.lock_ref

    def commit_insert(self, ins: InsertContext, node: TreeNode) -> None:
        leaf_value = ins.leaf_value
        if leaf_value is not None:
            node.data[self.index].value = leaf_value
            self.evictable_tokens += leaf_value.shape[0]  # a new leaf: nothing locks it yet

    def eviction_priority(self, is_leaf: bool) -> int:
        return 0 if is_leaf else 2

    def eviction_candidates(self) -> Iterator[TreeNode]:
        leaves = self.tree.leaves
        while (node := leaves.pop()) is not None:
            yield node

    def evict_node(self, node: TreeNode, actions: list[FreeSlots]) -> int:
        d = node.data[self.index]
        assert d.value is not None and d.lock_ref == 0, f"full eviction of locked {node}"
        num = int(d.value.shape[0])
        actions.append(FreeSlots(FreeKind.KV, d.value, node_value=True))
        self.evictable_tokens -= num
        d.value = None
        self.tree.slot_tensors.pop(node, None)  # a match's tensor of the freed slots: drop it
        return num

    def lock(self, node: TreeNode) -> tuple[int, int | None]:
        i, delta = self.index, 0
        for n in self.tree.path_to_root(node):
            d = n.data[i]
            if d.lock_ref == 0:
                assert d.value is not None, f"full lock on evicted {n}"
                delta += d.value.shape[0]
            d.lock_ref += 1
        self._protect(delta)
        return delta, None

    def unlock(self, node: TreeNode, marker: int | None) -> None:
        i, delta = self.index, 0
        for n in self.tree.path_to_root(node):
            d = n.data[i]
            assert d.lock_ref > 0, f"full unlock of {n} with lock_ref=0"
            d.lock_ref -= 1
            if d.lock_ref == 0 and d.value is not None:
                delta += d.value.shape[0]
        self._protect(-delta)

    def check_invariants(self, errors: list[str]) -> None:
        super().check_invariants(errors)
        i, ps = self.index, self.tree.page_size
        for node in self.tree.nodes():
            d = node.data[i]
            if d.value is None:
                errors.append(f"full: {node} in the tree without full KV")
            elif d.value.shape[0] != node.num_tokens:
                errors.append(
                    f"full: {node} holds {d.value.shape[0]} slots for {node.num_tokens} units"
                )
            elif ps > 1 and d.value.shape[0] and not whole_pages(d.value, ps):
                # Frees of node values and of an insert's duplicates read one slot per page.
                errors.append(f"full: {node} value is not whole pages: {d.value[:32].tolist()}")
            parent = node.parent
            if (
                parent is not self.tree.root
                and parent is not None
                and parent.data[i].lock_ref < d.lock_ref
            ):
                errors.append(f"full: {node} lock_ref={d.lock_ref} exceeds its parent's")
