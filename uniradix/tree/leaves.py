"""The set of evictable leaves, with a lazy heap giving them in eviction-policy order.

Rebuilding a heap over every leaf on each `evict` call costs O(leaves). Instead the heap
persists across calls and holds `(policy key, node id, node)` entries. An entry is stale when
its node left the set or its key changed (a match refreshed it); stale entries are skipped on
pop, and every member always has one entry with its current key (pushed on `add` and on
`refresh`). The heap is rebuilt when stale entries outnumber live ones.
"""

from __future__ import annotations

import heapq
from typing import Any

from uniradix.tree.node import TreeNode
from uniradix.tree.policy import PolicyKey


class EvictableLeaves:
    def __init__(self, policy: PolicyKey) -> None:
        self.policy = policy
        self.members: set[TreeNode] = set()
        self._heap: list[tuple[Any, int, TreeNode]] = []

    def __contains__(self, node: TreeNode) -> bool:
        return node in self.members

    def __len__(self) -> int:
        return len(self.members)

    def add(self, node: TreeNode) -> None:
        if node not in self.members:
            self.members.add(node)
            self._push(node)

    def discard(self, node: TreeNode) -> None:
        self.members.discard(node)

    def refresh(self, node: TreeNode) -> None:
        """Call after a member's policy key changed (access time, hit count)."""
        if node in self.members:
            self._push(node)

    def pop(self) -> TreeNode | None:
        """The member to evict first. Its heap entry is consumed, so the caller must evict it
        (which removes it from the set) or `refresh` it."""
        heap, members, policy = self._heap, self.members, self.policy
        while heap:
            key, _, node = heapq.heappop(heap)
            if node in members and key == policy(node):
                return node
        return None

    def unreachable(self) -> list[TreeNode]:
        """Members `pop` would never return: no heap entry carries their current key (a key
        changed without `refresh`). For the invariant checks: O(heap)."""
        policy, members = self.policy, self.members
        live = {node for key, _, node in self._heap if node in members and key == policy(node)}
        return [n for n in members if n not in live]

    def clear(self) -> None:
        self.members.clear()
        self._heap.clear()

    def _push(self, node: TreeNode) -> None:
        heap = self._heap
        if len(heap) > 2 * len(self.members) + 64:
            heap[:] = [(self.policy(n), n.id, n) for n in self.members if n is not node]
            heapq.heapify(heap)
        heapq.heappush(heap, (self.policy(node), node.id, node))
