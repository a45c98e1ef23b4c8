"""The bookkeeping SGLang's SWA and Mamba components share on uniradix's tree: a value per
node at the component's index, the LRU list of the nodes holding one, and the evictable and
protected sizes SGLang's controller reads (a value counts as protected while a lock holds
it). `swa.py` and `mamba.py` decide when values come and go; this keeps the three in step
and checks them. Values are the controller's 1-D slot tensors (typed `Any` here: the tree
types its values as host arrays, which component 0 keeps); their size is read with `numel()`,
a quarter of the cost of `len()` on a tensor (these run on every insert, lock and eviction
step).
"""

from __future__ import annotations

from typing import Any

import torch

from uniradix.tree.core import TreeCore
from uniradix.tree.lru import LRUList
from uniradix.tree.node import ComponentData, TreeNode


class ComponentLedger:
    """A component supplies `index`, `lru`, `tree` and the two sizes."""

    index: int
    lru: LRUList
    tree: TreeCore
    evictable: int
    protected: int

    def store(self, node: TreeNode, slots: Any) -> None:
        """`node` (holding none) takes `slots`, the most recent of the LRU list."""
        data = node.data[self.index]
        data.value = slots
        self.lru.insert_mru(node)
        # A value that arrives under a lock is protected; the last release makes it evictable.
        if data.lock_ref > 0:
            self.protected += slots.numel()
        else:
            self.evictable += slots.numel()

    def release(
        self, node: TreeNode, freed: torch.Tensor, component: Any, frees: dict[Any, Any]
    ) -> int:
        """Drops the unlocked `node`'s value, handing `freed` (the pool slots that free it) to
        `frees[component]`; returns the value's size."""
        data = node.data[self.index]
        value: Any = data.value
        assert value is not None
        size: int = value.numel()
        frees[component].append(freed)
        self.evictable -= size
        data.value = None
        self.lru.remove(node)
        return size

    def pin(self, node: TreeNode, data: ComponentData) -> None:
        """One more lock on `node`'s value (`data`): the first makes it protected."""
        value: Any = data.value
        if data.lock_ref == 0 and value is not None:
            size = value.numel()
            self.evictable -= size
            self.protected += size
        data.lock_ref += 1

    def unpin(self, node: TreeNode, data: ComponentData, what: str) -> None:
        """One lock less on `node`'s value (`data`): the last makes it evictable."""
        if data.lock_ref <= 0:
            raise ValueError(f"{what} release on unlocked node {node.id}")
        value: Any = data.value
        if data.lock_ref == 1 and value is not None:
            size = value.numel()
            self.evictable += size
            self.protected -= size
        data.lock_ref -= 1
        if data.lock_ref == 0:
            self.tree.update_leaf(node)

    def check_ledger(self, nodes: list[TreeNode], what: str) -> None:
        """The LRU list holds exactly the `nodes` with a value, and the two sizes are their
        values' sizes, split by lock (`what` names the component in the failure)."""
        evictable = protected = 0
        for node in nodes:
            data = node.data[self.index]
            assert (data.value is not None) == (node in self.lru), node
            if data.value is None:
                continue
            if data.lock_ref:
                protected += len(data.value)
            else:
                evictable += len(data.value)
        assert (evictable, protected) == (self.evictable, self.protected), (
            f"{what} sizes {(self.evictable, self.protected)} != tree {(evictable, protected)}"
        )
