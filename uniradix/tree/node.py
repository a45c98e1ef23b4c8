"""TreeNode and the per-component data it carries.

A node is one edge of the radix tree: `key` holds its units (see `uniradix.key`), and
`data[i]` holds what component `i` caches for exactly those units. The tree knows nothing
of what a value means; components interpret it.
"""

from __future__ import annotations

from itertools import repeat
from typing import Any, NoReturn

from uniradix.key import UNIT_BYTES, ChildKey
from uniradix.slots import Slots


class ComponentData:
    """One component's state on one node.

    `value` holds the pool indices (a host numpy array; `None` = tombstone: the node stays,
    this component's state is gone). `lock_ref` counts the locks that keep it from eviction.
    `lru_prev` and `lru_next` are the intrusive links of the component's LRU list.
    """

    __slots__ = (
        "host_lock_ref",
        "host_value",
        "lock_ref",
        "lru_next",
        "lru_prev",
        "metadata",
        "value",
    )

    def __init__(self, value: Slots | None = None) -> None:
        self.value = value
        self.lock_ref = 0
        self.host_value: Slots | None = None
        self.host_lock_ref = 0
        self.metadata: dict[str, Any] | None = None
        self.lru_prev: TreeNode | None = None
        self.lru_next: TreeNode | None = None


class _NoChildren(dict):  # type: ignore[type-arg]
    """The children of every node that has none: one shared empty dict, so that a leaf (half
    the nodes of a tree) carries no dict of its own (64 bytes). It refuses to change; the tree
    gives a node its own dict when it gains its first child (`TreeCore`)."""

    __slots__ = ()

    def _refuse(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise TypeError("a childless node's shared children dict cannot change")

    __setitem__ = __delitem__ = setdefault = update = pop = popitem = clear = __ior__ = _refuse


NO_CHILDREN: dict[Any, Any] = _NoChildren()


class TreeNode:
    """A radix-tree node. `parent is None` marks the root or a node removed from the tree."""

    __slots__ = (
        "children",
        "creation_time",
        "data",
        "extra_key",
        "hit_count",
        "id",
        "key",
        "last_access_time",
        "num_tokens",
        "parent",
        "priority",
    )

    def __init__(
        self,
        node_id: int,
        key: bytes,
        extra_key: str | None,
        num_components: int,
        parent: TreeNode | None,
        time: int,
    ) -> None:
        self.id = node_id
        self.key = key
        self.num_tokens = len(key) // UNIT_BYTES  # units on this edge; kept in step with key
        self.extra_key = extra_key
        self.parent = parent
        self.children: dict[ChildKey, TreeNode] = NO_CHILDREN
        # A tuple, not a list: 16 bytes less per node, and the entries never change (their
        # fields do). Spelled out for one and two components (full alone, full and one
        # other): half the cost of `map` on every new node.
        if num_components == 1:
            self.data: tuple[ComponentData, ...] = (ComponentData(),)
        elif num_components == 2:
            self.data = (ComponentData(), ComponentData())
        else:
            self.data = tuple(map(ComponentData, repeat(None, num_components)))
        self.last_access_time = time
        self.creation_time = time
        self.hit_count = 0
        self.priority = 0

    def child_key(self, page_size: int) -> ChildKey:
        page = self.key[: page_size * UNIT_BYTES]
        return page if self.extra_key is None else (self.extra_key, page)

    def __repr__(self) -> str:
        return f"TreeNode(id={self.id}, num_tokens={self.num_tokens})"
