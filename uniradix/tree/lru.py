"""Intrusive doubly linked LRU list of tree nodes, one per component.

The links live in `node.data[index].lru_prev/lru_next`, so membership tests, removal and
move-to-front are O(1) with no dict or deque bookkeeping::

    head <-> most recent <-> ... <-> least recent <-> tail

`least_recent_unlocked()` gives the next eviction candidate, skipping locked nodes.
"""

from __future__ import annotations

from collections.abc import Iterator

from uniradix.tree.node import TreeNode


class LRUList:
    def __init__(self, index: int, num_components: int) -> None:
        self.index = index
        self.head = TreeNode(-1, b"", None, num_components, None, 0)
        self.tail = TreeNode(-2, b"", None, num_components, None, 0)
        self.head.data[index].lru_next = self.tail
        self.tail.data[index].lru_prev = self.head
        self.size = 0

    def __len__(self) -> int:
        return self.size

    def __contains__(self, node: TreeNode) -> bool:
        return node.data[self.index].lru_prev is not None

    def insert_mru(self, node: TreeNode) -> None:
        """`insert_after(head, node)` inline: runs on every state a Mamba insert keeps."""
        i, head = self.index, self.head
        first = head.data[i].lru_next
        assert first is not None
        d = node.data[i]
        d.lru_prev, d.lru_next = head, first
        head.data[i].lru_next = node
        first.data[i].lru_prev = node
        self.size += 1

    def insert_after(self, prev: TreeNode, node: TreeNode) -> None:
        """Links `node` (not in the list) right behind `prev` in recency."""
        i = self.index
        nxt = prev.data[i].lru_next
        assert nxt is not None, "insert_after: prev is not in the list"
        d = node.data[i]
        d.lru_prev, d.lru_next = prev, nxt
        prev.data[i].lru_next = node
        nxt.data[i].lru_prev = node
        self.size += 1

    def remove(self, node: TreeNode) -> None:
        i = self.index
        d = node.data[i]
        prev, nxt = d.lru_prev, d.lru_next
        assert prev is not None and nxt is not None, f"{node} is not in LRU list {i}"
        prev.data[i].lru_next = nxt
        nxt.data[i].lru_prev = prev
        d.lru_prev = d.lru_next = None
        self.size -= 1

    def place_after(self, prev: TreeNode, node: TreeNode) -> None:
        """Moves the listed `node` right behind `prev` (where it may already be): `remove`
        then `insert_after`, inline, for the window refresh of every SWA match."""
        i = self.index
        d = node.data[i]
        old_prev, nxt = d.lru_prev, d.lru_next
        assert old_prev is not None and nxt is not None, f"{node} is not in LRU list {i}"
        if old_prev is prev:
            return
        old_prev.data[i].lru_next = nxt
        nxt.data[i].lru_prev = old_prev
        new_next = prev.data[i].lru_next
        assert new_next is not None, "place_after: prev is not in the list"
        d.lru_prev, d.lru_next = prev, new_next
        prev.data[i].lru_next = node
        new_next.data[i].lru_prev = node

    def move_to_mru(self, node: TreeNode) -> None:
        """`remove` then `insert_mru`, inline: runs on every match that resumes a state."""
        i, head = self.index, self.head
        d = node.data[i]
        prev, nxt = d.lru_prev, d.lru_next
        assert prev is not None and nxt is not None, f"{node} is not in LRU list {i}"
        if prev is head:
            return
        prev.data[i].lru_next = nxt
        nxt.data[i].lru_prev = prev
        first = head.data[i].lru_next
        assert first is not None
        d.lru_prev, d.lru_next = head, first
        head.data[i].lru_next = node
        first.data[i].lru_prev = node

    def least_recent_unlocked(self, before: TreeNode | None = None) -> TreeNode | None:
        """The least recent node with `lock_ref == 0`, searching from `before` (exclusive)
        towards the head, or from the tail when `before` is None or no longer listed."""
        i = self.index
        start = self.tail if before is None or before not in self else before
        node = start.data[i].lru_prev
        while node is not None and node is not self.head:
            if node.data[i].lock_ref == 0:
                return node
            node = node.data[i].lru_prev
        return None

    def evict_oldest_unlocked(self) -> Iterator[TreeNode]:
        """Plain LRU eviction: the least recent unlocked node, looked up again each time the
        caller asks (it evicts each one, which unlists it, before asking for the next)."""
        while (node := self.least_recent_unlocked()) is not None:
            yield node

    def __iter__(self) -> Iterator[TreeNode]:
        """All nodes, most recent first."""
        i = self.index
        node = self.head.data[i].lru_next
        while node is not None and node is not self.tail:
            yield node
            node = node.data[i].lru_next
