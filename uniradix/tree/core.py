"""TreeCore: the radix tree's structure (match walk, insert walk, split, leaf removal).

The core knows nodes, keys, access times and which nodes are evictable leaves. It knows
nothing of pools, devices or model types: per-component data is redistributed on a split by
the components' `redistribute_on_split` hook, and it never frees memory.

Component 0 is the base component (full attention): a node is alive while its base value is
present, and leaves are evictable only when no component holds a lock on them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import chain
from typing import Any, NamedTuple, Protocol

from typing_extensions import Buffer

from uniradix.key import UNIT_BYTES, ChildKey, RadixKey
from uniradix.tree.acceptance import Validator, accepted_depth, accepted_one
from uniradix.tree.leaves import EvictableLeaves
from uniradix.tree.node import NO_CHILDREN, TreeNode
from uniradix.tree.policy import PolicyKey
from uniradix.tree.walk import shared_pages, unit_bytes, walker

_new_tuple = tuple.__new__


class SplitHook(Protocol):
    def redistribute_on_split(self, parent: TreeNode, child: TreeNode, split_len: int) -> None:
        """`parent` now holds the first `split_len` units of `child`'s old edge."""


class MatchWalk(NamedTuple):
    path: list[TreeNode]  # matched nodes from the root's child down (a split ends it)
    num_accepted: int  # path[:num_accepted] passed every validator; the rest did not
    matched_len: int  # units matched along the whole path


OverlapHook = Callable[[TreeNode, int, int], None]
"""Called as (node, offset of node in the key, units of node) for each reused node."""


