"""SGLang's eviction walk over one auxiliary component's LRU list (SWA windows, Mamba
states), shared by `swa.py` and `mamba.py`.

SGLang's controller drives the walk one node at a time: the least recent unlocked node
holding the component is either an evictable leaf, handed to the controller (which evicts
the whole node), or an inner node, which loses the component's value here (a tombstone). The
cursor survives between steps, so a node the controller removed meanwhile restarts the walk
from the least recent end. A component may hold an inner node back for a backup first
(`backup_first`: SGLang's `InternalStateBackup`); the controller finishes it once the backup ran.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

import torch

from uniradix.tree.core import TreeCore
from uniradix.tree.lru import LRUList
from uniradix.tree.node import TreeNode


class LruEvictionWalk(ABC):
    """The walk's cursor and quota; a component supplies `lru`, `tree` and `tombstone`."""

    lru: LRUList
    tree: TreeCore
    _cursor: TreeNode | None = None
    _quota = 0
    deferred: TreeNode | None = None  # an inner node held back until its backup ran
    # The host tier's hook (write-back): whether an inner node waits for a backup before it
    # loses its value.
    backup_first: Callable[[TreeNode], bool] | None = None

    @abstractmethod
    def tombstone(
        self, node: TreeNode, device_frees: dict[Any, list[torch.Tensor]], tracker: dict[Any, int]
    ) -> None:
        """Drops the component's value of the inner `node`, counting it in `tracker`."""

    def evict_start(self, quota: int) -> None:
        self._quota = quota
        self._cursor = self.lru.least_recent_unlocked()

    def evict_next(
        self, evicted: int, device_frees: dict[Any, list[torch.Tensor]], tracker: dict[Any, int]
    ) -> TreeNode | None:
        """One step: an evictable leaf for the controller, or None after tombstoning one
        node or once `evicted` reached the quota or no unlocked node is left."""
        lru = self.lru
        if self._cursor is not None and self._cursor not in lru:
            self._cursor = lru.least_recent_unlocked()
        node = self._cursor
        if evicted >= self._quota or node is None:
            return None
        self._cursor = lru.least_recent_unlocked(node)
        if node in self.tree.leaves:
            return node
        if self.backup_first is not None and self.backup_first(node):
            self.deferred = node
            return None
        self.tombstone(node, device_frees, tracker)
        self.tree.update_leaf(node)
        return None

    def resume_at(self, node: TreeNode) -> None:
        """The walk's next step offers `node` again (it changed while held back)."""
        self._cursor = node

    def evict_end(self) -> None:
        self._cursor = None
        self._quota = 0
        self.deferred = None
