"""The host LRU list of an auxiliary component (SGLang's `host_lru_lists[SWA]` or `[MAMBA]`):
the nodes whose component lives on the host only, most recent first, the order its host
eviction walks from the least recent end. Linked by node id in two dicts, so a node needs no
second pair of intrusive links (the tree's are the component's device LRU list's)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from uniradix.tree.node import TreeNode

_HEAD, _TAIL = -1, -2


class HostLru:
    def __init__(self, index: int) -> None:
        self.index = index  # the component whose host lock a walk skips
        self._nodes: dict[int, TreeNode] = {}
        self._prev: dict[int, int] = {_TAIL: _HEAD}
        self._next: dict[int, int] = {_HEAD: _TAIL}

    def __contains__(self, node: TreeNode) -> bool:
        return node.id in self._nodes

    def __len__(self) -> int:
        return len(self._nodes)

    def __iter__(self) -> Iterator[TreeNode]:
        """Most recent first."""
        i = self._next[_HEAD]
        while i != _TAIL:
            yield self._nodes[i]
            i = self._next[i]

    def _link(self, prev: int, node: TreeNode) -> None:
        assert node.id not in self._nodes, f"{node} is already in the host LRU list"
        nxt = self._next[prev]
        self._nodes[node.id] = node
        self._prev[node.id], self._next[node.id] = prev, nxt
        self._next[prev] = self._prev[nxt] = node.id

    def insert_mru(self, node: TreeNode) -> None:
        self._link(_HEAD, node)

    def insert_after(self, prev: TreeNode, node: TreeNode) -> None:
        """Links `node` right behind the listed `prev` in recency."""
        self._link(prev.id, node)

    def remove(self, node: TreeNode) -> None:
        i = node.id
        del self._nodes[i]
        prev, nxt = self._prev.pop(i), self._next.pop(i)
        self._next[prev], self._prev[nxt] = nxt, prev

    def prev_unlocked(self, node: TreeNode | None) -> TreeNode | None:
        """The least recent node more recent than `node` (None: the least recent of all)
        that holds no host lock on the component."""
        i = self._prev[_TAIL if node is None else node.id]
        while i != _HEAD:
            found = self._nodes[i]
            if found.data[self.index].host_lock_ref == 0:
                return found
            i = self._prev[i]
        return None

    def eviction_order(self, done: Callable[[], bool]) -> Iterator[TreeNode]:
        """SGLang's host eviction walk: the nodes holding no host lock, least recent first,
        until `done()`. The next node is chosen before one is handed out (whose eviction may
        take others out of the list); the walk ends where that next one left the list."""
        node = self.prev_unlocked(None)
        while not done() and node is not None and node in self:
            after = self.prev_unlocked(node)
            yield node
            node = after