class TreeCore:
    def __init__(
        self,
        num_components: int,
        page_size: int,
        policy: PolicyKey,
        split_hooks: Sequence[SplitHook] = (),
    ) -> None:
        if page_size < 1:
            raise ValueError(f"page_size must be >= 1, got {page_size}")
        self.num_components = num_components
        self.page_size = page_size
        self.split_hooks = list(split_hooks)
        # Set by a host tier: nodes whose base data left the device may then stay in the tree
        # (host-only), so a node with children can still be a device leaf. Without one, a
        # node with children never is, and the leaf test needs no look at them.
        self.host_only_nodes = False
        self.leaves = EvictableLeaves(policy)
        # node -> (its base value, a tensor over it): kept by the cache for matches that end
        # on that node alone (`uniradix.cache.paths.cpu_indices`), a few nodes at a time. Off
        # the node, so a node the cache never memoises carries nothing for it.
        self.slot_tensors: dict[TreeNode, tuple[Any, Any]] = {}
        self._next_id = 0
        self._time = 0
        self.root = self._new_node(b"", None, None)

    def reset(self) -> None:
        self.leaves.clear()
        self.slot_tensors.clear()
        self.root = self._new_node(b"", None, None)

    def tick(self) -> int:
        self._time += 1
        return self._time

    # ------------------------------------------------------------------ match
    def match(
        self,
        key: RadixKey | Buffer,
        num_units: int,
        validators: Sequence[Validator],
        required: Sequence[int] = (),
        windows: Sequence[tuple[int, int]] = (),
        extra_key: str | None = None,
    ) -> MatchWalk:
        """Walks the first `num_units` (whole pages) of `key` from the root. Splits a node
        where the key ends or diverges inside it. Every validator sees every path node in
        order (they may be stateful); the match is usable up to the deepest node all of them
        accepted that also holds data of every component index in `required` and, for each
        `(index, window)` of `windows`, ends `window` units of the path that all hold data of
        `index` (or has no node without it above: SWA, checked here at no call per node).
        `key` may also be its units alone, in any buffer of packed units, with `extra_key` its
        namespace: an engine's `array('q')` of token ids, which the native walk reads in
        place (no `bytes` copy of the request)."""
        units: Buffer
        if isinstance(key, RadixKey):
            if key.start:
                raise ValueError(f"a match needs every unit of the key, got {key!r:.80}")
            units, extra_key = key.units, key.extra_key
        else:
            units = key
        n_bytes = num_units * UNIT_BYTES
        path, off, diverged = walker()(
            self.root, units, n_bytes, self.page_size * UNIT_BYTES, extra_key
        )
        if diverged is not None:
            split_len = shared_pages(diverged, units, off, n_bytes, self.page_size)
            path.append(self.split(diverged, split_len))
            off += split_len * UNIT_BYTES
        if not validators:
            if not windows and not required:
                return _new_tuple(MatchWalk, (path, len(path), off // UNIT_BYTES))
            if len(windows) <= 1 and len(required) <= 1:
                # SWA, Mamba or both: the general loop below without its generality;
                # `tuple.__new__`: no NamedTuple `__new__` frame on every hybrid match
                accepted = accepted_one(path, windows, required)
                return _new_tuple(MatchWalk, (path, accepted, off // UNIT_BYTES))
        accepted = accepted_depth(path, validators, required, windows)
        return MatchWalk(path, accepted, off // UNIT_BYTES)

    def touch_path(self, path: Sequence[TreeNode]) -> None:
        """Marks `path` (root side first) accessed; deeper nodes get later times, so a parent
        never looks more recent than its child."""
        t = self._time
        for n in path:
            t += 1
            n.last_access_time = t
        self._time = t
        if self.host_only_nodes:
            # A device leaf may sit above host-only nodes on the path: every member's heap
            # entry must carry its new time, or the lazy heap loses it (see leaves.py).
            for n in path:
                self.leaves.refresh(n)
        elif path:
            self.leaves.refresh(path[-1])

    # ------------------------------------------------------------------ insert
    def insert(
        self,
        key: RadixKey | Buffer,
        num_units: int,
        on_overlap: OverlapHook | None,
        inserted_len: int = 0,
        priority: int = 0,
        leaf_tail: int = 0,
        tail_from: int = 0,
        extra_key: str | None = None,
    ) -> tuple[TreeNode, int, bool]:
        """Walks the first `num_units` (whole pages) of `key`, splitting where it diverges,
        calls `on_overlap` (None: nothing to do) for each node the key already covers, and
        appends a new leaf for the rest.

        Returns (target node ending the key, units already present, whether it is a new leaf).
        The new leaf carries no component data: the caller commits it. A `PathTailKey`'s walk
        starts below its anchor, whose path it reuses whole (`_anchor_path`). `key` may be its
        units alone with `extra_key`, as for `match`: only the new leaf's units are copied.
        `leaf_tail` > 0: a new leaf starting at unit `tail_from` or later and longer than
        `leaf_tail` units comes as two nodes (`_tailed_leaf`); the target is the lower one,
        holding the last `leaf_tail` units (a cache that caps what a leaf holds, SWA, would
        split it so at once: this costs less than the split).
        """
        units: Buffer
        anchor = None
        if isinstance(key, RadixKey):
            units, extra_key = key.units, key.extra_key
            if key.start:
                anchor = self._anchor_path(key, num_units)
        else:
            units = key
        ns, page_bytes = extra_key, self.page_size * UNIT_BYTES
        base = sum(n.num_tokens for n in anchor) if anchor else 0
        n_bytes = (num_units - base) * UNIT_BYTES
        start_node = anchor[-1] if anchor else self.root
        path, off, diverged = walker()(start_node, units, n_bytes, page_bytes, ns)
        covered: Iterable[TreeNode] = path if anchor is None else anchor + path
        if diverged is not None:
            # Split once the nodes above are done, as a walk meeting it in turn would.
            split_len = shared_pages(diverged, units, off, n_bytes, self.page_size)
            covered = chain(covered, _split_after(self, diverged, split_len))
            off += split_len * UNIT_BYTES
        node, at = start_node, 0
        for child in covered:  # what the key covers: times, priority, hits, the hook
            p = child.num_tokens
            self._time += 1  # `tick()` inline: runs per node per insert
            child.last_access_time = self._time
            if priority > child.priority:
                child.priority = priority
            if at + p > inserted_len:
                child.hit_count += 1
            self.leaves.refresh(child)
            if on_overlap is not None:
                on_overlap(child, at, p)
            at += p
            node = child
        start = base + off // UNIT_BYTES
        if off == n_bytes:
            return node, start, False
        edge = unit_bytes(units, off, n_bytes)
        child_key = edge[:page_bytes] if ns is None else (ns, edge[:page_bytes])
        if 0 < leaf_tail < (n_bytes - off) // UNIT_BYTES and start >= tail_from:
            leaf = self._tailed_leaf(node, child_key, edge, ns, leaf_tail, priority)
        else:
            leaf = self._new_node(edge, ns, node)
            self._adopt(node, child_key, leaf)
        leaf.priority = priority
        self.leaves.discard(node)
        return leaf, start, True

    def _tailed_leaf(
        self,
        parent: TreeNode,
        child_key: ChildKey,
        edge: bytes,
        ns: str | None,
        tail: int,
        priority: int,
    ) -> TreeNode:
        """Hangs `edge` under `parent` as an upper node and, below it, a leaf of its last
        `tail` units, and returns the leaf: the ids, times and priority that `split(leaf of
        edge, len - tail)` would give (neither holds data, so no split hook has any to move)."""
        cut = len(edge) - tail * UNIT_BYTES
        self._next_id += 1
        self._time += 1
        leaf = TreeNode(self._next_id, edge[cut:], ns, self.num_components, None, self._time)
        upper = self._new_node(edge[:cut], ns, parent)
        upper.creation_time = leaf.creation_time
        upper.priority = priority
        self._time += 1
        leaf.last_access_time = self._time
        leaf.parent = upper
        upper.children = {leaf.child_key(self.page_size): leaf}
        self._adopt(parent, child_key, upper)
        return leaf

    def _anchor_path(self, key: RadixKey, num_units: int) -> list[TreeNode]:
        """The path (root side first) of a path tail key's anchor, which `insert` reuses
        whole, comparing no units (they are the anchor's path by the key's definition)."""
        anchor = getattr(key, "anchor", None)
        path: list[TreeNode] = []
        node = anchor
        while isinstance(node, TreeNode) and node.parent is not None:
            path.append(node)
            node = node.parent
        depth = sum(n.num_tokens for n in path)
        if node is not self.root or depth != key.start or num_units < key.start:
            raise ValueError(
                f"path tail key of start={key.start} and {num_units} units: its anchor "
                f"{anchor!r} is not a node of this tree {key.start} units deep"
            )
        path.reverse()
        return path

    # ------------------------------------------------------------------ structure
    def split(self, child: TreeNode, split_len: int) -> TreeNode:
        """Cuts `child`'s edge after `split_len` units; returns the new parent."""
        assert 0 < split_len < child.num_tokens and split_len % self.page_size == 0
        parent = child.parent
        assert parent is not None
        cut = split_len * UNIT_BYTES
        new = self._new_node(child.key[:cut], child.extra_key, parent)
        new.priority = child.priority
        new.hit_count = child.hit_count
        new.creation_time = child.creation_time
        # As in the reference: the parent's access time is fresh, and the child's fresher.
        self._time += 1  # `tick()` inline
        child.last_access_time = self._time
        self.leaves.refresh(child)
        parent.children[child.child_key(self.page_size)] = new
        child.key = child.key[cut:]
        child.num_tokens -= split_len
        child.parent = new
        new.children = {child.child_key(self.page_size): child}
        for hook in self.split_hooks:
            hook.redistribute_on_split(new, child, split_len)
        return new

    def add_leaf(self, parent: TreeNode, edge: bytes, extra_key: str | None) -> TreeNode:
        """Hangs a new node of units `edge` under `parent`, whose children hold no node
        starting with its first page: for walks that `insert` does not cover (an engine's
        own insert protocol). The leaf carries no component data: the caller commits it."""
        leaf = self._new_node(edge, extra_key, parent)
        self._adopt(parent, leaf.child_key(self.page_size), leaf)
        self.leaves.discard(parent)
        return leaf

    def remove_leaf(self, node: TreeNode) -> TreeNode:
        """Detaches a childless node (its component data must already be gone)."""
        parent = node.parent
        assert parent is not None and not node.children, f"{node} is not a removable leaf"
        del parent.children[node.child_key(self.page_size)]
        if not parent.children:
            parent.children = NO_CHILDREN  # its emptied dict keeps a table: let it go
        node.parent = None
        self.leaves.discard(node)
        self.update_leaf(parent)
        return parent

    def is_evictable_leaf(self, node: TreeNode) -> bool:
        """An unlocked node with base data on the device and no child that has any (children
        whose base data left the device, e.g. for a host tier, do not count)."""
        if node.parent is None or node.data[0].value is None:
            return False
        if node.children:
            if not self.host_only_nodes:
                return False
            for child in node.children.values():
                if child.data[0].value is not None:
                    return False
        for d in node.data:  # noqa: SIM110 (a generator costs more; runs on every insert and lock)
            if d.lock_ref:
                return False
        return True

    def update_leaf(self, node: TreeNode) -> None:
        """Re-evaluates `node`'s membership of the evictable leaf set."""
        if self.is_evictable_leaf(node):
            self.leaves.add(node)
        else:
            self.leaves.discard(node)

    def in_tree(self, node: TreeNode) -> bool:
        while node.parent is not None:
            node = node.parent
        return node is self.root

    def path_to_root(self, node: TreeNode) -> Iterator[TreeNode]:
        """`node` and its ancestors, excluding the root."""
        while node.parent is not None:
            yield node
            node = node.parent

    def nodes(self) -> Iterator[TreeNode]:
        """Every node except the root, parents before children."""
        stack = list(self.root.children.values())
        while stack:
            node = stack.pop()
            yield node
            stack.extend(node.children.values())

    def prefix_len(self, node: TreeNode) -> int:
        """Units from the root to the end of `node`."""
        return sum(n.num_tokens for n in self.path_to_root(node))

    @staticmethod
    def _adopt(parent: TreeNode, child_key: ChildKey, child: TreeNode) -> None:
        """Hangs `child` under `parent`, giving a childless parent a dict of its own."""
        if parent.children:
            parent.children[child_key] = child
        else:
            parent.children = {child_key: child}

    def _new_node(self, key: bytes, extra_key: str | None, parent: TreeNode | None) -> TreeNode:
        self._next_id += 1
        self._time += 1  # `tick()` inline
        return TreeNode(self._next_id, key, extra_key, self.num_components, parent, self._time)


def _split_after(tree: TreeCore, child: TreeNode, split_len: int) -> Iterator[TreeNode]:
    """The node `tree.split(child, split_len)` makes, split only when asked for: after the
    nodes above it had their turn (their hooks may split them, and the ids, times and
    events must come in the walk's order)."""
    yield tree.split(child, split_len)
